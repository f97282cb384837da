import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { probe } from '@metrale/cuda-backend';
import { afterAll, describe, expect, it } from 'vitest';

// The decode bench's layer times on CUDA: its launch count is the CPU backend's (the block-FP8
// GEMMs launch the backend's own kernel from inside gemm, which the count once took as two
// launches), its timed steps are queued ahead of the device (the host done enqueuing a step
// before the copies ahead of it end), and the device sampler's pick is timed beside the layers. And
// the sampled rows: picked, scored (logprobs) and verified on the device as on the host.
const cuda = probe();
if (!cuda.available) console.warn(`[serve gpu] decode bench launch count skipped: ${cuda.reason}`);

const out = mkdtempSync(join(tmpdir(), 'metrale-decode-bench-'));
afterAll(() => rmSync(out, { recursive: true, force: true }));

interface LayerTimesRow {
  launches_per_step: number;
  eager_step_ms: number;
  ms_per_step_by_kind: Record<string, number>;
  queued_ahead_ms?: number;
  host_enqueue_ms?: number;
}

function layerTimes(backend: string, dtype: string): LayerTimesRow {
  const file = join(out, `${backend}-${dtype}.json`);
  const args = ['--backend', backend, '--tiny', '--dtype', dtype, '--batches', '1', '--steps', '3', '--spec', '0', '--layer-times', '--out', file];
  const run = spawnSync(process.execPath, [join('bench', 'decode.bench.mjs'), ...args], { encoding: 'utf8', timeout: 240_000 });
  expect(run.status, `decode bench on ${backend}: ${run.stderr}`).toBe(0);
  const report = JSON.parse(readFileSync(file, 'utf8')) as { layer_times: LayerTimesRow[] };
  return report.layer_times[0]!;
}

interface SampledRow {
  batch: number;
  spec: string | null;
  sampled?: 'device' | 'host';
  tokens_hash?: string;
  logprobs?: number;
  logprobs_same_tokens?: boolean;
  logprobs_max_diff?: number;
  acceptance: number | null;
}

describe.skipIf(!cuda.available)('decode bench on CUDA', () => {
  it('sampled decode, with logprobs and speculating: the device\'s picks (std.sample, std.logprobs, drafts kept while they match the draws) are the host\'s', () => {
    const file = join(out, 'sampled.json');
    const args = ['--backend', 'cuda', '--tiny', '--batches', '1,3', '--steps', '12', '--spec', '2', '--sampling', '0.8,0.9,20,3', '--out', file];
    const run = spawnSync(process.execPath, [join('bench', 'decode.bench.mjs'), ...args], { encoding: 'utf8', timeout: 240_000 });
    expect(run.status, `decode bench: ${run.stderr}`).toBe(0);
    const rows = (JSON.parse(readFileSync(file, 'utf8')) as { results: SampledRow[] }).results.filter((r) => r.sampled);
    const find = (sampled: string, batch: number, spec: boolean, logprobs?: number) => rows.find((r) => r.sampled === sampled && r.batch === batch && !!r.spec === spec && r.logprobs === logprobs)!;
    for (const batch of [1, 3]) {
      for (const [spec, logprobs] of [[false, undefined], [false, 3], [true, undefined]] as const) {
        const [device, host] = [find('device', batch, spec, logprobs), find('host', batch, spec, logprobs)];
        expect(device.tokens_hash, `batch ${batch}, spec ${spec}, logprobs ${logprobs}`).toBe(host.tokens_hash);
      }
      const lp = find('host', batch, false, 3);
      expect(lp.logprobs_same_tokens).toBe(true);
      expect(lp.logprobs_max_diff).toBeLessThan(1e-9);
    }
  }, 600_000);


  it.each(['fp8', 'bf16'])('counts a one-row %s step as the CPU backend does, its launches queued ahead', (dtype) => {
    const row = layerTimes('cuda', dtype);
    expect(row.launches_per_step).toBe(layerTimes('cpu', dtype).launches_per_step);
    expect(row.eager_step_ms).toBeGreaterThan(0);
    expect(row.queued_ahead_ms).toBeGreaterThan(row.host_enqueue_ms!);
    // The device sampler's pick, timed apart from the layers, is part of the step's time.
    expect(row.ms_per_step_by_kind.sampling).toBeGreaterThan(0);
    expect(row.ms_per_step_by_kind.sampling).toBeLessThan(row.eager_step_ms);
  }, 600_000);
});
