import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

// The whole-model benches, as the H200 runs them, at the tiny shape on the CPU device: every mode
// (graphs, speculation, a timed eager pass) builds its own step driver over one built model, and
// each writes its JSON. A bench that breaks here would otherwise break only on the GPU machine.

const out = mkdtempSync(join(tmpdir(), 'metrale-benches-'));
afterAll(() => rmSync(out, { recursive: true, force: true }));

let runs = 0;
function bench(script: string, args: string[]): Record<string, unknown> {
  const file = join(out, `${script}.${++runs}.json`);
  const run = spawnSync(process.execPath, [join('bench', script), '--backend', 'cpu', '--tiny', ...args, '--out', file], { encoding: 'utf8', timeout: 120_000 });
  expect(run.status, `${script}: ${run.stderr}`).toBe(0);
  return JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
}

interface DecodeReport {
  model: string;
  adapter: string;
  results: { batch: number; spec: string | null; tokens_per_s: number; graph_ms?: number }[];
  floor: { step_bytes: Record<string, number> };
  layer_times: { batch: number; launches_per_step: number; ms_per_step_by_kind: Record<string, number> }[];
}

interface RequestFigures {
  prompt_tokens: number;
  decode_tokens: number;
  ttft_ms: number;
  decode_ms_per_token: number;
}

interface PrefixFigures {
  prefix_cache_queries: number;
  prefix_cache_hits: number;
  prefilled_rows: number;
  tokens: number[][];
}

interface LongContextReport {
  adapter: string;
  startup: Record<string, unknown> & { kv_cache_tokens: number; state_snapshots: number };
  startup_no_prefix_caching: Record<string, unknown>;
  prompt: RequestFigures;
  long: RequestFigures;
  prefix: { repeated: PrefixFigures; fresh: PrefixFigures; repeated_no_prefix_caching: PrefixFigures; same_tokens: boolean };
}

