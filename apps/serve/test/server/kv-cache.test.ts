import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metric, post, startServer, type ServeProcess } from '../support/serve-process.js';
import { writeTinyQwen3Next } from '../support/tiny-qwen3-next.js';

// `metrale serve` with contexts of 262 144 tokens for 256 sequences on a tiny hybrid model (GDN and
// attention): the KV cache is a pool of pages sized from memory, not max-batch × max-model-len up
// front, and a repeated 3 000-token prefix is prefilled once.

const root = mkdtempSync(join(tmpdir(), 'metrale-kv-serve-'));
const model = join(root, 'tiny');
writeTinyQwen3Next(model, { tokenizer: true });
let big: ServeProcess;
let plain: ServeProcess;

beforeAll(async () => {
  [big, plain] = await Promise.all([
    startServer(['--model', model, '--max-batch', '256', '--max-model-len', '262144']),
    // 512 KiB of KV cache: 240 pages of 16 tokens (bf16, 2 KiB a page) once the block table is taken out, fewer than --max-model-len.
    startServer(['--model', model, '--no-prefix-caching', '--max-model-len', '4096', '--kv-cache-memory', '512KiB']),
  ]);
  await Promise.all([big.ready(60_000), plain.ready(60_000)]);
}, 120_000);

afterAll(async () => {
  expect(await big?.stop()).toBe(0);
  expect(await plain?.stop()).toBe(0);
  rmSync(root, { recursive: true, force: true });
});

const PREFIX = Array.from({ length: 3000 }, (_, i) => 2 + ((i * 13) % 61));

async function complete(server: ServeProcess, prompt: number[]): Promise<{ status: number; tokens: number; text: string; body: any }> {
  const r = await post(server.url, '/v1/completions', { model, prompt, max_tokens: 8, temperature: 0, ignore_eos: true });
  return { status: r.status, tokens: r.body?.usage?.completion_tokens, text: r.body?.choices?.[0]?.text, body: r.body };
}

describe('the KV cache of metrale serve', () => {
  it('starts with --max-batch 256 --max-model-len 262144 and says how many tokens fit', async () => {
    const kv = await big.logLine((l) => typeof l.kv_cache_tokens === 'number');
    expect(kv.max_model_len).toBe(262144);
    expect(kv.block_size).toBe(16);
    expect(kv.prefix_caching).toBe(true);
    // The pool is sized from the CPU default (256 MiB), far below 256 × 262 144 tokens.
    expect(kv.kv_cache_tokens as number).toBeGreaterThan(262144);
    expect(kv.kv_cache_tokens as number).toBeLessThan(256 * 262144);
    expect(kv.msg).toMatch(/^KV cache: \d+ tokens fit \(\d+ pages of 16\)$/);
  });

  it('a second request sharing a 3 000-token prefix answers as without the cache and counts as a prefix hit', async () => {
    const first = await complete(big, [...PREFIX, 7, 8, 9]);
    expect(first.status).toBe(200);
    expect(await metric(big.url, 'vllm:prefix_cache_hits_total')).toBe(0);
    const second = await complete(big, [...PREFIX, 40, 41]);
    const cold = await complete(plain, [...PREFIX, 40, 41]);
    expect(second.status).toBe(200);
    expect(second.tokens).toBe(8);
    expect(second.text).toBe(cold.text);
    // GDN state is saved at chunk ends (multiples of the default --prefill-chunk, 1024 tokens): the second request starts at 2048.
    expect(await metric(big.url, 'vllm:prefix_cache_hits_total')).toBe(2048);
    expect(await metric(big.url, 'vllm:prefix_cache_queries_total')).toBe(3003 + 3002);
    expect(await metric(plain.url, 'vllm:prefix_cache_hits_total')).toBe(0);
    const usage = await metric(big.url, 'vllm:kv_cache_usage_perc');
    expect(usage).toBeGreaterThanOrEqual(0);
    expect(usage).toBeLessThanOrEqual(1);
    expect(await metric(big.url, 'vllm:num_preemptions_total')).toBe(0);
  }, 240_000);

  it('a request longer than the cache can ever hold gets a 400 naming the sizes; the log warned of it', async () => {
    const kv = await plain.logLine((l) => typeof l.kv_cache_tokens === 'number');
    expect(kv).toMatchObject({ kv_cache_pages: 240, kv_cache_tokens: 3840, prefix_caching: false, state_snapshots: 0 });
    await plain.logLine((l) => /holds fewer tokens than --max-model-len/.test(String(l.msg)));
    const r = await post(plain.url, '/v1/completions', { model, prompt: [5, 6, 7], max_tokens: 4000, temperature: 0 });
    expect(r.status).toBe(400);
    expect(r.body.error.message).toMatch(/3 prompt tokens \+ 4000 to generate need 251 KV-cache pages of 16 tokens, but the cache holds 240 pages \(3840 tokens\)/);
  });
});
