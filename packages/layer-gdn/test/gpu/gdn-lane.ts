// What this package's GPU suites (gdn-kernels, gdn-prefill) need, on core's shared mechanism
// (@metrale/core/testing): the CUDA backend when a device is there, else why not
// (METRALE_GDN_DEVICE_MODULE=/path/module.mjs names a stand-in for development, e.g.
// test/gpu/emu/device.mjs, the CPU emulator of the kernels); and a kernel declaration bound to its
// fatbin: METRALE_GDN_FATBIN_DIR/<module>.fatbin when that exists (bench/gdn-tune.sh builds
// variants there), else <buildDir>/dist/kernels/<module>.fatbin, built by metrale-build-kernels
// when missing (buildDir: the package, or test/gpu for the lane's own kernels, which the package
// does not ship).
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defineKernelModule } from '@metrale/core';
import { ensureFatbins, gpuLaneDevice } from '@metrale/core/testing';

const pkgDir = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
/** The lane's own kernels (test/gpu/kernels/*.cu): the row-by-row prefill oracle. */
export const laneDir = join(pkgDir, 'test', 'gpu');

export const device = await gpuLaneDevice({ loadCuda: () => import('@metrale/cuda-backend'), standInEnv: 'METRALE_GDN_DEVICE_MODULE' });

/** `k` with its CUDA module pointing at the fatbin to run; a stand-in device runs declarations as they are. */
export function withFatbin<K extends { readonly cuda?: { readonly module: { readonly name: string }; readonly symbol: string } }>(k: K, buildDir = pkgDir): K {
  if (device.standIn) return k;
  const { module, symbol } = k.cuda!;
  const dir = process.env.METRALE_GDN_FATBIN_DIR;
  let path = dir ? join(dir, `${module.name}.fatbin`) : '';
  if (!path || !existsSync(path)) {
    path = join(buildDir, 'dist', 'kernels', `${module.name}.fatbin`);
    ensureFatbins({ packageDir: pkgDir, buildDir, fatbins: [path], label: '[layer-gdn gpu]' });
  }
  return Object.freeze({ ...k, cuda: { module: defineKernelModule(module.name, path), symbol } });
}
