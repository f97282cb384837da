import { defineKernel } from '@metrale/core';
import { argmaxCpu, sampleCpu } from './sample.cpu.js';
import { sampleModule as module } from './std-modules.js';

export const argmaxKernel = defineKernel({
  name: 'std.argmax',
  params: { logits: 'ptr', out: 'ptr', rows: 'i32', vocab: 'i32' },
  cuda: { module, symbol: 'std_argmax' },
  cpu: argmaxCpu,
});

export const sampleKernel = defineKernel({
  name: 'std.sample',
  params: { logits: 'ptr', uniforms: 'ptr', out: 'ptr', rows: 'i32', vocab: 'i32', temperature: 'f32', topK: 'i32', topP: 'f32', minP: 'f32' },
  cuda: { module, symbol: 'std_sample' },
  cpu: sampleCpu,
});
