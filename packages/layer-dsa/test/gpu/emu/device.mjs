// The GPU lane's stand-in device without a GPU (development only): the CPU backend, with this
// package's kernels run as their CUDA sources in the CPU emulator (tools/cuda-emu). Use:
//   METRALE_DSA_DEVICE_MODULE=test/gpu/emu/device.mjs node ../../node_modules/vitest/vitest.mjs run --config vitest.gpu.config.ts
// METRALE_CUDA_EMU_ARCH=80 builds the kernels' no-cluster (sm_80) paths instead.
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CpuBackend } from '@metrale/cpu-backend';
import { emulatedDevice } from '../../../../../tools/cuda-emu/device.mjs';

const kernels = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'kernels');

// Every entry point of the package's modules (src/dsa-kernels.ts), with its CTAs per cluster.
export const { reason, createDevice } = emulatedDevice({
  label: 'layer-dsa',
  dependsOn: [kernels],
  createBackend: () => new CpuBackend({ memoryLimit: 2 ** 34 }),
  modules: {
    'dsa-append': {
      source: join(kernels, 'dsa-append.cu'),
      kernels: { dsa_mla_append: 1, dsa_index_append: 1, dsa_pool_append: 1, dsa_ring_store: 1, dsa_q_rope: 1 },
    },
    'dsa-index': { source: join(kernels, 'dsa-index.cu'), kernels: { dsa_index_score: 1 } },
    'dsa-topk': { source: join(kernels, 'dsa-topk.cu'), kernels: { dsa_topk: 8 } },
    'dsa-attn': { source: join(kernels, 'dsa-attn.cu'), kernels: { dsa_sparse_attn: 4 } },
  },
});
