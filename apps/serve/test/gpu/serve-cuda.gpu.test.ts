import { probe } from '@metrale/cuda-backend';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metric, startServer, type ServeProcess } from '../support/serve-process.js';

// `metrale serve --backend cuda` on the embedded model: the same API as on the CPU, and the same
// greedy text as the CPU server (the embedded lm head's word map leaves wide margins).
const cuda = probe();
if (!cuda.available) console.warn(`[serve gpu] skipped: ${cuda.reason}`);

const MODEL = 'metrale/embedded-qwen3-next';
const PROMPTS = ['Hello, who are you?', 'Write a poem about the sea.', 'What is 2+2?', 'Tell me a story about a dragon', 'a b c d e f g', 'The capital of France is'];
let gpuServer: ServeProcess;
let cpuServer: ServeProcess;

describe.skipIf(!cuda.available)('metrale serve --backend cuda', () => {
  beforeAll(async () => {
    gpuServer = await startServer(['--backend', 'cuda', '--max-batch', '16']);
    cpuServer = await startServer(['--backend', 'cpu', '--max-batch', '16']);
    await Promise.all([gpuServer.ready(120_000), cpuServer.ready()]);
  }, 180_000);

  afterAll(async () => {
    expect(await gpuServer?.stop()).toBe(0);
    expect(await cpuServer?.stop()).toBe(0);
  });

  const chat = (server: ServeProcess, content: string, stream = false) => server.client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content }], max_tokens: 32, temperature: 0, ignore_eos: true, stream,
  } as any);

  it('serves on the GPU and matches the CPU server token for token', async () => {
    const health = await (await fetch(`${gpuServer.url}/health`)).json() as { status: string };
    expect(health.status).toBe('ok');
    const ready = await gpuServer.logLine((l) => l.msg === 'ready');
    expect(ready).toMatchObject({ backend: 'cuda' });
    expect(ready.graph_capture_ms).toBeGreaterThan(0);
    console.log(`decode graphs of ${ready.max_batch} slots' buckets captured in ${ready.graph_capture_ms} ms`);
    const onGpu = await Promise.all(PROMPTS.map((p) => chat(gpuServer, p)));
    const onCpu = await Promise.all(PROMPTS.map((p) => chat(cpuServer, p)));
    const texts = (rs: any[]) => rs.map((r) => r.choices[0].message.content);
    console.log(JSON.stringify(texts(onGpu).map((t, i) => ({ gpu: t, same: t === texts(onCpu)[i] }))));
    expect(texts(onGpu)).toEqual(texts(onCpu));
  });

  it('16 concurrent greedy streams equal the same requests alone', async () => {
    const prompts = Array.from({ length: 16 }, (_, i) => `${PROMPTS[i % PROMPTS.length]} (${i})`);
    const alone: string[] = [];
    for (const p of prompts) alone.push(((await chat(gpuServer, p)) as any).choices[0].message.content);
    const together = await Promise.all(prompts.map(async (p) => {
      let text = '';
      for await (const chunk of (await chat(gpuServer, p, true)) as any) text += chunk.choices[0]?.delta?.content ?? '';
      return text;
    }));
    expect(together).toEqual(alone);
    expect(await metric(gpuServer.url, 'vllm:num_requests_running')).toBe(0);
  });

  it('16 concurrent seeded sampled streams (tokens picked on the device, two with their logprobs) equal the same requests alone', async () => {
    const sampled = (content: string, seed: number, stream: boolean, logprobs: boolean) => gpuServer.client.chat.completions.create({
      model: MODEL, messages: [{ role: 'user', content }], max_tokens: 24, temperature: 0.8, top_p: 0.9, top_k: 20, seed, ignore_eos: true, stream,
      ...(logprobs ? { logprobs: true, top_logprobs: 2 } : {}),
    } as any);
    const prompts = Array.from({ length: 16 }, (_, i) => `${PROMPTS[i % PROMPTS.length]} [${i}]`);
    const withLogprobs = (i: number) => i % 8 === 3;
    const alone: string[] = [];
    const aloneLogprobs: unknown[] = [];
    for (const [i, p] of prompts.entries()) {
      const choice = ((await sampled(p, 100 + i, false, withLogprobs(i))) as any).choices[0];
      alone.push(choice.message.content);
      if (withLogprobs(i)) aloneLogprobs.push(choice.logprobs.content);
    }
    const togetherLogprobs: unknown[][] = prompts.map(() => []);
    const together = await Promise.all(prompts.map(async (p, i) => {
      let text = '';
      for await (const chunk of (await sampled(p, 100 + i, true, withLogprobs(i))) as any) {
        text += chunk.choices[0]?.delta?.content ?? '';
        togetherLogprobs[i]!.push(...(chunk.choices[0]?.logprobs?.content ?? []));
      }
      return text;
    }));
    expect(together).toEqual(alone);
    // Batched, the same tokens and top tokens; the values within the logits' own change with the
    // batch's shape (the GEMMs' last bits differ by batch size: 1e-6 here on an H100).
    type Entry = { token: string; logprob: number; top_logprobs: { token: string; logprob: number }[] };
    const shape = (c: Entry[]) => c.map((t) => [t.token, t.top_logprobs.map((x) => x.token)]);
    const batched = togetherLogprobs.filter((_, i) => withLogprobs(i)) as Entry[][];
    expect(batched.map(shape)).toEqual((aloneLogprobs as Entry[][]).map(shape));
    batched.forEach((c, i) => c.forEach((t, j) => {
      const a = (aloneLogprobs as Entry[][])[i]![j]!;
      expect(Math.abs(t.logprob - a.logprob)).toBeLessThan(1e-3);
      t.top_logprobs.forEach((x, q) => expect(Math.abs(x.logprob - a.top_logprobs[q]!.logprob)).toBeLessThan(1e-3));
    }));
    for (const content of aloneLogprobs as { logprob: number; top_logprobs: { logprob: number }[] }[][]) {
      expect(content.length).toBeGreaterThan(0);
      for (const t of content) {
        expect(t.logprob).toBeLessThanOrEqual(0);
        expect(t.top_logprobs).toHaveLength(2);
        expect(t.top_logprobs[0]!.logprob).toBeGreaterThanOrEqual(Math.max(t.top_logprobs[1]!.logprob, t.logprob));
      }
    }
    // Sampling at temperature 0.8 does not collapse onto the greedy answers.
    const greedy = await Promise.all(prompts.slice(0, 4).map(async (p) => ((await chat(gpuServer, p)) as any).choices[0].message.content));
    expect(alone.slice(0, 4)).not.toEqual(greedy);
  });

  it('sizes the KV page pool from the GPU memory left under --gpu-memory-utilization, and reuses a repeated prefix', async () => {
    const kv = await gpuServer.logLine((l) => typeof l.kv_cache_tokens === 'number');
    console.log(`[serve gpu] ${String(kv.msg)}: ${kv.kv_cache_bytes} bytes, ${kv.state_snapshots} GDN snapshots`);
    // The embedded model's K/V take 256 bytes a token: 0.9 of an H200 holds millions, capped at every slot at full length.
    expect(kv.kv_cache_tokens).toBe(16 * 2048);
    expect(kv.prefix_caching).toBe(true);
    const long = `${'The sea and the ships that sail on it. '.repeat(150)}`; // past one 1024-token prefill chunk: a hybrid model's prefix hit starts at a chunk end
    // The same prompt twice: the first computes every block, the second starts from the cached ones
    // and must answer alike (a long random-model prompt leaves too thin margins to compare with the CPU).
    const first = await chat(gpuServer, `${long} A question?`) as any;
    const before = await metric(gpuServer.url, 'vllm:prefix_cache_hits_total');
    const second = await chat(gpuServer, `${long} A question?`) as any;
    expect(await metric(gpuServer.url, 'vllm:prefix_cache_hits_total')).toBeGreaterThan(before);
    expect(second.choices[0].message.content).toBe(first.choices[0].message.content);
    expect(first.choices[0].message.content.length).toBeGreaterThan(0);
  });
});
