// The addon and the whole GPU test lane, run against host-side stand-ins for libcuda and
// cuBLASLt (test/mock): every driver call, argument layout, handle table and error conversion is
// exercised on machines without a GPU. The real driver's behaviour is checked by the GPU lane on
// a GPU; this checks the plumbing.
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { loadAddon } from '../src/addon.js';
import { buildMockDriver } from './support/mock-driver.js';

const packageDir = fileURLToPath(new URL('..', import.meta.url));
const vitest = fileURLToPath(new URL('../../../node_modules/vitest/vitest.mjs', import.meta.url));
const dist = fileURLToPath(new URL('../dist/index.js', import.meta.url));
const fatbin = fileURLToPath(new URL('../dist/kernels/backend-test.fatbin', import.meta.url));

const addon = loadAddon();
const mock = addon.ok ? buildMockDriver() : 'the addon is not built';
const why =
  typeof mock === 'string' ? mock
  : !existsSync(fatbin) ? 'the test kernels were not built (no nvcc)'
  : !existsSync(dist) ? 'the package is not built (dist/index.js)'
  : '';
if (why) console.warn(`[cuda-backend] mock-driver tests skipped: ${why}`);

function withMock(args: string[], extraEnv: Record<string, string> = {}) {
  if (typeof mock === 'string') throw new Error(mock);
  const env = { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0', METRALE_LIBCUDA_PATH: mock.libcuda, METRALE_CUBLASLT_PATH: mock.cublasLtDir, METRALE_NCCL_PATH: mock.libnccl, ...extraEnv };
  return spawnSync(process.execPath, args, { cwd: packageDir, env, encoding: 'utf8', timeout: 300_000 });
}

describe.skipIf(why !== '')('against the mock driver', () => {
  it('passes the whole GPU lane, with no suite skipped', () => {
    const r = withMock([vitest, 'run', '--config', 'vitest.gpu.config.ts']);
    const output = `${r.stdout}\n${r.stderr}`;
    if (r.status !== 0) console.error(output);
    expect(r.status).toBe(0);
    // "Tests  29 passed (29)": every test ran and passed, none skipped.
    const [, passed, total] = output.match(/Tests\s+(\d+) passed \((\d+)\)/) ?? [];
    expect(Number(passed)).toBeGreaterThan(0);
    expect(passed).toBe(total);
  });

  it('probe() says "no CUDA devices" when cuInit finds none', () => {
    const script = `import { probe, CudaBackend } from ${JSON.stringify(dist)};
      const p = probe();
      let created = '';
      try { CudaBackend.create(); } catch (e) { created = e.name + ': ' + e.message; }
      console.log(JSON.stringify({ p, created }));`;
    const r = withMock(['--input-type=module', '-e', script], { MOCK_CUDA_NO_DEVICE: '1' });
    expect(r.status, r.stderr).toBe(0);
    const { p, created } = JSON.parse(r.stdout) as { p: { available: boolean; reason: string }; created: string };
    expect(p.available).toBe(false);
    expect(p.reason).toMatch(/^no CUDA devices/);
    expect(created).toMatch(/^DeviceError: CudaBackend.create: no CUDA devices/);
  });

  it('launches an earlyStart kernel through cuLaunchKernelEx with programmatic stream serialization, the others through cuLaunchKernel', () => {
    const log = join(tmpdir(), `metrale-early-start-${process.pid}.log`);
    rmSync(log, { force: true });
    const script = `import { CudaBackend, testKernels } from ${JSON.stringify(dist)};
      const b = CudaBackend.create();
      const p = b.alloc(64), q = b.alloc(64);
      b.launch(testKernels.fillU32, { grid: 1, block: 32 }, { dst: p, value: 5, n: 16 });
      b.launch(testKernels.copyAfterU32, { grid: 1, block: 32, earlyStart: true }, { dst: q, src: p, n: 16 });
      b.launch(testKernels.copyAfterU32, { grid: 1, block: 32, earlyStart: false }, { dst: p, src: q, n: 16 });
      console.log(JSON.stringify([...new Uint32Array(b.download(q, 64).buffer)]));
      b.dispose();`;
    const r = withMock(['--input-type=module', '-e', script], { MOCK_CUDA_EARLY_START_LOG: log });
    expect(r.status, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual(Array(16).fill(5));
    expect(readFileSync(log, 'utf8').trim().split('\n')).toEqual(['copy_after_u32']);
    rmSync(log, { force: true });
  });

  it('gemm takes backend_gemm_rows for m ≤ 8 with 16-bit A and B, row-major A and packed Wᵀ, and cuBLASLt otherwise', () => {
    const log = join(tmpdir(), `metrale-gemm-rows-${process.pid}.log`);
    rmSync(log, { force: true });
    const script = `import { readFileSync, existsSync } from 'node:fs';
      import { CudaBackend } from ${JSON.stringify(dist)};
      const b = CudaBackend.create();
      const n = 16, k = 64, log = ${JSON.stringify(log)};
      const sizes = [9 * k * 4, n * (k + 8) * 4, 9 * n * 4];
      const [a, w, c] = sizes.map((bytes) => b.alloc(bytes));
      for (const [i, p] of [a, w, c].entries()) b.memsetAsync(p, 0, sizes[i]);
      const base = { n, k, a, b: w, c, transB: true, dtype: 'bf16', outDtype: 'f32' };
      const cases = {
        m1: { m: 1 }, m8: { m: 8, outDtype: 'bf16', beta: 1 }, f16: { m: 3, dtype: 'f16', ldc: n + 1 }, scalar: { m: 2, k: 30, lda: 31 },
        m9: { m: 9 }, f32: { m: 1, dtype: 'f32' }, transA: { m: 1, transA: true }, ldb: { m: 1, ldb: k + 8 }, notTransB: { m: 1, transB: false, n: k, k: n },
        forced: { m: 1, [Symbol.for('metrale.cuda.gemmViaCublasLt')]: true },
      };
      const seen = {};
      for (const [name, t] of Object.entries(cases)) {
        const before = existsSync(log) ? readFileSync(log, 'utf8').length : 0;
        b.gemm({ ...base, ...t });
        b.synchronize();
        seen[name] = existsSync(log) ? readFileSync(log, 'utf8').slice(before).trim() : '';
      }
      console.log(JSON.stringify(seen));
      b.dispose();`;
    const r = withMock(['--input-type=module', '-e', script], { MOCK_CUDA_LAUNCH_LOG: log });
    rmSync(log, { force: true });
    expect(r.status, r.stderr).toBe(0);
    const rows = 'backend_gemm_rows';
    expect(JSON.parse(r.stdout)).toEqual({ m1: rows, m8: rows, f16: rows, scalar: rows, m9: '', f32: '', transA: '', ldb: '', notTransB: '', forced: '' });
  });
});
