import { CpuBackend } from '@metrale/cpu-backend';
import {
  F32_PRECISION, MemoryWeightSource, SeededRandom, StepDriver, bf16BitsToF32, f16BitsToF32, floatBytes, linearToF32, readLinear, tensorOf, toBf16, toF16, toF32,
  type GpuBackend, type HostTensor, type LayerLimits, type Precision, type Sequence, type SpeculationMode, type StepResult,
} from '@metrale/core';
import plugin from '@metrale/layer-gdn';
import { GdnReference, type RefShape, type RefWeights } from './gdn-reference.js';

export interface Shape {
  readonly hidden: number;
  readonly hk: number;
  readonly hv: number;
  readonly dk: number;
  readonly dv: number;
  readonly K: number;
}

export const SMALL: Shape = { hidden: 16, hk: 2, hv: 4, dk: 6, dv: 5, K: 4 };
export const EPS = 1e-6;

/** A qwen3_next config of the given shape, as config.to_dict() writes the fields GDN reads. */
export function configOf(s: Shape, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    model_type: 'qwen3_next', hidden_size: s.hidden, linear_num_key_heads: s.hk, linear_num_value_heads: s.hv,
    linear_key_head_dim: s.dk, linear_value_head_dim: s.dv, linear_conv_kernel_dim: s.K, rms_norm_eps: EPS, hidden_act: 'silu',
    vocab_size: 64, ...extra,
  };
}

/** Random weights (f32, fused layout) with scales that keep every part of the layer in play. */
export function randomWeights(s: Shape, seed = 7): { tensors: HostTensor[]; ref: RefWeights } {
  const rnd = new SeededRandom(seed);
  const D = s.hidden;
  const convDim = 2 * s.hk * s.dk + s.hv * s.dv;
  const qkvzDim = 2 * s.hk * s.dk + 2 * s.hv * s.dv;
  const normal = (n: number, scale: number, offset = 0) => Float32Array.from({ length: n }, () => offset + scale * rnd.normal());
  const f = {
    qkvz: normal(qkvzDim * D, 1 / Math.sqrt(D)),
    ba: normal(2 * s.hv * D, 1 / Math.sqrt(D)),
    conv: normal(convDim * s.K, 0.5),
    dtBias: normal(s.hv, 0.5),
    aLog: Float32Array.from({ length: s.hv }, () => Math.log(0.05 + 0.6 * rnd.float())),
    norm: normal(s.dv, 0.1, 1),
    out: normal(D * s.hv * s.dv, 1 / Math.sqrt(s.hv * s.dv)),
  };
  const tensors = [
    tensorOf('in_proj_qkvz.weight', f.qkvz, [qkvzDim, D]),
    tensorOf('in_proj_ba.weight', f.ba, [2 * s.hv, D]),
    tensorOf('conv1d.weight', f.conv, [convDim, 1, s.K]),
    tensorOf('dt_bias', f.dtBias, [s.hv]),
    tensorOf('A_log', f.aLog, [s.hv]),
    tensorOf('norm.weight', f.norm, [s.dv]),
    tensorOf('out_proj.weight', f.out, [D, s.hv * s.dv]),
  ];
  const d = (x: Float32Array) => Float64Array.from(x);
  return { tensors, ref: { qkvz: d(f.qkvz), ba: d(f.ba), conv: d(f.conv), dtBias: d(f.dtBias), aLog: d(f.aLog), norm: d(f.norm), out: d(f.out) } };
}

/** The same parameters in Qwen3.5's split layout (in_proj_qkv, in_proj_z, in_proj_b, in_proj_a). */
export function splitTensors(s: Shape, fused: HostTensor[]): HostTensor[] {
  const D = s.hidden;
  const r = s.hv / s.hk;
  const get = (name: string) => {
    const t = fused.find((x) => x.name === name)!;
    return new Float32Array(t.data.buffer.slice(t.data.byteOffset, t.data.byteOffset + t.data.byteLength));
  };
  const qkvz = get('in_proj_qkvz.weight');
  const ba = get('in_proj_ba.weight');
  const keyDim = s.hk * s.dk;
  const qkv = new Float32Array((2 * keyDim + s.hv * s.dv) * D);
  const z = new Float32Array(s.hv * s.dv * D);
  const b = new Float32Array(s.hv * D);
  const a = new Float32Array(s.hv * D);
  const group = 2 * s.dk + 2 * r * s.dv;
  const move = (dst: Float32Array, dRow: number, src: Float32Array, sRow: number, n: number) => dst.set(src.subarray(sRow * D, (sRow + n) * D), dRow * D);
  for (let g = 0; g < s.hk; g++) {
    move(qkv, g * s.dk, qkvz, g * group, s.dk);
    move(qkv, keyDim + g * s.dk, qkvz, g * group + s.dk, s.dk);
    move(qkv, 2 * keyDim + g * r * s.dv, qkvz, g * group + 2 * s.dk, r * s.dv);
    move(z, g * r * s.dv, qkvz, g * group + 2 * s.dk + r * s.dv, r * s.dv);
    move(b, g * r, ba, g * 2 * r, r);
    move(a, g * r, ba, g * 2 * r + r, r);
  }
  return [
    tensorOf('in_proj_qkv.weight', qkv, [2 * keyDim + s.hv * s.dv, D]),
    tensorOf('in_proj_z.weight', z, [s.hv * s.dv, D]),
    tensorOf('in_proj_b.weight', b, [s.hv, D]),
    tensorOf('in_proj_a.weight', a, [s.hv, D]),
    ...fused.filter((t) => !t.name.startsWith('in_proj_')),
  ];
}

