import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { cublasLtCandidates, expandPattern } from '../src/cublaslt-paths.js';

function touch(path: string): string {
  mkdirSync(join(path, '..'), { recursive: true });
  writeFileSync(path, '');
  return path;
}

describe('where cuBLASLt is looked for', () => {
  it('tries $METRALE_CUBLASLT_PATH first: a file as given', () => {
    const list = cublasLtCandidates({ METRALE_CUBLASLT_PATH: '/opt/x/libcublasLt.so.12' });
    expect(list[0]).toBe('/opt/x/libcublasLt.so.12');
    expect(list.slice(1, 4)).toEqual(['libcublasLt.so.13', 'libcublasLt.so.12', 'libcublasLt.so']);
  });

  it('a directory: its libraries, highest version first', () => {
    const dir = mkdtempSync(join(tmpdir(), 'metrale-lt-'));
    touch(join(dir, 'libcublasLt.so.12'));
    touch(join(dir, 'libcublasLt.so.13'));
    touch(join(dir, 'libcublas.so.13'));
    const list = cublasLtCandidates({ METRALE_CUBLASLT_PATH: dir });
    expect(list.slice(0, 2)).toEqual([join(dir, 'libcublasLt.so.13'), join(dir, 'libcublasLt.so.12')]);
    expect(list).not.toContain(join(dir, 'libcublas.so.13'));
  });

  it("finds PyTorch's wheel copy in a virtualenv (nvidia/cu13/lib and nvidia/cublas/lib)", () => {
    const venv = mkdtempSync(join(tmpdir(), 'metrale-venv-'));
    const cu13 = touch(join(venv, 'lib/python3.12/site-packages/nvidia/cu13/lib/libcublasLt.so.13'));
    const cu12 = touch(join(venv, 'lib/python3.12/site-packages/nvidia/cublas/lib/libcublasLt.so.12'));
    const list = cublasLtCandidates({ VIRTUAL_ENV: venv });
    expect(list).toContain(cu13);
    expect(list).toContain(cu12);
    expect(list.indexOf('libcublasLt.so.13')).toBeLessThan(list.indexOf(cu13));
  });

  it('expands * within one path segment', () => {
    const root = mkdtempSync(join(tmpdir(), 'metrale-glob-'));
    for (const d of ['a1/lib', 'a2/lib', 'b1/lib']) mkdirSync(join(root, d), { recursive: true });
    expect(expandPattern(`${root}/a*/lib`)).toEqual([join(root, 'a1/lib'), join(root, 'a2/lib')]);
    expect(expandPattern(`${root}/none*/lib`)).toEqual([]);
  });
});
