import { defineKernelModule } from '@metrale/core';

// Fatbins built by metrale-build-kernels (the package's build, when nvcc is there) from kernels/*.cu
// into dist/kernels/ (KERNELS.md). A package built without nvcc has none: its layers then run on the
// CPU backend only and refuse CUDA with an error that says so (require-kernels.ts).
export const rowsModule = defineKernelModule('std-rows', new URL('./kernels/std-rows.fatbin', import.meta.url));
export const moeModule = defineKernelModule('std-moe', new URL('./kernels/std-moe.fatbin', import.meta.url));
export const moeRouteModule = defineKernelModule('std-moe-route', new URL('./kernels/std-moe-route.fatbin', import.meta.url));
export const moeGroupModule = defineKernelModule('std-moe-group', new URL('./kernels/std-moe-group.fatbin', import.meta.url));
export const moeGemmModule = defineKernelModule('std-moe-gemm', new URL('./kernels/std-moe-gemm.fatbin', import.meta.url));
export const moeGemm16Module = defineKernelModule('std-moe-gemm-16bit', new URL('./kernels/std-moe-gemm-16bit.fatbin', import.meta.url));
export const attentionModule = defineKernelModule('std-attention', new URL('./kernels/std-attention.fatbin', import.meta.url));
export const attentionDecodeModule = defineKernelModule('std-attention-decode', new URL('./kernels/std-attention-decode.fatbin', import.meta.url));
export const attentionPrefillModule = defineKernelModule('std-attention-prefill', new URL('./kernels/std-attention-prefill.fatbin', import.meta.url));
export const sampleModule = defineKernelModule('std-sample', new URL('./kernels/std-sample.fatbin', import.meta.url));
