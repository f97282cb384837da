import {
  F32_PRECISION, FP8_BLOCK, WeightsError, blocksOf, encodeFloats, expectShape, floatBytes, linearToF32, readLinear, stackLinears, toF32,
  type HostLinear, type HostTensor, type Precision, type WeightSource,
} from '@metrale/core';
import type { GdnConfig } from './gdn-config.js';

/**
 * One GDN layer's parameters on the host, in the layout the kernels read (KERNELS.md): the
 * projections as the model's precision keeps them (readLinear: the row type, or block-FP8), the
 * input projections in Qwen3-Next's grouped order whichever layout the checkpoint stored; the
 * small vectors and the conv kernel in f32, holding the checkpoint's values exactly.
 */
export interface GdnHostWeights {
  /** [2·H_k·d_k + 2·H_v·d_v][D]: per key head g, rows [q d_k, k d_k, v r·d_v, z r·d_v]. */
  readonly qkvz: HostLinear;
  /** [2·H_v][D]: per key head g, rows [b r, a r]. */
  readonly ba: HostLinear;
  /** [conv_dim][K]. */
  readonly convWeight: Float32Array;
  readonly dtBias: Float32Array;
  readonly aLog: Float32Array;
  /** [d_v], plain w (not 1 + w). */
  readonly normWeight: Float32Array;
  /** [D][H_v·d_v]. */
  readonly outProj: HostLinear;
  /** How the checkpoint stored the input projections. */
  readonly layout: 'qwen3_next' | 'qwen3_5';
}

/** Hugging Face names (prefix removed) of the fused (Qwen3-Next) and split (Qwen3.5) layouts. */
export const FUSED_NAMES = ['in_proj_qkvz.weight', 'in_proj_ba.weight'] as const;
export const SPLIT_NAMES = ['in_proj_qkv.weight', 'in_proj_z.weight', 'in_proj_b.weight', 'in_proj_a.weight'] as const;
export const COMMON_NAMES = ['conv1d.weight', 'dt_bias', 'A_log', 'norm.weight', 'out_proj.weight'] as const;

/**
 * Reads and checks every tensor of a GDN layer, by its Hugging Face name with the layer prefix
 * removed, for a model running in `precision` (default f32), and converts the Qwen3.5 split
 * projections into the grouped layout. Every missing, misshapen or non-finite tensor throws
 * `WeightsError` naming the tensor and the origin; nothing touches a device.
 */
export function loadGdnWeights(source: WeightSource, cfg: GdnConfig, precision: Precision = F32_PRECISION): GdnHostWeights {
  const { hidden: D, hv, dv, convK, convDim, qkvzDim, valueDim } = cfg;
  const origin = source.origin;
  const split = !source.has('in_proj_qkvz.weight') && source.has('in_proj_qkv.weight');
  const names = [...(split ? SPLIT_NAMES : FUSED_NAMES), ...COMMON_NAMES];
  for (const name of names) {
    if (!source.has(name)) {
      const hint = name === 'in_proj_qkvz.weight' ? ` (nor the Qwen3.5 split projections ${SPLIT_NAMES.map((n) => `'${n}'`).join(', ')})` : '';
      throw new WeightsError(`missing tensor '${name}'${hint} of the Gated DeltaNet layer`, origin);
    }
  }
  const shapes: Record<string, readonly [number, number] | readonly number[]> = {
    'in_proj_qkvz.weight': [qkvzDim, D],
    'in_proj_ba.weight': [2 * hv, D],
    'in_proj_qkv.weight': [convDim, D],
    'in_proj_z.weight': [valueDim, D],
    'in_proj_b.weight': [hv, D],
    'in_proj_a.weight': [hv, D],
    'conv1d.weight': [convDim, 1, convK],
    dt_bias: [hv],
    A_log: [hv],
    'norm.weight': [dv],
    'out_proj.weight': [D, valueDim],
  };
  // Check every shape before converting anything, so the first error names the first bad tensor.
  const tensors = new Map<string, HostTensor>();
  for (const name of names) {
    const t = source.get(name);
    expectShape({ ...t, name }, shapes[name]!, origin);
    tensors.set(name, t);
  }
  const values = (name: string): Float32Array => {
    const t = tensors.get(name)!;
    if (t.dtype === 'f8e4m3') throw new WeightsError(`tensor '${name}' is FP8; the Gated DeltaNet layer reads it in a float type (checkpoints leave it unquantized)`, origin);
    const v = toF32(t);
    for (let i = 0; i < v.length; i++) {
      if (!Number.isFinite(v[i]!)) throw new WeightsError(`tensor '${name}' holds a non-finite value (${v[i]}) at element ${i}`, origin);
    }
    return v;
  };
  const linear = (name: string): HostLinear => readLinear(source, name, shapes[name] as readonly [number, number], precision);
  let qkvz: HostLinear;
  let ba: HostLinear;
  if (split) {
    ({ qkvz, ba } = groupSplitLinears(cfg, {
      qkv: linear('in_proj_qkv.weight'), z: linear('in_proj_z.weight'), b: linear('in_proj_b.weight'), a: linear('in_proj_a.weight'),
    }, precision));
  } else {
    qkvz = linear('in_proj_qkvz.weight');
    ba = linear('in_proj_ba.weight');
  }
  return {
    qkvz, ba,
    convWeight: values('conv1d.weight'),
    dtBias: values('dt_bias'),
    aLog: values('A_log'),
    normWeight: values('norm.weight'),
    outProj: linear('out_proj.weight'),
    layout: split ? 'qwen3_5' : 'qwen3_next',
  };
}

