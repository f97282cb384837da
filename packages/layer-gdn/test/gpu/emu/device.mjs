// The GPU lane's stand-in device without a GPU (development only): the CPU backend, with this
// package's kernels run as their CUDA sources in the CPU emulator (tools/cuda-emu). Use:
//   METRALE_GDN_DEVICE_MODULE=test/gpu/emu/device.mjs node ../../node_modules/vitest/vitest.mjs run --config vitest.gpu.config.ts
// (METRALE_CUDA_EMU_ARCH=80: the sm_80 paths, no clusters). The 80B-shape cases run only with
// METRALE_GDN_BIG=1 there (slow on a CPU).
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CpuBackend } from '@metrale/cpu-backend';
import { emulatedDevice } from '../../../../../tools/cuda-emu/device.mjs';

const pkgDir = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const kernels = join(pkgDir, 'kernels');
const laneKernels = join(pkgDir, 'test', 'gpu', 'kernels');

// Every entry point of the package's modules (src/gdn-kernels.ts, gdn-prefill-kernels.ts) and of
// the lane's own (test/rowwise-kernel.ts), with its CTAs per cluster.
export const { reason, createDevice } = emulatedDevice({
  label: 'layer-gdn',
  dependsOn: [kernels, laneKernels],
  createBackend: () => new CpuBackend({ memoryLimit: 4 * 2 ** 30 }),
  modules: {
    'gdn-recurrent': {
      source: join(kernels, 'gdn-recurrent.cu'),
      kernels: { gdn_recurrent_smem: 1, gdn_recurrent_pipe: 1, gdn_recurrent_split: 4, gdn_recurrent_general: 1 },
    },
    'gdn-fold': { source: join(kernels, 'gdn-fold.cu'), kernels: { gdn_fold_smem: 1, gdn_fold_general: 1 } },
    'gdn-decode': {
      source: join(kernels, 'gdn-decode.cu'),
      kernels: { gdn_decode_prep: 1, gdn_decode_prep_gates: 1, gdn_decode_state: 1, gdn_decode_state_plain: 1, gdn_fold_state: 1 },
    },
    'gdn-verify': { source: join(kernels, 'gdn-verify.cu'), kernels: { gdn_verify_prep: 1, gdn_verify_state: 1 } },
    'gdn-chunk': {
      source: join(kernels, 'gdn-chunk.cu'),
      kernels: { gdn_prefill_wy: 1, gdn_prefill_wy_x3: 1, gdn_prefill_scan: 2, gdn_prefill_scan_x3: 2, gdn_prefill_norm: 1 },
    },
    'gdn-chunk-rowwise': { source: join(laneKernels, 'gdn-chunk-rowwise.cu'), kernels: { gdn_chunk_rowwise: 1 } },
  },
});
