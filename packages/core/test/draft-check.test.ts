import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../src/index.js';
import { DraftCheck } from '../src/spec/draft-check.js';

describe('DraftCheck', () => {
  it('settles at the first decoded token that differs, or when every draft matched, with what a greedy verify accepts', () => {
    const check = new DraftCheck([3, 5, 7]);
    expect(check.next(3)).toBeUndefined();
    expect(check.next(5)).toBeUndefined();
    expect(check.next(9)).toBe(2);
    const all = new DraftCheck([3, 3]);
    expect(all.next(3)).toBeUndefined();
    expect(all.next(3)).toBe(2);
    expect(new DraftCheck([4]).next(8)).toBe(0);
    expect(() => new DraftCheck([])).toThrow(InvalidArgumentError);
  });
});
