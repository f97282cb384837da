// native/cuda-driver-api.h declares the driver API without cuda.h. Wherever a CUDA toolkit is
// installed, native/verify/driver-api-matches-cuda-h.cc checks every value and signature of it
// against the real cuda.h at compile time.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';

const include = [process.env.CUDA_HOME, process.env.CUDA_PATH, '/usr/local/cuda']
  .filter((d): d is string => !!d)
  .map((d) => join(d, 'include'))
  .find((d) => existsSync(join(d, 'cuda.h')));
const cxx = [process.env.CXX, 'c++', 'g++', 'clang++'].find((c) => c && spawnSync(c, ['--version']).status === 0);
if (!include || !cxx) console.warn(`[cuda-backend] cuda.h check skipped: ${!include ? 'no cuda.h' : 'no C++ compiler'}`);

it.skipIf(!include || !cxx)('declares the driver API exactly as cuda.h does', () => {
  const source = fileURLToPath(new URL('../native/verify/driver-api-matches-cuda-h.cc', import.meta.url));
  const r = spawnSync(cxx!, ['-std=c++17', '-fsyntax-only', `-I${include}`, source], { encoding: 'utf8' });
  expect(r.stderr).toBe('');
  expect(r.status).toBe(0);
});
