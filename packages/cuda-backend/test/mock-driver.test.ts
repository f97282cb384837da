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

  /** Runs `launches` (after a fill of 16 words of p with `value`) against the mock; the kernels it launched early, and q's words. */
  function earlyStartRun(name: string, value: number, launches: string): { words: number[]; early: string[] } {
    const log = join(tmpdir(), `metrale-${name}-${process.pid}.log`);
    rmSync(log, { force: true });
    const script = `import { CudaBackend, testKernels } from ${JSON.stringify(dist)};
      const b = CudaBackend.create();
      const p = b.alloc(64), q = b.alloc(64);
      b.launch(testKernels.fillU32, { grid: 1, block: 32 }, { dst: p, value: ${value}, n: 16 });
      ${launches}
      console.log(JSON.stringify([...new Uint32Array(b.download(q, 64).buffer)]));
      b.dispose();`;
    try {
      const r = withMock(['--input-type=module', '-e', script], { MOCK_CUDA_EARLY_START_LOG: log });
      expect(r.status, r.stderr).toBe(0);
      return { words: JSON.parse(r.stdout) as number[], early: readFileSync(log, 'utf8').trim().split('\n') };
    } finally {
      rmSync(log, { force: true });
    }
  }

  it('launches an earlyStart kernel through cuLaunchKernelEx with programmatic stream serialization, the others through cuLaunchKernel', () => {
    const { words, early } = earlyStartRun('early-start', 5, `
      b.launch(testKernels.copyAfterU32, { grid: 1, block: 32, earlyStart: true }, { dst: q, src: p, n: 16 });
      b.launch(testKernels.copyAfterU32, { grid: 1, block: 32, earlyStart: false }, { dst: p, src: q, n: 16 });`);
    expect(words).toEqual(Array(16).fill(5));
    expect(early).toEqual(['copy_after_u32']);
  });

  it('launches a wait-first kernel early where its launch says nothing of it (its declaration decides)', () => {
    const { words, early } = earlyStartRun('early-default', 7, `
      b.launch(testKernels.copyAfterU32, { grid: 1, block: 32 }, { dst: q, src: p, n: 16 });`);
    expect(words).toEqual(Array(16).fill(7));
    expect(early).toEqual(['copy_after_u32']);
  });
});
