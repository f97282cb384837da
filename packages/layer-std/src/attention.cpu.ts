import {
  elementAt, elementReader, elementWriter, readElements, roundRows, rowDtypeOf, type CpuKernelContext, type DeviceMemoryView, type FloatDtype,
} from '@metrale/core';
import { DECODE_TILE_KEYS, DECODE_WARPS, keyChunksOf } from './key-chunks.js';
import { rmsNormRow } from './rows.cpu.js';

// CPU reference of kernels/std-attention.cu (KERNELS.md): `std.attn_prep` writes each row's
// normalised, rotated query and its key and value into the paged cache; `std.attn_core` attends
// each row causally over its sequence's cache and applies the output gate. qkv, q, the caches and
// out are of the row type `dtype`; the twin computes in f64 and rounds where the kernels store (and
// the normed q and k to the row type before RoPE, as the kernel does).

interface Common {
  readonly qkv: bigint;
  readonly kCache: bigint;
  readonly vCache: bigint;
  readonly blockTable: bigint;
  readonly slots: bigint;
  readonly rowStarts: bigint;
  readonly positions: bigint;
  readonly batch: number;
  readonly heads: number;
  readonly kvHeads: number;
  readonly headDim: number;
  readonly pageSize: number;
  readonly maxPages: number;
  /** 1: q_proj rows hold [q | gate] per head. */
  readonly gated: number;
  /** FLOAT_DTYPE_CODE of qkv, q, the caches and out. */
  readonly dtype: number;
  /** 1: qkv rows hold k and v after q, and prep writes them into the cache; 0: q only (a KV-shared layer reads another layer's cache). */
  readonly ownKv: number;
}

export interface PrepArgs extends Common {
  readonly q: bigint;
  /** f32 [headDim] each, or 0n without q/k norms. */
  readonly qNorm: bigint;
  readonly kNorm: bigint;
  /** f32 [positions][rotaryDim / 2]. */
  readonly cos: bigint;
  readonly sin: bigint;
  readonly rotaryDim: number;
  readonly maxPositions: number;
  readonly eps: number;
  readonly normOffset: number;
  /** 1: the q/k norms round x̂ to the row type before the weight (`w · x̂.to(dtype)`); 0: once, after it. */
  readonly roundNormalized: number;
  /** 1: v is RMS-normalised without a weight (Gemma 3n's `v_norm`) before it enters the cache. */
  readonly vNorm: number;
}

export interface PrefillArgs extends Common {
  readonly q: bigint;
  readonly out: bigint;
  readonly scale: number;
  /** Sliding window w > 0: a row at position p sees keys p − w + 1 … p only; 0: every key up to p. */
  readonly window: number;
}

export interface CoreArgs extends PrefillArgs {
  /** The most chunks a row's keys are cut into (1: none). */
  readonly chunks: number;
  /** f32 records [rows][heads][chunks] × (max, sum, headDim sums) of rows of several chunks. */
  readonly partials: bigint;
}

/** Where one row of the step lives: batch position, slot, sequence position. */
interface RowPlace {
  readonly slot: number;
  readonly pos: number;
}

function places(a: Common, mem: DeviceMemoryView): { rows: number; at: (row: number) => RowPlace } {
  const rowStarts = mem.i32(a.rowStarts, a.batch + 1);
  const slots = mem.i32(a.slots, a.batch);
  const rows = rowStarts[a.batch]!;
  const positions = mem.i32(a.positions, Math.max(1, rows));
  let p = 0;
  return {
    rows,
    at(row: number): RowPlace {
      while (p + 1 < a.batch && rowStarts[p + 1]! <= row) p++;
      return { slot: slots[p]!, pos: positions[row]! };
    },
  };
}

/** Element offset of (slot, position, kv head) in a cache of [pages][pageSize][kvHeads][headDim]. */
function cacheOffset(a: Common, table: Int32Array, slot: number, pos: number, h: number): number {
  const page = table[slot * a.maxPages + Math.floor(pos / a.pageSize)]!;
  return ((page * a.pageSize + (pos % a.pageSize)) * a.kvHeads + h) * a.headDim;
}

