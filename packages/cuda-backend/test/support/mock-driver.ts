// Builds the host-side stand-ins for libcuda, cuBLASLt and NCCL (test/mock/*.c) with the system C
// compiler, for tests that exercise the addon where there is no GPU.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export interface MockDriver {
  readonly libcuda: string;
  readonly cublasLtDir: string;
  /** The NCCL stand-in (test/mock/mock-libnccl.c), for METRALE_NCCL_PATH. */
  readonly libnccl: string;
}

const mockDir = fileURLToPath(new URL('../mock/', import.meta.url));

function compiler(): string | undefined {
  for (const cc of [process.env.CC, 'cc', 'gcc', 'clang']) {
    if (cc && spawnSync(cc, ['--version']).status === 0) return cc;
  }
  return undefined;
}

/** Compiles the mocks into a temporary directory; undefined (with the reason) when it cannot. */
export function buildMockDriver(): MockDriver | string {
  const cc = compiler();
  if (!cc) return 'no C compiler';
  const out = mkdtempSync(join(tmpdir(), 'metrale-mock-cuda-'));
  const libcuda = join(out, 'libcuda.so.1');
  const cublasLt = join(out, 'libcublasLt.so.13');
  const libnccl = join(out, 'libnccl.so.2');
  for (const [source, target, libs] of [['mock-libcuda.c', libcuda, []], ['mock-cublaslt.c', cublasLt, ['-ldl']], ['mock-libnccl.c', libnccl, ['-ldl']]] as const) {
    const r = spawnSync(cc, ['-std=c11', '-O1', '-shared', '-fPIC', '-fvisibility=hidden', '-o', target, join(mockDir, source), ...libs], { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`compiling ${source} failed:\n${r.stderr}`);
  }
  return existsSync(libcuda) ? { libcuda, cublasLtDir: out, libnccl } : 'mock build produced nothing';
}
