// A test plugin given to the CLI with --plugin: layer type 'affine', out = W·x + b per row, f32
// rows, no state. Plain JavaScript, as a third party might ship a single module file.
import { defineKernel, definePlugin, toF32 } from '@metrale/core';

const affine = defineKernel({
  name: 'serve-test.affine',
  params: { input: 'ptr', output: 'ptr', weight: 'ptr', bias: 'ptr', rows: 'i32', inDim: 'i32', outDim: 'i32' },
  cpu: (a, { mem }) => {
    const W = mem.f32(a.weight, a.outDim * a.inDim);
    const b = mem.f32(a.bias, a.outDim);
    const x = mem.f32(a.input, a.rows * a.inDim);
    const out = mem.f32(a.output, a.rows * a.outDim);
    for (let r = 0; r < a.rows; r++) {
      for (let j = 0; j < a.outDim; j++) {
        let acc = b[j];
        for (let i = 0; i < a.inDim; i++) acc += W[j * a.inDim + i] * x[r * a.inDim + i];
        out[r * a.outDim + j] = acc;
      }
    }
  },
});

function upload(gpu, values) {
  const ptr = gpu.alloc(values.byteLength);
  gpu.upload(ptr, values);
  return ptr;
}

export default definePlugin({
  name: 'serve-test-affine',
  version: '0.0.1',
  specificationVersion: '1.0.0',
  layerTypes: ['affine'],
  create({ gpu, weights }) {
    const w = weights.get('weight');
    const [outDim, inDim] = w.shape;
    const weight = upload(gpu, toF32(w));
    const bias = upload(gpu, toF32(weights.get('bias')));
    return {
      type: 'affine',
      inputRowBytes: inDim * 4,
      outputRowBytes: outDim * 4,
      openState: (slot) => ({ slot }),
      closeState: () => {},
      forward(step) {
        step.gpu.launch(affine, { grid: 1, block: 1, stream: step.stream }, { input: step.input, output: step.output, weight, bias, rows: step.rows, inDim, outDim });
      },
      dispose() {
        gpu.free(weight);
        gpu.free(bias);
      },
    };
  },
});