function qkvWidth(a: Common): number {
  return a.heads * a.headDim * (a.gated ? 2 : 1) + (a.ownKv ? 2 * a.kvHeads * a.headDim : 0);
}

/** The first key a row at `pos` sees. */
export function firstKey(pos: number, window: number): number {
  return window > 0 ? Math.max(0, pos - window + 1) : 0;
}

function rotate(v: Float64Array, cos: Float32Array, sin: Float32Array, base: number, half: number): void {
  for (let i = 0; i < half; i++) {
    const x1 = v[i]!;
    const x2 = v[i + half]!;
    const c = cos[base + i]!;
    const s = sin[base + i]!;
    v[i] = x1 * c - x2 * s;
    v[i + half] = x2 * c + x1 * s;
  }
}

export function prepCpu(a: PrepArgs, { mem }: CpuKernelContext): void {
  const dtype = rowDtypeOf(a.dtype);
  const { rows, at } = places(a, mem);
  const d = a.headDim;
  const W = qkvWidth(a);
  const qkv = readElements(mem, a.qkv, Math.max(1, rows) * W, dtype);
  const q = elementWriter(mem, a.q, Math.max(1, rows) * a.heads * d, dtype);
  const qNorm = a.qNorm === 0n ? undefined : mem.f32(a.qNorm, d);
  const kNorm = a.kNorm === 0n ? undefined : mem.f32(a.kNorm, d);
  const half = a.rotaryDim / 2;
  const cos = mem.f32(a.cos, a.maxPositions * half);
  const sin = mem.f32(a.sin, a.maxPositions * half);
  const v = new Float64Array(d);
  const qStride = a.gated ? 2 * d : d;
  const kBase = a.heads * qStride;
  const vBase = kBase + a.kvHeads * d;
  for (let row = 0; row < rows; row++) {
    const { slot, pos } = at(row);
    if (slot < 0) {
      for (let i = row * a.heads * d; i < (row + 1) * a.heads * d; i++) q(i, 0);
      continue;
    }
    const table = mem.i32(a.blockTable, (slot + 1) * a.maxPages);
    const src = row * W;
    // The normed head rounded to the row type (the norm's output), then rotated in f64.
    const normed = (o: number, w: Float32Array | undefined): void => {
      if (w) {
        rmsNormRow(qkv, o, w, v, 0, d, a.eps, a.normOffset, a.roundNormalized, dtype);
        for (let i = 0; i < d; i++) v[i] = roundRows(dtype, v[i]!);
      } else {
        for (let i = 0; i < d; i++) v[i] = qkv[o + i]!;
      }
      rotate(v, cos, sin, pos * half, half);
    };
    for (let h = 0; h < a.heads; h++) {
      normed(src + h * qStride, qNorm);
      for (let i = 0; i < d; i++) q((row * a.heads + h) * d + i, v[i]!);
    }
    if (!a.ownKv) continue;
    for (let h = 0; h < a.kvHeads; h++) {
      normed(src + kBase + h * d, kNorm);
      const c = cacheOffset(a, table, slot, pos, h);
      const kc = elementWriter(mem, elementAt(a.kCache, c, dtype), d, dtype);
      const vc = elementWriter(mem, elementAt(a.vCache, c, dtype), d, dtype);
      const vo = src + vBase + h * d;
      let inv = 1;
      if (a.vNorm) {
        let ss = 0;
        for (let i = 0; i < d; i++) ss += qkv[vo + i]! * qkv[vo + i]!;
        inv = 1 / Math.sqrt(ss / d + a.eps);
      }
      for (let i = 0; i < d; i++) {
        kc(i, v[i]!);
        vc(i, qkv[vo + i]! * inv);
      }
    }
  }
}

/**
 * The K and V rows of each slot's positions, decoded once per launch: std.attn_core only reads the
 * cache (std.attn_prep wrote this step's rows before it), so every row of a long prefill reads
 * the same decoded context. Layout per slot: [position][kvHeads][headDim].
 */
