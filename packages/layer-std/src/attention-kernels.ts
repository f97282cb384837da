import { defineKernel } from '@metrale/core';
import { coreCpu, prepCpu } from './attention.cpu.js';
import { attentionModule as module } from './std-modules.js';

const COMMON = {
  qkv: 'ptr', kCache: 'ptr', vCache: 'ptr', blockTable: 'ptr', slots: 'ptr', rowStarts: 'ptr', positions: 'ptr',
  batch: 'i32', heads: 'i32', kvHeads: 'i32', headDim: 'i32', pageSize: 'i32', maxPages: 'i32', gated: 'i32',
} as const;

/** Per row: q heads normed and rotated into `q`; k (normed, rotated) and v into the paged cache. */
export const prepKernel = defineKernel({
  name: 'std.attn_prep',
  params: {
    ...COMMON, q: 'ptr', qNorm: 'ptr', kNorm: 'ptr', cos: 'ptr', sin: 'ptr',
    rotaryDim: 'i32', maxPositions: 'i32', eps: 'f32', normOffset: 'f32',
  },
  cuda: { module, symbol: 'std_attn_prep' },
  cpu: prepCpu,
});

/** Per row and head: softmax(q·Kᵀ · scale) V over positions 0..pos of the row's sequence, times sigmoid(gate). */
export const coreKernel = defineKernel({
  name: 'std.attn_core',
  params: { ...COMMON, q: 'ptr', out: 'ptr', scale: 'f32' },
  cuda: { module, symbol: 'std_attn_core' },
  cpu: coreCpu,
});
