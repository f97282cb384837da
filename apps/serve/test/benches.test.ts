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

function bench(script: string, args: string[]): Record<string, unknown> {
  const file = join(out, `${script}.json`);
  const run = spawnSync(process.execPath, [join('bench', script), '--backend', 'cpu', '--tiny', ...args, '--out', file], { encoding: 'utf8', timeout: 120_000 });
  expect(run.status, `${script}: ${run.stderr}`).toBe(0);
  return JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
}

describe('whole-model benches on the CPU device (tiny shape)', () => {
  it('decode: every batch with and without speculation, and the time per layer kind', () => {
    const r = bench('qwen3-next-80b.bench.mjs', ['--batches', '1,2', '--steps', '4', '--layer-times']) as { results: { batch: number; tokens_per_s: number }[]; layer_times: { ms_per_step_by_kind: Record<string, number> }[] };
    expect(r.results.map((x) => x.batch)).toEqual([1, 2, 1, 2]);
    for (const x of r.results) expect(x.tokens_per_s).toBeGreaterThan(0);
    expect(Object.keys(r.layer_times[0]!.ms_per_step_by_kind)).toEqual(expect.arrayContaining(['gdn', 'attention', 'moe', 'lm-head']));
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
});