function decodedContext(a: PrefillArgs, mem: DeviceMemoryView, dtype: FloatDtype) {
  const width = a.kvHeads * a.headDim;
  const slots = new Map<number, { k: Float32Array; v: Float32Array; n: number }>();
  return (slot: number, upTo: number): { k: Float32Array; v: Float32Array } => {
    let c = slots.get(slot);
    if (!c) slots.set(slot, (c = { k: new Float32Array(0), v: new Float32Array(0), n: 0 }));
    if (c.n > upTo) return c;
    if (c.k.length < (upTo + 1) * width) {
      const size = Math.max((upTo + 1) * width, 2 * c.k.length);
      const [k, v] = [new Float32Array(size), new Float32Array(size)];
      k.set(c.k.subarray(0, c.n * width));
      v.set(c.v.subarray(0, c.n * width));
      c.k = k;
      c.v = v;
    }
    const table = mem.i32(a.blockTable, (slot + 1) * a.maxPages);
    for (let t = c.n; t <= upTo; t++) {
      const at = cacheOffset(a, table, slot, t, 0);
      c.k.set(readElements(mem, elementAt(a.kCache, at, dtype), width, dtype), t * width);
      c.v.set(readElements(mem, elementAt(a.vCache, at, dtype), width, dtype), t * width);
    }
    c.n = upTo + 1;
    return c;
  };
}

/**
 * `std.attn_core`: the output of each row of one chunk; each (head, chunk) record of a row of
 * several (max and sum of the chunk's e^(s − max) and its weighted sum of V, exact, stored in f32).
 */
export function coreCpu(a: CoreArgs, { mem }: CpuKernelContext): void {
  attend(a, mem, 0, a.chunks, a.partials);
}

/**
 * `std.attn_decode` (kernels/std-attention-decode.cu): `std.attn_core`'s result and records with the
 * kernel's rounding. A chunk's keys are tiles of 16; warp w of 4 takes tiles w, w + 4, … with its
 * own running max, each e^(s − m) entering P·V rounded to the row type (the sum takes it unrounded);
 * the warps' sums are then merged in warp order.
 */
export function decodeCpu(a: CoreArgs, { mem }: CpuKernelContext): void {
  attend(a, mem, 0, a.chunks, a.partials, true);
}

/** `std.attn_combine`: the records of each row of several chunks merged (f64), normalised and gated into out. */
export function combineCpu(a: CoreArgs, { mem }: CpuKernelContext): void {
  const dtype = rowDtypeOf(a.dtype);
  const { rows, at } = places(a, mem);
  const d = a.headDim;
  const W = qkvWidth(a);
  const qkv = elementReader(mem, a.qkv, Math.max(1, rows) * W, dtype);
  const out = elementWriter(mem, a.out, Math.max(1, rows) * a.heads * d, dtype);
  for (let row = 0; row < rows; row++) {
    const { slot, pos } = at(row);
    if (slot < 0) continue;
    const ch = keyChunksOf(pos - firstKey(pos, a.window) + 1, a.chunks);
    if (ch.n === 1) continue;
    for (let h = 0; h < a.heads; h++) {
      const rec = mem.f32(a.partials + BigInt(4 * (row * a.heads + h) * a.chunks * (d + 2)), ch.n * (d + 2));
      let M = -Infinity;
      for (let c = 0; c < ch.n; c++) M = Math.max(M, rec[c * (d + 2)]!);
      const w = Array.from({ length: ch.n }, (_, c) => 2 ** (rec[c * (d + 2)]! - M));
      let L = 0;
      for (let c = 0; c < ch.n; c++) L += rec[c * (d + 2) + 1]! * w[c]!;
      const gate = a.gated ? row * W + h * 2 * d + d : -1;
      for (let i = 0; i < d; i++) {
        let o = 0;
        for (let c = 0; c < ch.n; c++) o += rec[c * (d + 2) + 2 + i]! * w[c]!;
        const g = gate >= 0 ? 1 / (1 + Math.exp(-qkv(gate + i))) : 1;
        out((row * a.heads + h) * d + i, (o / L) * g);
      }
    }
  }
}

