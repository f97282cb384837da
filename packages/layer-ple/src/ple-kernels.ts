import { defineKernel, defineKernelModule } from '@metrale/core';
import { gateMulCpu, outNormCpu } from './ple-gate.cpu.js';
import { combineCpu, embedGatherCpu, mapSetCpu } from './ple-project.cpu.js';

// Fatbins built by metrale-build-kernels from kernels/*.cu into dist/kernels/. Layouts: KERNELS.md.
const projectModule = defineKernelModule('ple-project', new URL('./kernels/ple-project.fatbin', import.meta.url));
const gateModule = defineKernelModule('ple-gate', new URL('./kernels/ple-gate.fatbin', import.meta.url));

/** Rows [firstRow, firstRow + count) of the step, located through the driver's tables. */
const ROWS = { slots: 'ptr', rowStarts: 'ptr', batch: 'i32', firstRow: 'i32', count: 'i32' } as const;

// Rows (e, q, ple, g, h, y) are of the row type `dtype` (0 f32, 1 bf16, 2 f16; core's
// FLOAT_DTYPE_CODE); norm weights f32; the embedding and the table in their storage dtype.

/** e = embed_tokens[token] · scale, one block per row (padding and ids outside the vocabulary give zeros). */
export const embedGatherKernel = defineKernel({
  name: 'ple.embed-gather',
  params: { out: 'ptr', embed: 'ptr', embedDtype: 'i32', tokens: 'ptr', ...ROWS, hidden: 'i32', vocab: 'i32', scale: 'f32', dtype: 'i32' },
  cuda: { module: projectModule, symbol: 'ple_embed_gather' },
  cpu: embedGatherCpu,
});

/** ple[l] = (RMSNorm_P(q · projScale) · w + table[slot][l·P ..] · tableScale) · inputScale, one block per row. */
export const combineKernel = defineKernel({
  name: 'ple.combine',
  params: {
    ple: 'ptr', q: 'ptr', normWeight: 'ptr', slotRows: 'ptr', tableDtype: 'i32', rowSlots: 'ptr', map: 'ptr', tokens: 'ptr',
    ...ROWS,
    perLayer: 'i32', rowElems: 'i32', layerOffset: 'i32', tableVocab: 'i32',
    projScale: 'f32', tableScale: 'f32', inputScale: 'f32', eps: 'f32', dtype: 'i32',
  },
  cuda: { module: projectModule, symbol: 'ple_combine' },
  cpu: combineCpu,
});

/** map[t_i] = s_i for up to four (token, slot) pairs. */
export const mapSetKernel = defineKernel({
  name: 'ple.map-set',
  params: { map: 'ptr', n: 'i32', t0: 'i32', s0: 'i32', t1: 'i32', s1: 'i32', t2: 'i32', s2: 'i32', t3: 'i32', s3: 'i32' },
  cuda: { module: projectModule, symbol: 'ple_map_set' },
  cpu: mapSetCpu,
});

/** h = gelu_tanh(g) ⊙ ple, one block per row. */
export const gateMulKernel = defineKernel({
  name: 'ple.gate-mul',
  params: { h: 'ptr', g: 'ptr', ple: 'ptr', ...ROWS, perLayer: 'i32', dtype: 'i32' },
  cuda: { module: gateModule, symbol: 'ple_gate_mul' },
  cpu: gateMulCpu,
});

/** v = RMSNorm_D(y) · w, in place, one block per row. */
export const outNormKernel = defineKernel({
  name: 'ple.out-norm',
  params: { y: 'ptr', weight: 'ptr', ...ROWS, hidden: 'i32', eps: 'f32', dtype: 'i32' },
  cuda: { module: gateModule, symbol: 'ple_out_norm' },
  cpu: outNormCpu,
});

/** Threads per block for rows of `width` values: a multiple of 32, at most 256. */
export function threadsFor(width: number): number {
  return Math.min(256, 32 * Math.ceil(width / 32));
}