/** One GEMM of the input projections: its weight, and the column of a `qkvz` row its output starts at. */
export interface InputProjection {
  readonly weight: HostLinear;
  readonly col: number;
}

/**
 * The GEMMs that write a row of the input projections' output (gdn-config.ts projectionRow): one
 * over [in_proj_qkvz; in_proj_ba] stacked by rows where both are of one type, since each output
 * column is the same dot product as in its own GEMM and a launch is saved. Both apart, each
 * writing its columns of the row, where block-FP8 keeps them in different types (the published
 * FP8 checkpoints leave in_proj_ba in bf16) or FP8 in_proj_qkvz's rows end inside a 128-row block
 * (its block scales could not take in_proj_ba's under them). Under tensor parallelism both are
 * the rank's parts already (the layer's weight source shards each), so the stack holds the rank's
 * qkvz rows then its ba rows, as the rank's kernels read them.
 */
export function inputProjections(w: Pick<GdnHostWeights, 'qkvz' | 'ba'>): readonly InputProjection[] {
  const { qkvz, ba } = w;
  const stackable = qkvz.dtype === ba.dtype && qkvz.cols === ba.cols && (qkvz.dtype !== 'f8e4m3' || qkvz.rows % FP8_BLOCK === 0);
  if (stackable) return [{ weight: stackLinears([qkvz, ba], `${qkvz.name} + ${ba.name}`), col: 0 }];
  return [{ weight: qkvz, col: 0 }, { weight: ba, col: qkvz.rows }];
}

/** The Qwen3.5 split projections. */
type SplitPart = 'qkv' | 'z' | 'b' | 'a';

/** A run of `rows` rows from row `from` of a split projection to row `to` of the grouped one. */
interface RowMove {
  readonly part: SplitPart;
  readonly from: number;
  readonly to: number;
  readonly rows: number;
}

/**
 * Where Qwen3.5's split projections' rows go in Qwen3-Next's grouped ones: `in_proj_qkv` holds q
 * of all key heads, then k, then v of all value heads (the conv channel order); `in_proj_z` holds
 * z per value head; `in_proj_b` / `in_proj_a` one row per value head. Per key head g, qkvz takes
 * [q, k, v, z] of g and ba [b, a] of g's value heads.
 */
function splitMoves(cfg: GdnConfig): { qkvz: RowMove[]; ba: RowMove[] } {
  const { hk, dk, dv, r } = cfg;
  const keyDim = hk * dk;
  const group = 2 * dk + 2 * r * dv;
  const qkvz: RowMove[] = [];
  const ba: RowMove[] = [];
  for (let g = 0; g < hk; g++) {
    const base = g * group;
    qkvz.push(
      { part: 'qkv', from: g * dk, to: base, rows: dk },
      { part: 'qkv', from: keyDim + g * dk, to: base + dk, rows: dk },
      { part: 'qkv', from: 2 * keyDim + g * r * dv, to: base + 2 * dk, rows: r * dv },
      { part: 'z', from: g * r * dv, to: base + 2 * dk + r * dv, rows: r * dv },
    );
    ba.push({ part: 'b', from: g * r, to: g * 2 * r, rows: r }, { part: 'a', from: g * r, to: g * 2 * r + r, rows: r });
  }
  return { qkvz, ba };
}

