import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type ServeProcess } from '../support/serve-process.js';
import { writeTinyQwen3Next } from '../support/tiny-qwen3-next.js';

// `metrale serve --tensor-parallel-size 2` on the CPU backend: the engine worker leads rank 0 and
// starts rank 1 on a thread of its own; batched greedy requests get the tokens one device gives.
const dir = mkdtempSync(join(tmpdir(), 'metrale-tp-serve-'));
writeTinyQwen3Next(dir, { tokenizer: true, dtype: 'f32' });
let one: ServeProcess;
let two: ServeProcess;

beforeAll(async () => {
  [one, two] = await Promise.all([
    startServer(['--model', dir, '--dtype', 'f32']),
    startServer(['--model', dir, '--dtype', 'f32', '--tensor-parallel-size', '2']),
  ]);
  await Promise.all([one.ready(60_000), two.ready(60_000)]);
}, 90_000);

afterAll(async () => {
  // A clean exit: the follower rank's thread ends with the engine.
  expect(await one?.stop()).toBe(0);
  expect(await two?.stop()).toBe(0);
  rmSync(dir, { recursive: true, force: true });
});

describe('metrale serve --tensor-parallel-size 2', () => {
  it('answers batched greedy requests with the tokens of one device', async () => {
    const prompts = [[4, 5, 6, 7], [8, 9, 10, 11, 12, 13], [20, 3], [30, 31, 32, 33, 34, 35, 36, 37, 38]];
    const ask = (server: ServeProcess, prompt: number[]) => server.client.completions.create({ model: dir, prompt, max_tokens: 12, temperature: 0, ignore_eos: true } as any);
    const expected = await Promise.all(prompts.map((p) => ask(one, p)));
    const got = await Promise.all(prompts.map((p) => ask(two, p)));
    expect(got.map((r) => r.choices[0]!.text)).toEqual(expected.map((r) => r.choices[0]!.text));
    expect(got.map((r) => r.usage!.completion_tokens)).toEqual(prompts.map(() => 12));
  }, 60_000);
});
