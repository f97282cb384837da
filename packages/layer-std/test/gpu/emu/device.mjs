// The GPU lane's stand-in device without a GPU (development only): the CPU backend, with the
// layer-std kernels listed below run as their CUDA sources in the CPU emulator (tools/cuda-emu);
// the others run as their TypeScript twins. Use:
//   METRALE_STD_DEVICE_MODULE=test/gpu/emu/device.mjs node ../../node_modules/vitest/vitest.mjs run --config vitest.gpu.config.ts test/gpu/moe-experts-kernels.gpu.test.ts -t moe_group
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CpuBackend } from '@metrale/cpu-backend';
import { emulatedDevice } from '../../../../../tools/cuda-emu/device.mjs';

export const stdKernels = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'kernels');

/** The modules the emulator runs (src/std-modules.ts), every entry point with its CTAs per cluster. */
export const stdModules = {
  'std-moe-group': { source: join(stdKernels, 'std-moe-group.cu'), kernels: { std_moe_group: 1 } },
  'std-attention-prefill': { source: join(stdKernels, 'std-attention-prefill.cu'), kernels: { std_attn_prefill_bf16: 1, std_attn_prefill_f16: 1 } },
  'std-attention-decode': { source: join(stdKernels, 'std-attention-decode.cu'), kernels: { std_attn_decode_bf16: 1, std_attn_decode_f16: 1 } },
  'std-attention': {
    source: join(stdKernels, 'std-attention.cu'),
    kernels: {
      std_attn_prep: 1, std_attn_core: 1, std_attn_combine: 1, std_attn_prep_bf16: 1, std_attn_core_bf16: 1, std_attn_combine_bf16: 1, std_attn_prep_f16: 1, std_attn_core_f16: 1,
      std_attn_combine_f16: 1,
    },
  },
  'std-rows': {
    source: join(stdKernels, 'std-rows.cu'),
    kernels: { std_embed: 1, std_rms_norm: 1, std_add_rms_norm: 1, std_layer_norm: 1, std_add: 1, std_silu_mul: 1, std_gelu_mul: 1, std_softcap: 1 },
  },
  'std-sample': { source: join(stdKernels, 'std-sample.cu'), kernels: { std_argmax: 1, std_sample: 1, std_logprobs: 1 } },
  'std-moe-route': { source: join(stdKernels, 'std-moe-route.cu'), kernels: { std_moe_route: 1, std_moe_route_few: 1, std_moe_router_gemv: 1, std_moe_shared_slots: 1 } },
  'std-moe': {
    source: join(stdKernels, 'std-moe.cu'),
    kernels: Object.fromEntries(
      [
        'std_moe_experts', 'std_moe_combine', 'std_moe_localize',
        ...['', '_bf16', '_f16', '_fp8_bf16', '_fp8_f16'].flatMap((s) => ['up', 'down', 'up_rowwise', 'rowwise'].map((k) => `std_moe_experts_${k}${s}`)),
      ].map((k) => [k, 1]),
    ),
  },
  'std-moe-gemm-16bit': {
    source: join(stdKernels, 'std-moe-gemm-16bit.cu'),
    kernels: Object.fromEntries(['', '_few'].flatMap((n) => ['_bf16', '_f16'].flatMap((t) => [`std_moe_gemm_up${n}${t}`, `std_moe_gemm_down${n}${t}`])).map((k) => [k, 1])),
  },
  'std-moe-gemm': {
    source: join(stdKernels, 'std-moe-gemm.cu'),
    kernels: Object.fromEntries(['', '_few'].flatMap((n) => ['_fp8_bf16', '_fp8_f16'].flatMap((t) => [`std_moe_gemm_up${n}${t}`, `std_moe_gemm_down${n}${t}`])).map((k) => [k, 1])),
  },
};

export const { reason, createDevice } = emulatedDevice({
  label: 'layer-std',
  dependsOn: [stdKernels],
  createBackend: () => new CpuBackend({ memoryLimit: 2 ** 33 }),
  modules: stdModules,
});