/**
 * Qwen3.5's split projections (f32 [rows][D] each) into Qwen3-Next's grouped rows. Only rows move,
 * so a GEMM over the grouped matrix gives bit-identical values.
 */
export function groupSplitProjections(
  cfg: GdnConfig, qkv: Float32Array, z: Float32Array, b: Float32Array, a: Float32Array,
): { qkvz: Float32Array; ba: Float32Array } {
  const D = cfg.hidden;
  const parts = { qkv, z, b, a };
  const apply = (moves: readonly RowMove[], rows: number): Float32Array => {
    const out = new Float32Array(rows * D);
    for (const m of moves) out.set(parts[m.part].subarray(m.from * D, (m.from + m.rows) * D), m.to * D);
    return out;
  };
  const moves = splitMoves(cfg);
  return { qkvz: apply(moves.qkvz, cfg.qkvzDim), ba: apply(moves.ba, 2 * cfg.hv) };
}

/**
 * The split projections as the layer's grouped weights, in the types readLinear gave them. An FP8
 * group stays FP8 when every run of rows it moves starts and ends on a 128-row block (then whole
 * blocks move, with their scales: the Qwen3.5 shapes, d_k and r·d_v multiples of 128); otherwise,
 * or when its parts differ in type, its FP8 parts are dequantized into the row type.
 */
export function groupSplitLinears(
  cfg: GdnConfig, parts: Readonly<Record<SplitPart, HostLinear>>, precision: Precision,
): { qkvz: HostLinear; ba: HostLinear } {
  const moves = splitMoves(cfg);
  return {
    qkvz: groupLinear('in_proj_qkvz.weight (from in_proj_qkv, in_proj_z)', parts, moves.qkvz, cfg.qkvzDim, precision),
    ba: groupLinear('in_proj_ba.weight (from in_proj_b, in_proj_a)', parts, moves.ba, 2 * cfg.hv, precision),
  };
}

function groupLinear(
  name: string, parts: Readonly<Record<SplitPart, HostLinear>>, moves: readonly RowMove[], rows: number, precision: Precision,
): HostLinear {
  const used = [...new Set(moves.map((m) => m.part))].map((p) => parts[p]);
  const cols = used[0]!.cols;
  const whole = (n: number) => n % FP8_BLOCK === 0;
  const fp8 = used.every((w) => w.dtype === 'f8e4m3') && moves.every((m) => whole(m.from) && whole(m.to) && whole(m.rows));
  if (fp8) {
    const data = new Uint8Array(rows * cols);
    const bc = blocksOf(cols);
    const scales = new Float32Array(blocksOf(rows) * bc);
    for (const m of moves) {
      const src = parts[m.part];
      data.set(src.data.subarray(m.from * cols, (m.from + m.rows) * cols), m.to * cols);
      scales.set(src.scales!.subarray((m.from / FP8_BLOCK) * bc, ((m.from + m.rows) / FP8_BLOCK) * bc), (m.to / FP8_BLOCK) * bc);
    }
    return { name, rows, cols, dtype: 'f8e4m3', data, scales };
  }
  // Float rows in the row type (FP8 parts dequantized: a run of rows that splits a block cannot keep its scale).
  const dtype = precision.rows;
  const asRows = (w: HostLinear): Uint8Array => (w.dtype === dtype ? w.data : encodeFloats(linearToF32(w), dtype));
  const bytes = new Map<SplitPart, Uint8Array>();
  const rowBytes = cols * floatBytes(dtype);
  const data = new Uint8Array(rows * rowBytes);
  for (const m of moves) {
    if (!bytes.has(m.part)) bytes.set(m.part, asRows(parts[m.part]));
    data.set(bytes.get(m.part)!.subarray(m.from * rowBytes, (m.from + m.rows) * rowBytes), m.to * rowBytes);
  }
  return { name, rows, cols, dtype, data };
}
