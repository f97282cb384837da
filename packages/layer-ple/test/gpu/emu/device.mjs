// The GPU lane's stand-in device without a GPU (development only): the CPU backend, with every
// layer-ple kernel run as its CUDA source in the CPU emulator (tools/cuda-emu). Use:
//   METRALE_PLE_DEVICE_MODULE=test/gpu/emu/device.mjs node ../../node_modules/vitest/vitest.mjs run --config vitest.gpu.config.ts test/gpu/gemma3n-kernels.gpu.test.ts
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CpuBackend } from '@metrale/cpu-backend';
import { emulatedDevice } from '../../../../../tools/cuda-emu/device.mjs';

export const pleKernels = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'kernels');

/** The modules (src/ple-kernels.ts, src/altup-kernels.ts, src/gemma3n-kernels.ts), every entry point with its CTAs per cluster. */
export const pleModules = {
  'ple-project': { source: join(pleKernels, 'ple-project.cu'), kernels: { ple_embed_gather: 1, ple_combine: 1, ple_map_set: 1 } },
  'ple-gate': { source: join(pleKernels, 'ple-gate.cu'), kernels: { ple_gate_mul: 1, ple_out_norm: 1 } },
  altup: {
    source: join(pleKernels, 'altup.cu'),
    kernels: { gemma3n_altup_predict: 1, gemma3n_altup_correct: 1, gemma3n_magnitude: 1, gemma3n_streams_mean: 1 },
  },
  'gemma3n-rows': { source: join(pleKernels, 'gemma3n-rows.cu'), kernels: { gemma3n_copy: 1, gemma3n_sum3: 1, gemma3n_ple_add: 1, gemma3n_norm_add: 1 } },
};

export const { reason, createDevice } = emulatedDevice({ label: 'layer-ple', dependsOn: [pleKernels], createBackend: () => new CpuBackend(), modules: pleModules });
