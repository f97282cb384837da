import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metric, startServer, type ServeProcess } from '../support/serve-process.js';
import { writeTinyQwen3Next } from '../support/tiny-qwen3-next.js';

// A model whose greedy text cycles (4 5 6 7 4 …): n-gram drafts match and get accepted.
const dir = mkdtempSync(join(tmpdir(), 'metrale-spec-serve-'));
writeTinyQwen3Next(dir, { bigram: true, tokenizer: true });
let plain: ServeProcess;
let sped: ServeProcess;

beforeAll(async () => {
  [plain, sped] = await Promise.all([startServer(['--model', dir]), startServer(['--model', dir, '--spec', 'ngram:k=3,adaptive=0'])]);
  await Promise.all([plain.ready(), sped.ready()]);
}, 60_000);

afterAll(async () => {
  expect(await plain?.stop()).toBe(0);
  expect(await sped?.stop()).toBe(0);
  rmSync(dir, { recursive: true, force: true });
});

describe('metrale serve --spec ngram', () => {
  it('returns the tokens greedy decoding returns without it, concurrently, and counts accepted drafts', async () => {
    const prompts = [[4, 5, 6, 7, 4, 5, 6], [8, 9, 10, 11, 8, 9], [12, 13, 14], [20, 21, 22, 23, 20, 21, 22, 23, 20]];
    const ask = (server: ServeProcess, prompt: number[]) => server.client.completions.create({ model: dir, prompt, max_tokens: 24, temperature: 0, ignore_eos: true } as any);
    const expected = await Promise.all(prompts.map((p) => ask(plain, p)));
    const got = await Promise.all(prompts.map((p) => ask(sped, p)));
    expect(got.map((r) => r.choices[0]!.text)).toEqual(expected.map((r) => r.choices[0]!.text));
    expect(got.map((r) => r.usage!.completion_tokens)).toEqual(prompts.map(() => 24));
    const drafted = await metric(sped.url, 'vllm:spec_decode_num_draft_tokens_total');
    const accepted = await metric(sped.url, 'vllm:spec_decode_num_accepted_tokens_total');
    expect(drafted).toBeGreaterThan(0);
    expect(accepted).toBeGreaterThan(0);
    expect(accepted).toBeLessThanOrEqual(drafted);
    // Verify steps emit several tokens at once: fewer steps (prefill included) than tokens.
    expect(await metric(sped.url, 'vllm:iteration_tokens_total_count')).toBeLessThan(4 * 24);
  }, 60_000);

  it('samples with a seed reproducibly under speculation', async () => {
    const ask = () => sped.client.completions.create({ model: dir, prompt: [4, 5, 6, 7, 4, 5], max_tokens: 16, temperature: 0.7, seed: 3, ignore_eos: true } as any);
    const [a, b] = await Promise.all([ask(), ask()]);
    expect(b.choices[0]!.text).toBe(a.choices[0]!.text);
  }, 60_000);
});