describe('whole-model benches on the CPU device (tiny shape)', () => {
  it('decode: every batch with and without speculation, and the time per layer kind', () => {
    // The 80B bench by the name the records cite: decode.bench.mjs's default model.
    const r = bench('qwen3-next-80b.bench.mjs', ['--batches', '1,2', '--steps', '4', '--layer-times', '--graph-times']) as unknown as DecodeReport;
    expect([r.model, r.adapter]).toEqual(['qwen3-next-80b', 'qwen3_next']);
    expect(r.results.map((x) => x.batch)).toEqual([1, 2, 1, 2]);
    for (const x of r.results) expect(x.tokens_per_s).toBeGreaterThan(0);
    // Every row replays graphs: with --graph-times each says what its graphs took on the device.
    for (const x of r.results) expect(x.graph_ms).toBeGreaterThan(0);
    expect(Object.keys(r.layer_times[0]!.ms_per_step_by_kind)).toEqual(expect.arrayContaining(['gdn', 'attention', 'moe', 'lm-head']));
    // The kernel budget of a one-row step (the batch-1 bar is bounded by it: docs/performance.md):
    // 10 launches a layer (two norms, four for the mixer, four for the MoE; the attention layer one
    // more, the split-KV combine of its 128+ keys) over the tiny shape's 3 GDN and 1 attention
    // layers, + embedding, the last residual add, the final norm, the lm head and the device
    // sampler's argmax (the step as served).
    expect(r.layer_times.find((x) => x.batch === 1)!.launches_per_step).toBe(10 * 3 + 11 + 4 + 1);
    // The sampler is timed on CUDA only (events around its enqueued pick).
    expect(r.layer_times[0]!.ms_per_step_by_kind.sampling).toBeUndefined();
  }, 120_000);

  it('decode with --spec 0: the plain rows only; a --spec that is not a whole number is refused, naming it', () => {
    const r = bench('decode.bench.mjs', ['--batches', '1', '--steps', '2', '--spec', '0']) as unknown as DecodeReport;
    expect(r.results.map((x) => [x.batch, x.spec])).toEqual([[1, null]]);
    // Without --graph-times no events surround the graphs, and no row reports them.
    expect(r.results[0]!.graph_ms).toBeUndefined();
    const bad = spawnSync(process.execPath, [join('bench', 'decode.bench.mjs'), '--backend', 'cpu', '--tiny', '--spec', '2.5'], { encoding: 'utf8', timeout: 60_000 });
    expect(bad.status).toBe(2);
    expect(bad.stderr).toMatch(/--spec: .*got 2.5/);
  }, 120_000);

  it('decode with --sampling: sampled rows picked on the device and on the host draw the same tokens and logprobs; a bad --sampling is refused, naming it', () => {
    type Row = DecodeReport['results'][number] & { sampled?: string; tokens_hash?: string; logprobs?: number; logprobs_same_tokens?: boolean; logprobs_max_diff?: number };
    const r = bench('decode.bench.mjs', ['--batches', '1,3', '--steps', '6', '--spec', '2', '--sampling', '0.8,0.9,20,3']) as unknown as { results: Row[] };
    const sampled = r.results.filter((x) => x.sampled && !x.spec);
    expect(sampled.map((x) => [x.sampled, x.batch, x.logprobs])).toEqual([
      ['device', 1, undefined], ['device', 3, undefined], ['host', 1, undefined], ['host', 3, undefined], ['device', 1, 3], ['device', 3, 3], ['host', 1, 3], ['host', 3, 3],
    ]);
    // Speculating and sampled: verified on the device and on the host, the same tokens.
    const verified = r.results.filter((x) => x.sampled && x.spec);
    expect(verified.map((x) => [x.sampled, x.batch])).toEqual([['device', 1], ['device', 3], ['host', 1], ['host', 3]]);
    for (const B of [1, 3]) expect(verified[0 + (B === 3 ? 1 : 0)]!.tokens_hash).toBe(verified[2 + (B === 3 ? 1 : 0)]!.tokens_hash);
    for (const B of [1, 3]) {
      const rows = (logprobs?: number) => ['device', 'host'].map((s) => sampled.find((x) => x.sampled === s && x.batch === B && x.logprobs === logprobs)!);
      const [device, host] = rows();
      expect(device!.tokens_hash).toMatch(/^[0-9a-f]{8}$/);
      expect(device!.tokens_hash).toBe(host!.tokens_hash);
      const [deviceLp, hostLp] = rows(3);
      // Asking for logprobs changes no token.
      expect([deviceLp!.tokens_hash, hostLp!.tokens_hash]).toEqual([device!.tokens_hash, device!.tokens_hash]);
      // The CPU backend's twin computes them as the host does: the same to the last bit.
      expect(hostLp).toMatchObject({ logprobs_same_tokens: true, logprobs_max_diff: 0 });
    }
    const bad = spawnSync(process.execPath, [join('bench', 'decode.bench.mjs'), '--backend', 'cpu', '--tiny', '--sampling', '0,0.9,20'], { encoding: 'utf8', timeout: 60_000 });
    expect(bad.status).toBe(2);
    expect(bad.stderr).toMatch(/--sampling: .*got 0,0.9,20/);
    const tooMany = spawnSync(process.execPath, [join('bench', 'decode.bench.mjs'), '--backend', 'cpu', '--tiny', '--sampling', '0.8,0.9,20,21'], { encoding: 'utf8', timeout: 60_000 });
    expect(tooMany.status).toBe(2);
    expect(tooMany.stderr).toMatch(/logprobs \(0 to 20\).*got 0.8,0.9,20,21/);
  }, 120_000);

  it('decode with --sync --repeats 2: async scheduling on and off taking turns; --repeats 0 is refused, naming it', () => {
    type Row = DecodeReport['results'][number] & { async_scheduling: boolean; repeat: number };
    const r = bench('decode.bench.mjs', ['--batches', '1', '--steps', '3', '--spec', '0', '--sync', '--repeats', '2']) as unknown as Omit<DecodeReport, 'results'> & { results: Row[] };
    expect(r.results.map((x) => [x.async_scheduling, x.repeat])).toEqual([[true, 0], [false, 0], [true, 1], [false, 1]]);
    const bad = spawnSync(process.execPath, [join('bench', 'decode.bench.mjs'), '--backend', 'cpu', '--tiny', '--repeats', '0'], { encoding: 'utf8', timeout: 60_000 });
    expect(bad.status).toBe(2);
    expect(bad.stderr).toMatch(/--repeats: .*got 0/);
  }, 120_000);

  // The other shapes, each built by the adapter `metrale serve` picks for its config (the published
  // qwen3_5_moe layout; gemma3n_text, whose per-layer table the source serves in row ranges only).
  it.each([
    ['qwen3.5-moe', 'qwen3_5_moe', ['gdn', 'attention', 'moe', 'rms-norm', 'lm-head']],
    ['gemma3n-e4b', 'gemma3n_text', ['attention', 'mlp', 'altup', 'laurel', 'ple', 'rms-norm', 'lm-head']],
  ])('decode of the %s shape through its adapter (%s): every batch, its floor and the time per layer kind', (model, adapter, kinds) => {
    const r = bench('decode.bench.mjs', ['--model', model, '--batches', '1,2', '--steps', '4', '--layer-times']) as unknown as DecodeReport;
    expect([r.model, r.adapter]).toEqual([model, adapter]);
    expect(r.results.map((x) => x.batch)).toEqual([1, 2, 1, 2]);
    for (const x of r.results) expect(x.tokens_per_s).toBeGreaterThan(0);
    expect(r.floor.step_bytes['2']).toBeGreaterThan(r.floor.step_bytes['1']!);
    for (const row of r.layer_times) expect(Object.keys(row.ms_per_step_by_kind)).toEqual(expect.arrayContaining(kinds));
  }, 120_000);

  it('prefill: single prompts and a batch, with the time per layer kind; a failed peer run costs only the ratios', () => {
    const peer = join(out, 'peer.json');
    writeFileSync(peer, ''); // what a peer killed by its timeout leaves
    const r = bench('qwen3-next-80b-prefill.bench.mjs', ['--lengths', '64,200', '--batch', '2', '--batch-length', '48', '--chunk', '64,128', '--repeats', '1', '--peer', peer]) as { results: { prompts: number; length: number; chunk: number; best_ms: number; ms_by_kind: Record<string, number>; peer_ms?: number }[] };
    // Every case at each chunk of the list.
    expect(r.results.map((x) => [x.chunk, x.prompts, x.length])).toEqual([[64, 1, 64], [64, 1, 200], [64, 2, 48], [128, 1, 64], [128, 1, 200], [128, 2, 48]]);
    for (const x of r.results) {
      expect(x.best_ms).toBeGreaterThan(0);
      expect(x.ms_by_kind.gdn).toBeGreaterThan(0);
      expect(x.peer_ms).toBeUndefined();
    }
  }, 120_000);

  it('long context through the serving engine: a repeated prefix starts on its cached blocks and answers as without prefix caching', () => {
    // Prompt 600, shared 512, decode 8, chunks of 64: the GDN snapshot at 512 is where the repeated request starts.
    const r = bench('long-context.bench.mjs', ['--repeats', '2', '--long', '1024']) as unknown as LongContextReport;
    expect(r.adapter).toBe('qwen3_next');
    // metrale serve's startup: the model's full context, the pool and the tokens that fit.
    expect(r.startup).toMatchObject({ prefix_caching: true, max_model_len: 262_144, block_size: 16 });
    expect(r.startup.kv_cache_tokens).toBeGreaterThan(262_144);
    expect(r.startup.state_snapshots).toBeGreaterThan(0);
    expect(r.startup_no_prefix_caching).toMatchObject({ prefix_caching: false, state_snapshots: 0 });
    for (const row of [r.prompt, r.long]) {
      expect(row.decode_tokens).toBe(8);
      expect(row.ttft_ms).toBeGreaterThan(0);
      expect(row.decode_ms_per_token).toBeGreaterThan(0);
    }
    expect(r.long.prompt_tokens).toBe(1024);
    const { repeated, fresh, repeated_no_prefix_caching: off } = r.prefix;
    expect([repeated.prefix_cache_queries, repeated.prefix_cache_hits, repeated.prefilled_rows]).toEqual([2 * 600, 2 * 512, 88]);
    expect([fresh.prefix_cache_hits, fresh.prefilled_rows]).toEqual([0, 600]);
    expect([off.prefix_cache_hits, off.prefilled_rows]).toEqual([0, 600]);
    // The same greedy tokens with and without the cache, and not the same for every prompt.
    expect(repeated.tokens).toHaveLength(2);
    expect(repeated.tokens).toEqual(off.tokens);
    expect(repeated.tokens[0]).not.toEqual(repeated.tokens[1]);
    expect(r.prefix.same_tokens).toBe(true);
  }, 120_000);
});
