import { defineKernelModule } from '@metrale/core';

// Fatbins built by metrale-build-kernels from kernels/*.cu into dist/kernels/ (KERNELS.md). The
// CUDA sources arrive with the package's CUDA work; until a fatbin exists, the layers that need it
// run on the CPU backend only and refuse CUDA with an error that says so (require-kernels.ts).
export const rowsModule = defineKernelModule('std-rows', new URL('./kernels/std-rows.fatbin', import.meta.url));
export const moeModule = defineKernelModule('std-moe', new URL('./kernels/std-moe.fatbin', import.meta.url));
export const attentionModule = defineKernelModule('std-attention', new URL('./kernels/std-attention.fatbin', import.meta.url));
export const sampleModule = defineKernelModule('std-sample', new URL('./kernels/std-sample.fatbin', import.meta.url));