/**
 * `std.attn_prefill` (kernels/std-attention-prefill.cu): `std.attn_core`'s result with the kernel's
 * one extra rounding. It walks each row's keys in tiles (64 keys, 32 above head dim 128, from key 0)
 * with a running max m over the keys so far; each e^(s − m) enters P·V rounded to the row type (the
 * sum l takes it unrounded), and the sums are rescaled by e^(m_old − m_new) when m grows.
 */
export function prefillCpu(a: PrefillArgs, { mem }: CpuKernelContext): void {
  const D = Math.max(32, 2 ** Math.ceil(Math.log2(a.headDim)));
  attend(a, mem, D > 128 ? 32 : 64, 1, 0n);
}

/**
 * Causal attention of every row; `keyTile` > 0: P rounded per tile as std.attn_prefill does;
 * `chunks` > 1: rows of several chunks write their records instead of the output; `warpTiles`:
 * every chunk summed as std.attn_decode's warps sum it.
 */
function attend(a: PrefillArgs, mem: DeviceMemoryView, keyTile: number, chunks: number, partials: bigint, warpTiles = false): void {
  const dtype = rowDtypeOf(a.dtype);
  const { rows, at } = places(a, mem);
  const d = a.headDim;
  const W = qkvWidth(a);
  const qkv = elementReader(mem, a.qkv, Math.max(1, rows) * W, dtype);
  const q = readElements(mem, a.q, Math.max(1, rows) * a.heads * d, dtype);
  const out = elementWriter(mem, a.out, Math.max(1, rows) * a.heads * d, dtype);
  const group = a.heads / a.kvHeads;
  const width = a.kvHeads * d;
  const context = decodedContext(a, mem, dtype);
  const acc = new Float64Array(d);
  for (let row = 0; row < rows; row++) {
    const { slot, pos } = at(row);
    if (slot < 0) {
      for (let i = row * a.heads * d; i < (row + 1) * a.heads * d; i++) out(i, 0);
      continue;
    }
    const { k, v } = context(slot, pos);
    const lo = firstKey(pos, a.window);
    const scores = new Float64Array(pos + 1);
    for (let h = 0; h < a.heads; h++) {
      const kvh = Math.floor(h / group);
      const qo = (row * a.heads + h) * d;
      let max = -Infinity;
      for (let t = lo; t <= pos; t++) {
        const ko = t * width + kvh * d;
        let s = 0;
        for (let i = 0; i < d; i++) s += q[qo + i]! * k[ko + i]!;
        scores[t] = s * a.scale;
        max = Math.max(max, scores[t]!);
      }
      const ch = keyChunksOf(pos - lo + 1, chunks);
      if (ch.n > 1) {
        writeRecords(mem, partials, (row * a.heads + h) * chunks * (d + 2), ch, lo, pos, scores, v, width, kvh * d, d, warpTiles ? dtype : undefined);
        continue;
      }
      let denom = 0;
      acc.fill(0);
      if (warpTiles) {
        denom = warpTileSums(scores, v, width, kvh * d, d, lo, pos, dtype, acc).sum;
      } else if (keyTile > 0) {
        let m = -Infinity;
        // Tiles stay aligned to key 0, as the kernel's; keys before the window are not in any sum.
        for (let t0 = lo - (lo % keyTile); t0 <= pos; t0 += keyTile) {
          const t1 = Math.min(pos, t0 + keyTile - 1);
          let mt = m;
          for (let t = Math.max(t0, lo); t <= t1; t++) mt = Math.max(mt, scores[t]!);
          const c = m === -Infinity ? 0 : Math.exp(m - mt);
          denom *= c;
          for (let i = 0; i < d; i++) acc[i]! *= c;
          for (let t = Math.max(t0, lo); t <= t1; t++) {
            const e = Math.exp(scores[t]! - mt);
            denom += e;
            const p = roundRows(dtype, e);
            const vo = t * width + kvh * d;
            for (let i = 0; i < d; i++) acc[i]! += p * v[vo + i]!;
          }
          m = mt;
        }
      } else {
        for (let t = lo; t <= pos; t++) {
          const e = Math.exp(scores[t]! - max);
          denom += e;
          const vo = t * width + kvh * d;
          for (let i = 0; i < d; i++) acc[i]! += e * v[vo + i]!;
        }
      }
      const gate = a.gated ? row * W + h * 2 * d + d : -1;
      for (let i = 0; i < d; i++) {
        const g = gate >= 0 ? 1 / (1 + Math.exp(-qkv(gate + i))) : 1;
        out(qo + i, (acc[i]! / denom) * g);
      }
    }
  }
}

