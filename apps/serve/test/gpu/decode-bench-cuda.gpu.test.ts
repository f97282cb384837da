import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { probe } from '@metrale/cuda-backend';
import { afterAll, describe, expect, it } from 'vitest';

// The decode bench's layer times on CUDA: its launch count is the CPU backend's (the block-FP8
// GEMMs launch the backend's own kernel from inside gemm, which the count once took as two
// launches), its timed steps are queued ahead of the device (the host done enqueuing a step
// before the copies ahead of it end), and the device sampler's pick is timed beside the layers.
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

describe.skipIf(!cuda.available)('decode bench on CUDA', () => {
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
