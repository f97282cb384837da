import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { probe } from '@metrale/cuda-backend';
import { afterAll, describe, expect, it } from 'vitest';

// The decode bench's launch count on CUDA is the CPU backend's: the block-FP8 GEMMs launch the
// backend's own kernel from inside gemm, which the count once took as two launches.
const cuda = probe();
if (!cuda.available) console.warn(`[serve gpu] decode bench launch count skipped: ${cuda.reason}`);

const out = mkdtempSync(join(tmpdir(), 'metrale-decode-bench-'));
afterAll(() => rmSync(out, { recursive: true, force: true }));

function launchesPerStep(backend: string, dtype: string): number {
  const file = join(out, `${backend}-${dtype}.json`);
  const args = ['--backend', backend, '--tiny', '--dtype', dtype, '--batches', '1', '--steps', '3', '--spec', '0', '--layer-times', '--out', file];
  const run = spawnSync(process.execPath, [join('bench', 'decode.bench.mjs'), ...args], { encoding: 'utf8', timeout: 240_000 });
  expect(run.status, `decode bench on ${backend}: ${run.stderr}`).toBe(0);
  const report = JSON.parse(readFileSync(file, 'utf8')) as { layer_times: { launches_per_step: number }[] };
  return report.layer_times[0]!.launches_per_step;
}

describe.skipIf(!cuda.available)('decode bench on CUDA', () => {
  it.each(['fp8', 'bf16'])('counts a one-row %s step as the CPU backend does', (dtype) => {
    expect(launchesPerStep('cuda', dtype)).toBe(launchesPerStep('cpu', dtype));
  }, 600_000);
});