/**
 * One record per chunk at f32 offset `base`: the chunk's max score in log2 units (as the kernel keeps
 * it), Σ e^(s − max), Σ e^(s − max) v (f64, stored in f32); with `warpTiles`, the sums of
 * std.attn_decode's warps (P rounded to that row type).
 */
function writeRecords(
  mem: DeviceMemoryView, partials: bigint, base: number, ch: { n: number; size: number }, lo: number, pos: number,
  scores: Float64Array, v: Float32Array, width: number, vOffset: number, d: number, warpTiles?: FloatDtype,
): void {
  const rec = mem.f32(partials + BigInt(4 * base), ch.n * (d + 2));
  const acc = new Float64Array(d);
  for (let c = 0; c < ch.n; c++) {
    const t0 = lo + c * ch.size;
    const t1 = Math.min(pos, t0 + ch.size - 1);
    const r = c * (d + 2);
    if (warpTiles) {
      const { max, sum } = warpTileSums(scores, v, width, vOffset, d, t0, t1, warpTiles, acc);
      rec[r] = max * Math.LOG2E;
      rec[r + 1] = sum;
      for (let i = 0; i < d; i++) rec[r + 2 + i] = acc[i]!;
      continue;
    }
    let max = -Infinity;
    for (let t = t0; t <= t1; t++) max = Math.max(max, scores[t]!);
    let sum = 0;
    acc.fill(0);
    for (let t = t0; t <= t1; t++) {
      const e = Math.exp(scores[t]! - max);
      sum += e;
      const vo = t * width + vOffset;
      for (let i = 0; i < d; i++) acc[i]! += e * v[vo + i]!;
    }
    rec[r] = max * Math.LOG2E;
    rec[r + 1] = sum;
    for (let i = 0; i < d; i++) rec[r + 2 + i] = acc[i]!;
  }
}

/**
 * std.attn_decode's sums over keys t0 … t1 of one head into `acc`: tiles of 16 keys from t0, warp w
 * taking tiles w, w + 4, … with its own running max (each e^(s − m) rounded to `dtype` as it enters
 * P·V, unrounded in the sum), then the warps rescaled to their common max and added in warp order.
 */
function warpTileSums(
  scores: Float64Array, v: Float32Array, width: number, vOffset: number, d: number, t0: number, t1: number, dtype: FloatDtype, acc: Float64Array,
): { max: number; sum: number } {
  const warps = Array.from({ length: DECODE_WARPS }, () => ({ m: -Infinity, l: 0, o: new Float64Array(d) }));
  for (let tile = 0, k0 = t0; k0 <= t1; tile++, k0 += DECODE_TILE_KEYS) {
    const w = warps[tile % DECODE_WARPS]!;
    const k1 = Math.min(t1, k0 + DECODE_TILE_KEYS - 1);
    let mt = w.m;
    for (let t = k0; t <= k1; t++) mt = Math.max(mt, scores[t]!);
    const c = w.m === -Infinity ? 0 : Math.exp(w.m - mt);
    w.l *= c;
    for (let i = 0; i < d; i++) w.o[i]! *= c;
    for (let t = k0; t <= k1; t++) {
      const e = Math.exp(scores[t]! - mt);
      w.l += e;
      const p = roundRows(dtype, e);
      const vo = t * width + vOffset;
      for (let i = 0; i < d; i++) w.o[i]! += p * v[vo + i]!;
    }
    w.m = mt;
  }
  const max = Math.max(...warps.map((w) => w.m));
  let sum = 0;
  acc.fill(0);
  for (const w of warps) {
    if (w.m === -Infinity) continue;
    const f = Math.exp(w.m - max);
    sum += w.l * f;
    for (let i = 0; i < d; i++) acc[i]! += w.o[i]! * f;
  }
  return { max, sum };
}
