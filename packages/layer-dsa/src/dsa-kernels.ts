import { defineKernel, defineKernelModule } from '@metrale/core';
import { indexAppendCpu, mlaAppendCpu, poolAppendCpu, qRopeCpu, ringStoreCpu } from './dsa-append.cpu.js';
import { sparseAttnCpu } from './dsa-attn.cpu.js';
import { indexScoreCpu, topkCpu } from './dsa-index.cpu.js';

// Fatbins built by metrale-build-kernels from kernels/<family>.cu into dist/kernels/. Parameter
// order is the CUDA signature order. Layouts and semantics: KERNELS.md. Codes named `*Dtype` of
// row-typed buffers (qr, qb, olat) are core's FLOAT_DTYPE_CODE; kvDtype and idxDtype are the caches'.
const appendModule = defineKernelModule('dsa-append', new URL('./kernels/dsa-append.fatbin', import.meta.url));
const indexModule = defineKernelModule('dsa-index', new URL('./kernels/dsa-index.fatbin', import.meta.url));
const topkModule = defineKernelModule('dsa-topk', new URL('./kernels/dsa-topk.fatbin', import.meta.url));
const attnModule = defineKernelModule('dsa-attn', new URL('./kernels/dsa-attn.fatbin', import.meta.url));

/** The step tables every per-row kernel reads, in this order. */
const TABLES = { slots: 'ptr', rowStarts: 'ptr', positions: 'ptr' } as const;
/** A paged cache (KERNELS.md): the model's block table, its width, and cache rows per page. */
const PAGES = { blockTable: 'ptr', pagesPerSeq: 'i32', pageRows: 'i32' } as const;

/** RMSNorms of the q and kv latents (qr in the rows' type); the MLA cache row [c | RoPE(k_rope)] at (slot, pos). */
export const mlaAppendKernel = defineKernel({
  name: 'dsa.mla_append',
  params: {
    xa: 'ptr', qr: 'ptr', kvCache: 'ptr', qaNorm: 'ptr', kvaNorm: 'ptr', invFreq: 'ptr',
    ...TABLES,
    batch: 'i32', xaWidth: 'i32', qLora: 'i32', kvLora: 'i32', rope: 'i32', ropeInterleave: 'i32', kvDtype: 'i32', qrDtype: 'i32',
    ...PAGES, eps: 'f32',
  },
  cuda: { module: appendModule, symbol: 'dsa_mla_append' },
  cpu: mlaAppendCpu,
});

/** LayerNorm + RoPE of the indexer key; into the key cache (mode 0) or back into xa (mode 1, pooled). */
export const indexAppendKernel = defineKernel({
  name: 'dsa.index_append',
  params: {
    xa: 'ptr', idxCache: 'ptr', idxScales: 'ptr', kNormWeight: 'ptr', kNormBias: 'ptr', invFreq: 'ptr',
    ...TABLES,
    batch: 'i32', xaWidth: 'i32', kOff: 'i32', dI: 'i32', idxRope: 'i32', ropeInterleave: 'i32', idxDtype: 'i32', ...PAGES, mode: 'i32',
    eps: 'f32',
  },
  cuda: { module: appendModule, symbol: 'dsa_index_append' },
  cpu: indexAppendCpu,
});

/** glm5_next: the key of every pool a row of the step completes, into the pool cache. */
export const poolAppendKernel = defineKernel({
  name: 'dsa.pool_append',
  params: {
    xa: 'ptr', ring: 'ptr', poolCache: 'ptr', poolScales: 'ptr', ape: 'ptr',
    slots: 'ptr', seqLens: 'ptr', rowStarts: 'ptr', positions: 'ptr',
    batch: 'i32', xaWidth: 'i32', kOff: 'i32', gOff: 'i32', dI: 'i32', kpool: 'i32', ringLen: 'i32', idxDtype: 'i32', ...PAGES,
  },
  cuda: { module: appendModule, symbol: 'dsa_pool_append' },
  cpu: poolAppendCpu,
});

/** glm5_next: the last ringLen rows of each sequence's step into the slot's ring (after dsa.pool_append). */
export const ringStoreKernel = defineKernel({
  name: 'dsa.ring_store',
  params: {
    xa: 'ptr', ring: 'ptr',
    ...TABLES,
    batch: 'i32', xaWidth: 'i32', kOff: 'i32', gOff: 'i32', dI: 'i32', ringLen: 'i32',
  },
  cuda: { module: appendModule, symbol: 'dsa_ring_store' },
  cpu: ringStoreCpu,
});

/** RoPE of the MLA query's rope part (into qlat) and of the indexer queries' rope channels (in place). */
export const qRopeKernel = defineKernel({
  name: 'dsa.q_rope',
  params: {
    qb: 'ptr', qlat: 'ptr', invFreq: 'ptr',
    ...TABLES,
    batch: 'i32', qbWidth: 'i32', heads: 'i32', nope: 'i32', rope: 'i32', kvLora: 'i32',
    idxHeads: 'i32', dI: 'i32', idxRope: 'i32', ropeInterleave: 'i32', idxRopeInterleave: 'i32', qbDtype: 'i32',
  },
  cuda: { module: appendModule, symbol: 'dsa_q_rope' },
  cpu: qRopeCpu,
});

/** Indexer scores of rows [rowBase, rowBase + rowCount) against their slot's keys (or pools): one pass over each slot's keys. */
export const indexScoreKernel = defineKernel({
  name: 'dsa.index_score',
  params: {
    qb: 'ptr', xa: 'ptr', keys: 'ptr', keyScales: 'ptr', scores: 'ptr',
    ...TABLES,
    batch: 'i32', rowBase: 'i32', rowCount: 'i32', qbWidth: 'i32', qIOff: 'i32', xaWidth: 'i32', wOff: 'i32',
    idxHeads: 'i32', dI: 'i32', kpool: 'i32', ...PAGES, scoreStride: 'i32', idxDtype: 'i32', qbDtype: 'i32',
    scale: 'f32',
  },
  cuda: { module: indexModule, symbol: 'dsa_index_score' },
  cpu: indexScoreCpu,
});

/** Top-k per row (radix select on the GPU; the tie rule of KERNELS.md), expanded to ascending token positions. */
export const topkKernel = defineKernel({
  name: 'dsa.topk',
  params: {
    scores: 'ptr', sel: 'ptr', selCount: 'ptr',
    ...TABLES,
    batch: 'i32', rowBase: 'i32', rowCount: 'i32', scoreStride: 'i32', selWidth: 'i32', topk: 'i32', kpool: 'i32',
  },
  cuda: { module: topkModule, symbol: 'dsa_topk' },
  cpu: topkCpu,
});

/** Absorbed MLA attention of every row and head over its selected tokens only. */
export const sparseAttnKernel = defineKernel({
  name: 'dsa.sparse_attn',
  params: {
    qlat: 'ptr', kvCache: 'ptr', sel: 'ptr', selCount: 'ptr', olat: 'ptr',
    ...TABLES,
    batch: 'i32', heads: 'i32', kvLora: 'i32', rope: 'i32', selWidth: 'i32', ...PAGES, kvDtype: 'i32', olatDtype: 'i32',
    scale: 'f32',
  },
  cuda: { module: attnModule, symbol: 'dsa_sparse_attn' },
  cpu: sparseAttnCpu,
});
