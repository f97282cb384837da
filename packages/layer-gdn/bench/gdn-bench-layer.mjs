// The GDN layer the kernel benches time (gdn.bench.mjs, gdn-ab.mjs) at the Qwen3-Next-80B layer
// shape: its sizes, its device buffers filled with random data (never zeros), and step tables over
// disjoint slot sets, rotated so that the state one pass touches exceeds the L2.

export const SHAPE = { hk: 16, hv: 32, dk: 128, dv: 128, convK: 4, maxK: 4 };
export const EPS = 1e-6;
export const MiB = 2 ** 20;
export const convDim = 2 * SHAPE.hk * SHAPE.dk + SHAPE.hv * SHAPE.dv;
/** A row of the input projections' output: in_proj_qkvz's columns, then in_proj_ba's (projectionRow; 2·H_v is a multiple of 4 here). */
export const width = 2 * SHAPE.hk * SHAPE.dk + 2 * SHAPE.hv * SHAPE.dv + 2 * SHAPE.hv;
/** f32 state of one sequence: H_v · d_k · d_v · 4 bytes (2 MiB). */
export const stateSeqBytes = SHAPE.hv * SHAPE.dk * SHAPE.dv * 4;
export const stashSeqFloats = SHAPE.hv * SHAPE.maxK * (SHAPE.dk + SHAPE.dv + 1);
/** The conv stash is a ring of 2·maxK rows per slot (KERNELS.md). */
export const convStashRows = 2 * SHAPE.maxK;

/** Every buffer of the layer for `maxSlots` sequence slots and `maxRows` step rows, random. */
export function allocLayer(gpu, maxSlots, maxRows) {
  const L = {};
  const sizes = {
    state: maxSlots * stateSeqBytes,
    convRing: maxSlots * SHAPE.convK * convDim * 4,
    convWeight: convDim * SHAPE.convK * 4,
    aLog: SHAPE.hv * 4,
    dtBias: SHAPE.hv * 4,
    normWeight: SHAPE.dv * 4,
    qkvz: maxRows * width * 4,
    y: maxRows * SHAPE.hv * SHAPE.dv * 4,
    stash: maxSlots * stashSeqFloats * 4,
    convStash: maxSlots * convStashRows * convDim * 4,
    pending: maxSlots * 4,
  };
  try {
    for (const [name, bytes] of Object.entries(sizes)) L[name] = gpu.alloc(bytes);
    fillRandomF32(gpu, L.state, sizes.state / 4, 0.5);
    fillRandomF32(gpu, L.convRing, sizes.convRing / 4);
    fillRandomF32(gpu, L.convWeight, sizes.convWeight / 4, 0.6);
    gpu.upload(L.aLog, Float32Array.from({ length: SHAPE.hv }, () => Math.log(0.05 + 0.6 * Math.random())));
    fillRandomF32(gpu, L.dtBias, SHAPE.hv);
    gpu.upload(L.normWeight, Float32Array.from({ length: SHAPE.dv }, () => 0.5 + Math.random()));
    fillRandomF32(gpu, L.qkvz, sizes.qkvz / 4);
    fillRandomF32(gpu, L.stash, sizes.stash / 4, 0.1);
    fillRandomF32(gpu, L.convStash, sizes.convStash / 4);
    gpu.upload(L.pending, new Uint32Array(maxSlots));
    return L;
  } catch (error) {
    freeAll(gpu, L);
    throw error;
  }
}

/** Frees every device pointer among the object's values. */
export function freeAll(gpu, ptrs) {
  for (const p of Object.values(ptrs)) gpu.free(p);
}

/** Step tables for `sets` disjoint slot sets of `batch` positions: i32 slots, seqLens, rowStarts (k rows each), u32 naTab (k). */
export function stepTables(gpu, batch, sets, k, seqLen) {
  const up = (a) => {
    const p = gpu.alloc(Math.max(16, a.byteLength));
    gpu.upload(p, a);
    return p;
  };
  const t = [];
  for (let s = 0; s < sets; s++) {
    t.push({
      slots: up(Int32Array.from({ length: batch }, (_, p) => s * batch + p)),
      seqLens: up(new Int32Array(batch).fill(seqLen)),
      rowStarts: up(Int32Array.from({ length: batch + 1 }, (_, p) => p * k)),
      naTab: up(new Uint32Array(batch).fill(k)),
    });
  }
  return t;
}

export const freeTables = (gpu, ts) => ts.forEach((t) => freeAll(gpu, t));

/** Slot sets of `batch` positions such that one pass over all of them is ≥ 4 × L2 (and the slots fit). */
export const setsFor = (batch, l2Bytes, maxSlots) =>
  Math.max(1, Math.min(Math.floor(maxSlots / batch), Math.ceil((4 * l2Bytes) / (batch * stateSeqBytes))));

/** Random f32 in [−scale, scale) (never zero), uploaded in 16 MiB tiles. */
export function fillRandomF32(gpu, ptr, count, scale = 1) {
  const tile = Math.min(count, 4 * MiB);
  const data = new Float32Array(tile);
  for (let i = 0; i < tile; i++) data[i] = (Math.random() * 2 - 1) * scale || scale * 0.5;
  for (let off = 0; off < count; off += tile) {
    const n = Math.min(tile, count - off);
    gpu.upload(ptr + BigInt(off * 4), n === tile ? data : data.subarray(0, n));
  }
}