/**
 * The reference's weights as a layer in `precision` holds them on the device: the Linears read as
 * readLinear reads them (rounded to the row type, or FP8 codes times their scales), the conv
 * kernel and the small vectors as stored (f32 holds any bf16 value exactly).
 */
export function deviceWeightsOf(s: Shape, tensors: readonly HostTensor[], precision: Precision): RefWeights {
  const source = new MemoryWeightSource('reference weights', tensors);
  const qkvzDim = 2 * s.hk * s.dk + 2 * s.hv * s.dv;
  const linear = (name: string, shape: [number, number]) => Float64Array.from(linearToF32(readLinear(source, name, shape, precision)));
  const vector = (name: string) => Float64Array.from(toF32(source.get(name)));
  return {
    qkvz: linear('in_proj_qkvz.weight', [qkvzDim, s.hidden]),
    ba: linear('in_proj_ba.weight', [2 * s.hv, s.hidden]),
    conv: vector('conv1d.weight'),
    dtBias: vector('dt_bias'),
    aLog: vector('A_log'),
    norm: vector('norm.weight'),
    out: linear('out_proj.weight', [s.hidden, s.hv * s.dv]),
  };
}

export function referenceOf(s: Shape, ref: RefWeights): GdnReference {
  const shape: RefShape = { hidden: s.hidden, hk: s.hk, hv: s.hv, dk: s.dk, dv: s.dv, K: s.K, eps: EPS };
  return new GdnReference(shape, ref);
}

/**
 * A layer of the plugin on a fresh CPU backend, driven by a StepDriver. Rows go in and come out
 * as f32 values, stored in the precision's row type (f32 by default) on the way.
 */
export class Rig<G extends GpuBackend = CpuBackend> {
  readonly gpu: G;
  readonly driver: StepDriver;
  readonly layer;
  readonly width: number;
  readonly precision: Precision;
  constructor(
    config: Record<string, unknown>, tensors: HostTensor[], limits: LayerLimits,
    options: { speculation?: SpeculationMode; graphs?: boolean; driverLimits?: LayerLimits; gpu?: G; precision?: Precision } = {},
  ) {
    this.gpu = options.gpu ?? (new CpuBackend() as GpuBackend as G);
    this.precision = options.precision ?? F32_PRECISION;
    const weights = new MemoryWeightSource('test weights', tensors);
    this.layer = plugin.create({ gpu: this.gpu, layerType: 'gdn', config, layerIndex: 0, weights, limits, ...(options.precision ? { precision: options.precision } : {}) });
    this.driver = new StepDriver({
      gpu: this.gpu, layers: [this.layer], limits: options.driverLimits ?? limits,
      speculation: options.speculation ?? 'write-on-accept', graphs: options.graphs ?? true,
    });
    this.width = this.layer.inputRowBytes / floatBytes(this.precision.rows);
  }

  /** f32 values as rows of the row type. */
  #rows(values: Float32Array): ArrayBufferView {
    const t = this.precision.rows;
    return t === 'f32' ? values : t === 'bf16' ? toBf16(values) : toF16(values);
  }

  /** A step's output rows as f32 values. */
  #values(r: StepResult): Float32Array {
    const t = this.precision.rows;
    if (t === 'f32') return this.driver.readOutputF32(r);
    const bytes = this.driver.readOutput(r).slice();
    const words = new Uint16Array(bytes.buffer);
    return Float32Array.from(words, t === 'bf16' ? bf16BitsToF32 : f16BitsToF32);
  }

  /** Prefill; returns every row's output (the driver may run it in several chunks). */
  prefill(seqs: Sequence[], lengths: number[], input: Float32Array): Float32Array {
    const out = new Float32Array(input.length);
    this.driver.prefill({ seqs, lengths, input: this.#rows(input) }, (r: StepResult, first: number) => out.set(this.#values(r), first * this.width));
    return out;
  }

  decode(seqs: Sequence[], input: Float32Array): Float32Array {
    return this.#values(this.driver.decode({ seqs, input: this.#rows(input) })).slice();
  }

  /** Verify then accept; returns the verify's outputs. */
  verify(seqs: Sequence[], k: number, input: Float32Array, accepted: number[]): Float32Array {
    const out = this.#values(this.driver.verify({ seqs, k, input: this.#rows(input) })).slice();
    this.driver.accept(accepted);
    return out;
  }

  dispose(): void {
    this.driver.dispose();
    this.layer.dispose();
    this.gpu.dispose();
  }
}

/** Row `i` of packed rows. */
export function rowOf(rows: Float32Array, width: number, i: number): Float32Array {
  return rows.subarray(i * width, (i + 1) * width);
}

export function randomRows(rnd: SeededRandom, n: number, width: number): Float32Array {
  return rnd.normals(n * width);
}
