import { defineKernel, defineKernelModule } from '@metrale/core';
import { chunkCpu } from '../src/gdn.cpu.js';
import { SHAPE, STEP_BUFFERS } from '../src/gdn-kernels.js';

// The row-by-row prefill (`gdn.chunk`): the oracle the chunked prefill is checked against, on the
// CPU (chunkCpu, the reference's row loop) and on CUDA (test/gpu/kernels/gdn-chunk-rowwise.cu, the
// general kernel's row loop). Not part of the package: the layer prefills with the chunked WY form;
// the GPU lane builds this fatbin itself (gpu/gdn-lane.ts withFatbin(chunkKernel, laneDir)).
const rowwiseModule = defineKernelModule('gdn-chunk-rowwise', new URL('./gpu/dist/kernels/gdn-chunk-rowwise.fatbin', import.meta.url));

/** Prefill of ragged rows from each slot's state (pending carried rows folded first), committing state and ring, row by row; y in f32. */
export const chunkKernel = defineKernel({
  name: 'gdn.chunk',
  params: { ...STEP_BUFFERS, batch: 'i32', ...SHAPE, eps: 'f32' },
  cuda: { module: rowwiseModule, symbol: 'gdn_chunk_rowwise' },
  cpu: chunkCpu,
});
