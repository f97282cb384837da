import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

// The decode-kernels bench runs only with CUDA; what it checks before looking for a device is
// tested here, so a bad argument fails the same way on every machine.

describe('bench/decode-kernels.bench.mjs', () => {
  it('refuses an --only section it does not have, naming it and the sections it has', () => {
    const run = spawnSync(process.execPath, [join('bench', 'decode-kernels.bench.mjs'), '--only', 'fp8,routers'], { encoding: 'utf8', timeout: 60_000 });
    expect(run.status).toBe(2);
    expect(run.stderr).toContain('--only "routers" is not a section');
    expect(run.stderr).toContain('attention, router, experts, fp8');
  });
});
