import { describe, expect, it } from 'vitest';
import { TextStream, type TokenDecoder } from '../../src/server/text-stream.js';

// A byte-level toy tokenizer: each token is one byte; decoding replaces a broken UTF-8 tail by U+FFFD.
const bytes = (s: string) => [...Buffer.from(s, 'utf8')];
const decoder: TokenDecoder = { decode: (ids) => Buffer.from(ids).toString('utf8') };

function run(text: string, stops: string[], step = 1): { out: string; stopped: boolean; consumed: number } {
  const ids = bytes(text);
  const s = new TextStream(decoder, stops);
  let out = '';
  let consumed = 0;
  for (let i = 0; i < ids.length; i += step) {
    const piece = s.push(ids.slice(i, i + step));
    out += piece.text;
    consumed += piece.tokens;
    if (piece.stopped) return { out, stopped: true, consumed };
  }
  return { out: out + s.flush(), stopped: false, consumed };
}

describe('TextStream', () => {
  it('streams text whole, never splitting a multi-byte character', () => {
    const ids = bytes('héllo wörld ✓');
    const s = new TextStream(decoder);
    const pieces: string[] = [];
    for (const id of ids) pieces.push(s.push([id]).text);
    pieces.push(s.flush());
    expect(pieces.join('')).toBe('héllo wörld ✓');
    expect(pieces.some((p) => p.includes('\uFFFD'))).toBe(false);
  });

  it('ends before a stop string that spans tokens, and counts the tokens up to it', () => {
    for (const step of [1, 2, 3, 7]) {
      const r = run('one two three four', ['ee f', 'zzz'], step);
      expect(r.out).toBe('one two thr');
      expect(r.stopped).toBe(true);
      expect(r.consumed).toBeLessThanOrEqual(bytes('one two three f').length);
      expect(r.consumed).toBeGreaterThanOrEqual(bytes('one two three ').length + 1);
    }
  });

  it('picks the earliest of several stop strings', () => {
    expect(run('abcdef', ['de', 'bc']).out).toBe('a');
  });

  it('holds back only what could start a stop string, and flushes it at the end', () => {
    const s = new TextStream(decoder, ['xyz']);
    expect(s.push(bytes('abcx')).text).toBe('ab');
    expect(s.push(bytes('y')).text).toBe('c');
    expect(s.flush()).toBe('xy');
    expect(run('no stop here', ['STOP']).out).toBe('no stop here');
  });

  it('gives nothing more once stopped', () => {
    const s = new TextStream(decoder, ['b']);
    expect(s.push(bytes('ab')).stopped).toBe(true);
    expect(s.push(bytes('cd'))).toEqual({ text: '', tokens: 0, stopped: true });
    expect(s.flush()).toBe('');
  });
});
