// Where cuBLASLt may be. It is not part of the driver: it comes with a CUDA toolkit, or, far more
// often on GPU machines, inside PyTorch's pip wheels (nvidia/cu13/lib for CUDA 13 wheels,
// nvidia/cublas/lib for CUDA 12 ones). The addon tries the candidates in this order.
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

const SONAMES = ['libcublasLt.so.13', 'libcublasLt.so.12', 'libcublasLt.so'];
const FILE = /^libcublasLt\.so(\.\d+)*$/;

/** Directories that commonly hold libcublasLt; `*` matches within one path segment. */
function searchDirs(env: NodeJS.ProcessEnv): string[] {
  const wheelDirs = (sitePackages: string) => [`${sitePackages}/nvidia/cu13/lib`, `${sitePackages}/nvidia/cublas/lib`];
  const roots = [
    '/opt/torch/.venv/lib/python3*/site-packages',
    '/opt/*/.venv/lib/python3*/site-packages',
    '/opt/conda/lib/python3*/site-packages',
    '/usr/local/lib/python3*/dist-packages',
    '/usr/local/lib/python3*/site-packages',
    '/usr/lib/python3/dist-packages',
  ];
  if (env.VIRTUAL_ENV) roots.unshift(`${env.VIRTUAL_ENV}/lib/python3*/site-packages`);
  if (env.HOME) roots.push(`${env.HOME}/.local/lib/python3*/site-packages`);
  const dirs = roots.flatMap(wheelDirs);
  if (env.CONDA_PREFIX) dirs.push(`${env.CONDA_PREFIX}/lib`);
  if (env.CUDA_HOME) dirs.push(`${env.CUDA_HOME}/lib64`);
  dirs.push('/usr/local/cuda/lib64', '/usr/local/cuda-*/lib64', '/usr/local/cuda/targets/x86_64-linux/lib', '/usr/lib/x86_64-linux-gnu');
  return dirs;
}

/** Expands `*` in path segments against the file system (directories only; no dependencies). */
export function expandPattern(pattern: string): string[] {
  let found = [''];
  for (const segment of pattern.split('/').slice(1)) {
    if (!segment.includes('*')) {
      found = found.map((dir) => `${dir}/${segment}`);
      continue;
    }
    const match = new RegExp(`^${segment.replace(/[.+?^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '[^/]*')}$`);
    const next: string[] = [];
    for (const dir of found) {
      let entries: string[];
      try {
        entries = readdirSync(dir || '/');
      } catch {
        continue;
      }
      for (const entry of entries.sort()) if (match.test(entry)) next.push(`${dir}/${entry}`);
    }
    found = next;
  }
  return found.filter((p) => existsSync(p));
}

/** Highest version first: libcublasLt.so.13 before .so.12 before .so. */
function byVersionDescending(a: string, b: string): number {
  const version = (name: string) => (name.match(/\.so\.?(.*)$/)?.[1] ?? '').split('.').map((n) => Number(n) || 0);
  const va = version(a), vb = version(b);
  for (let i = 0; i < Math.max(va.length, vb.length); i++) {
    const d = (vb[i] ?? -1) - (va[i] ?? -1);
    if (d !== 0) return d;
  }
  return 0;
}

function librariesIn(dir: string): string[] {
  let entries: string[];
  try {
    entries = readdirSync(dir);
  } catch {
    return [];
  }
  return entries.filter((f) => FILE.test(f)).sort(byVersionDescending).map((f) => join(dir, f));
}

/**
 * Candidates, in order: $METRALE_CUBLASLT_PATH (a file, or a directory holding libcublasLt),
 * the sonames the dynamic loader finds itself (LD_LIBRARY_PATH, ldconfig), then files found in
 * the usual toolkit and pip-wheel directories.
 */
export function cublasLtCandidates(env: NodeJS.ProcessEnv = process.env): string[] {
  const out: string[] = [];
  const explicit = env.METRALE_CUBLASLT_PATH;
  if (explicit) {
    let isDir = false;
    try {
      isDir = statSync(explicit).isDirectory();
    } catch {
      // a missing path is still tried, so the error names it
    }
    out.push(...(isDir ? [...librariesIn(explicit), ...SONAMES.map((s) => join(explicit, s))] : [explicit]));
  }
  out.push(...SONAMES);
  for (const pattern of searchDirs(env)) {
    for (const dir of expandPattern(pattern)) out.push(...librariesIn(dir));
  }
  return [...new Set(out)];
}

/** The hint a GEMM error gives when no candidate loaded. */
export const CUBLASLT_HINT =
  'set METRALE_CUBLASLT_PATH to libcublasLt.so.13 (or .so.12) or to the directory holding it; ' +
  "PyTorch's pip wheels ship it in site-packages/nvidia/cu13/lib (CUDA 13) or site-packages/nvidia/cublas/lib (CUDA 12)";
