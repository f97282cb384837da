// The GPU lane's stand-in device for the Gemma 3n decoder layer without a GPU (development only):
// the CPU backend, with layer-std's and layer-ple's kernels run as their CUDA sources in the CPU
// emulator (tools/cuda-emu; each package's test/gpu/emu/device.mjs lists its modules). GEMMs run
// on the CPU backend. Use:
//   METRALE_SERVE_DEVICE_MODULE=test/gpu/emu/device.mjs node ../../node_modules/vitest/vitest.mjs run --config vitest.gpu.config.ts test/gpu/gemma3n-decoder-layer.gpu.test.ts
import { CpuBackend } from '@metrale/cpu-backend';
import { emulatedDevice } from '../../../../../tools/cuda-emu/device.mjs';
import { pleKernels, pleModules } from '../../../../../packages/layer-ple/test/gpu/emu/device.mjs';
import { stdKernels, stdModules } from '../../../../../packages/layer-std/test/gpu/emu/device.mjs';

export const { reason, createDevice } = emulatedDevice({
  label: 'serve-gemma3n',
  dependsOn: [stdKernels, pleKernels],
  createBackend: () => new CpuBackend(),
  modules: { ...stdModules, ...pleModules },
});
