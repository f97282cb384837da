import { defineKernel, defineKernelModule } from '@metrale/core';
import { chunkCpu, foldCpu, recurrentCpu } from './gdn.cpu.js';

// Fatbins built by metrale-build-kernels from kernels/*.cu into dist/kernels/. Layouts: KERNELS.md.
const recurrentModule = defineKernelModule('gdn-recurrent', new URL('./kernels/gdn-recurrent.fatbin', import.meta.url));
const foldModule = defineKernelModule('gdn-fold', new URL('./kernels/gdn-fold.fatbin', import.meta.url));
const chunkModule = defineKernelModule('gdn-chunk', new URL('./kernels/gdn-chunk.fatbin', import.meta.url));

/** Shape parameters every GDN kernel takes, in this order after its pointers. */
const SHAPE = { hk: 'i32', hv: 'i32', dk: 'i32', dv: 'i32', convK: 'i32', maxK: 'i32' } as const;

/** Decode and verify: one CTA per (batch position, value head). */
export const recurrentKernel = defineKernel({
  name: 'gdn.recurrent',
  params: {
    qkvz: 'ptr', ba: 'ptr', y: 'ptr',
    slots: 'ptr', rowStarts: 'ptr', seqLens: 'ptr',
    state: 'ptr', convRing: 'ptr',
    convWeight: 'ptr', aLog: 'ptr', dtBias: 'ptr', normWeight: 'ptr',
    stash: 'ptr', convStash: 'ptr', pending: 'ptr',
    mode: 'i32', batch: 'i32', k: 'i32',
    ...SHAPE,
    eps: 'f32',
  },
  cuda: { module: recurrentModule, symbol: 'gdn_recurrent' },
  cpu: recurrentCpu,
});

/** Write-on-accept fold: the first naTab[p] verify rows of each batch position into state and ring. */
export const foldKernel = defineKernel({
  name: 'gdn.fold',
  params: {
    qkvz: 'ptr', slots: 'ptr', seqLens: 'ptr', naTab: 'ptr',
    state: 'ptr', convRing: 'ptr', stash: 'ptr',
    batch: 'i32', k: 'i32',
    ...SHAPE,
  },
  cuda: { module: foldModule, symbol: 'gdn_fold' },
  cpu: foldCpu,
});

/** Prefill of ragged rows from each slot's state, committing state and ring. */
export const chunkKernel = defineKernel({
  name: 'gdn.chunk',
  params: {
    qkvz: 'ptr', ba: 'ptr', y: 'ptr',
    slots: 'ptr', rowStarts: 'ptr', seqLens: 'ptr',
    state: 'ptr', convRing: 'ptr',
    convWeight: 'ptr', aLog: 'ptr', dtBias: 'ptr', normWeight: 'ptr',
    stash: 'ptr', convStash: 'ptr', pending: 'ptr',
    batch: 'i32',
    ...SHAPE,
    eps: 'f32',
  },
  cuda: { module: chunkModule, symbol: 'gdn_chunk' },
  cpu: chunkCpu,
});
