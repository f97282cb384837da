// The kernel build tool of @metrale/core (bin/metrale-build-kernels.mjs), and the fatbin it made
// for this package's kernels/backend-test.cu.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { testKernels } from '../src/test-kernels.js';

const tool = fileURLToPath(new URL('../../core/bin/metrale-build-kernels.mjs', import.meta.url));
const nvcc = ['/usr/local/cuda/bin/nvcc', ...(process.env.PATH ?? '').split(':').map((d) => join(d, 'nvcc'))].find((p) => existsSync(p));
if (!nvcc) console.warn('[cuda-backend] nvcc not found: fatbin checks skipped');

function runTool(packageDir: string, env: NodeJS.ProcessEnv = process.env) {
  return spawnSync(process.execPath, [tool, '--package-dir', packageDir], { encoding: 'utf8', env });
}

function tempPackage(files: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), 'metrale-kernels-'));
  for (const [name, text] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, name)), { recursive: true });
    writeFileSync(join(dir, name), text);
  }
  return dir;
}

describe('metrale-build-kernels', () => {
  it('says kernels were not built, and exits 0, when there is no nvcc', () => {
    const dir = tempPackage({ 'kernels/k.cu': 'extern "C" __global__ void k() {}\n' });
    const env = { PATH: dirname(process.execPath), CUDA_HOME: '/nonexistent' };
    const r = runTool(dir, env);
    expect(r.status).toBe(0);
    expect(r.stdout.trim().split('\n')).toHaveLength(1);
    expect(r.stdout).toMatch(/nvcc not found, 1 kernel file\(s\) .* not built \(CPU backend only\)/);
    expect(existsSync(join(dir, 'dist/kernels/k.fatbin'))).toBe(false);
  });

  it.skipIf(!nvcc)('builds one fatbin per .cu, skips up-to-date ones, rebuilds after a change', () => {
    const dir = tempPackage({ 'kernels/a.cu': 'extern "C" __global__ void a(int* x) { *x = 1; }\n', 'kernels/b.cu': 'extern "C" __global__ void b() {}\n' });
    const first = runTool(dir);
    expect(first.status, first.stderr).toBe(0);
    expect(first.stdout).toMatch(/2 fatbin\(s\) built, 0 up to date/);
    const second = runTool(dir);
    expect(second.stdout).toMatch(/0 fatbin\(s\) built, 2 up to date/);
    const later = new Date(statSync(join(dir, 'dist/kernels/a.fatbin')).mtimeMs + 5000);
    utimesSync(join(dir, 'kernels/a.cu'), later, later);
    expect(runTool(dir).stdout).toMatch(/1 fatbin\(s\) built, 1 up to date/);
  }, 120_000);

  it.skipIf(!nvcc)("fails with nvcc's message on a compile error, leaving no fatbin", () => {
    const dir = tempPackage({ 'kernels/bad.cu': 'extern "C" __global__ void bad() { this is not cuda; }\n' });
    const r = runTool(dir);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/nvcc failed on .*bad\.cu/);
    expect(r.stderr).toMatch(/error/);
    expect(existsSync(join(dir, 'dist/kernels/bad.fatbin'))).toBe(false);
  }, 120_000);

  it.skipIf(!nvcc)('built backend-test.fatbin: an nvcc fatbin holding every test kernel', () => {
    const path = testKernels.module.fatbin;
    expect(existsSync(path), `${path} is missing: run node scripts/build.mjs`).toBe(true);
    const image = readFileSync(path);
    expect(image.readUInt32LE(0)).toBe(0xba55ed50); // fatbin magic
    // SASS for sm_80 and sm_90a: their ELF string tables name each kernel.
    for (const kernel of Object.values(testKernels)) {
      if (!('cuda' in kernel) || !kernel.cuda) continue;
      expect(image.includes(Buffer.from(`${kernel.cuda.symbol}\0`)), kernel.cuda.symbol).toBe(true);
    }
    expect(image.includes(Buffer.from('sm_80'))).toBe(true);
    expect(image.includes(Buffer.from('sm_90a'))).toBe(true);
  });
});
