#!/usr/bin/env node
// metrale-build-kernels: compiles every kernels/*.cu of the package it runs in (the current
// directory, or --package-dir) into one fatbin per file, dist/kernels/<name>.fatbin, with nvcc.
// Each fatbin holds SASS for sm_80 and sm_90a plus compute_90 PTX, which the driver JIT-compiles
// for newer GPUs. Outputs newer than their source (and than every header in kernels/) are kept.
// Without nvcc it prints one line and exits 0: the package then runs on the CPU backend only.
// Plain Node, no dependencies, so every plugin package can call it from its build script.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { delimiter, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const NVCC_FLAGS = [
  '-fatbin',
  '-O3',
  '-std=c++17',
  '--expt-relaxed-constexpr',
  '-gencode=arch=compute_80,code=sm_80',
  '-gencode=arch=compute_90a,code=sm_90a',
  '-gencode=arch=compute_90,code=compute_90',
];

function usage(code) {
  console.log('usage: metrale-build-kernels [--package-dir DIR] [--nvcc PATH] [--force]');
  process.exit(code);
}

function parseArgs(argv) {
  const options = { packageDir: process.cwd(), nvcc: undefined, force: false };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === '--package-dir') options.packageDir = resolve(argv[++i] ?? usage(2));
    else if (arg === '--nvcc') options.nvcc = argv[++i] ?? usage(2);
    else if (arg === '--force') options.force = true;
    else if (arg === '--help' || arg === '-h') usage(0);
    else {
      console.error(`metrale-build-kernels: unknown argument '${arg}'`);
      usage(2);
    }
  }
  return options;
}

/**
 * nvcc from --nvcc, $NVCC, the PATH, then $CUDA_HOME or $CUDA_PATH (or /usr/local/cuda when
 * neither is set); undefined when none.
 */
function findNvcc(explicit) {
  if (explicit) return explicit;
  if (process.env.NVCC) return process.env.NVCC;
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir && existsSync(join(dir, 'nvcc'))) return join(dir, 'nvcc');
  }
  const homes = [process.env.CUDA_HOME, process.env.CUDA_PATH].filter(Boolean);
  for (const home of homes.length ? homes : ['/usr/local/cuda']) {
    if (existsSync(join(home, 'bin', 'nvcc'))) return join(home, 'bin', 'nvcc');
  }
  return undefined;
}

/** Newest modification time of the headers in kernels/ (a header change rebuilds every fatbin). */
function newestHeaderMs(dir) {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) newest = Math.max(newest, newestHeaderMs(path));
    else if (/\.(cuh|h|hpp|inc)$/.test(entry.name)) newest = Math.max(newest, statSync(path).mtimeMs);
  }
  return newest;
}

/** The element-type headers every package's kernels may include (`#include <metrale/elements.cuh>`). */
const sharedInclude = fileURLToPath(new URL('../include', import.meta.url));

function main() {
  const options = parseArgs(process.argv.slice(2));
  const kernelsDir = join(options.packageDir, 'kernels');
  if (!existsSync(kernelsDir)) return 0;
  const sources = readdirSync(kernelsDir).filter((f) => f.endsWith('.cu')).sort();
  if (sources.length === 0) return 0;

  // `npm start` on a machine without an NVIDIA driver skips the compile: nothing could run the
  // kernels, and nvcc is most of the build's time. `npm test` and `pnpm build` always compile.
  if (process.env.METRALE_KERNELS === 'skip') {
    console.log(`metrale-build-kernels: METRALE_KERNELS=skip, ${sources.length} kernel file(s) in ${kernelsDir} not built (CPU backend only)`);
    return 0;
  }
  const nvcc = findNvcc(options.nvcc);
  if (!nvcc) {
    console.log(`metrale-build-kernels: nvcc not found, ${sources.length} kernel file(s) in ${kernelsDir} not built (CPU backend only)`);
    return 0;
  }

  const outDir = join(options.packageDir, 'dist', 'kernels');
  mkdirSync(outDir, { recursive: true });
  // The shared headers count only for a package whose kernels include them.
  const usesShared = readdirSync(kernelsDir, { recursive: true })
    .filter((f) => /\.(cu|cuh|h)$/.test(String(f)))
    .some((f) => readFileSync(join(kernelsDir, String(f)), 'utf8').includes('<metrale/'));
  const headersMs = Math.max(newestHeaderMs(kernelsDir), usesShared && existsSync(sharedInclude) ? newestHeaderMs(sharedInclude) : 0);
  let built = 0;
  for (const source of sources) {
    const input = join(kernelsDir, source);
    const output = join(outDir, source.replace(/\.cu$/, '.fatbin'));
    if (!options.force && existsSync(output)) {
      const outMs = statSync(output).mtimeMs;
      if (outMs >= statSync(input).mtimeMs && outMs >= headersMs) continue;
    }
    // Written beside the output and renamed, so that a failed compile never leaves a fatbin that
    // looks up to date.
    const partial = `${output}.partial-${process.pid}`;
    const args = [...NVCC_FLAGS, `-I${kernelsDir}`, `-I${sharedInclude}`, '-o', partial, input];
    const result = spawnSync(nvcc, args, { encoding: 'utf8' });
    if (result.error || result.status !== 0) rmSync(partial, { force: true });
    if (result.error) {
      console.error(`metrale-build-kernels: could not run ${nvcc}: ${result.error.message}`);
      return 1;
    }
    if (result.status !== 0) {
      console.error(`metrale-build-kernels: nvcc failed on ${input} (exit ${result.status}):\n${result.stdout}${result.stderr}`);
      console.error(`command: ${nvcc} ${args.join(' ')}`);
      return result.status ?? 1;
    }
    if (result.stderr.trim()) process.stderr.write(result.stderr);
    renameSync(partial, output);
    built++;
  }
  console.log(`metrale-build-kernels: ${built} fatbin(s) built, ${sources.length - built} up to date, in ${outDir}`);
  return 0;
}

process.exit(main());
