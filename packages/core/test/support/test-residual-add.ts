import { defineKernel, type DevicePtr, type GpuBackend, type ResidualAdd, type Stream } from '../../src/index.js';

const addKernel = defineKernel({
  name: 'test.add',
  params: { a: 'ptr', b: 'ptr', out: 'ptr', count: 'i32' },
  cpu: (p, { mem }) => {
    const a = mem.f32(p.a, p.count);
    const b = mem.f32(p.b, p.count);
    const o = mem.f32(p.out, p.count);
    for (let i = 0; i < p.count; i++) o[i] = a[i]! + b[i]!;
  },
});

/** The residual add of a decoder block, as a CPU-only test kernel (core ships none). */
export const testAdd: ResidualAdd = {
  add(gpu: GpuBackend, stream: Stream, a: DevicePtr, b: DevicePtr, out: DevicePtr, count: number) {
    gpu.launch(addKernel, { grid: 1, block: 1, stream }, { a, b, out, count });
  },
};
