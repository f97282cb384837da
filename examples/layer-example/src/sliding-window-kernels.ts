import { defineKernel, defineKernelModule } from '@metrale/core';
import { appendCpu, attendCpu } from './sliding-window.cpu.js';

// The fatbin ships inside this package (built by metrale-build-kernels into dist/kernels/).
const module = defineKernelModule('sliding-window', new URL('./kernels/sliding-window.fatbin', import.meta.url));

export const appendKernel = defineKernel({
  name: 'sliding-window.append',
  params: { input: 'ptr', cache: 'ptr', slots: 'ptr', rowStarts: 'ptr', positions: 'ptr', batch: 'i32', hidden: 'i32', capacity: 'i32' },
  cuda: { module, symbol: 'sliding_window_append' },
  cpu: appendCpu,
});

export const attendKernel = defineKernel({
  name: 'sliding-window.attend',
  params: {
    input: 'ptr', output: 'ptr', cache: 'ptr', gain: 'ptr', slots: 'ptr', rowStarts: 'ptr', positions: 'ptr',
    batch: 'i32', hidden: 'i32', capacity: 'i32', window: 'i32', scale: 'f32',
  },
  cuda: { module, symbol: 'sliding_window_attend' },
  cpu: attendCpu,
});
