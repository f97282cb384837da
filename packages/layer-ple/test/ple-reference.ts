// An independent float64 reference of the per-layer input path, written from Hugging Face's
// Gemma 3n modules (Gemma3nTextModel.get_per_layer_inputs / project_per_layer_inputs, the
// per-layer part of Gemma3nTextDecoderLayer.forward, Gemma3nRMSNorm: x / sqrt(mean(x²) + eps) · w),
// not from the layer's kernels. Token ids at or past vocab_size_per_layer_input read table row 0
// (Gemma3nModel.forward's mask). Scalars are float32 tensors cast to the model's dtype, as HF holds them.
// With `rows` bf16 or f16, it is HF's model held in that dtype (`model.to(dtype)`): every parameter
// and every tensor a module returns is of that dtype, while RMSNorm and GELU compute in float32
// (here: float64) and round once, and a matmul accumulates and rounds its output once.
import { fromBf16, roundTo, toBf16, toF32, type FloatDtype, type HostTensor, type WeightSource } from '@metrale/core';
import type { PleDims } from './ple-setup.js';

const f64 = (t: HostTensor): Float64Array => Float64Array.from(toF32(t));

/** HF's scalar: torch.tensor(x) is float32; .to(dtype) rounds again for bf16/f16 weights. */
function hfScalar(x: number, dtype: string): number {
  const f = Math.fround(x);
  if (dtype === 'bf16') return fromBf16(toBf16([f]))[0]!;
  if (dtype === 'f16') {
    const a = new Float32Array([f]);
    // f16 rounding through a 16-bit float array is not in JS; compute from the definition.
    const e = Math.floor(Math.log2(Math.abs(a[0]!)));
    const ulp = 2 ** (e - 10);
    return Math.round(f / ulp) * ulp;
  }
  return f;
}

const gelu = (x: number) => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3)));

function rmsNorm(x: Float64Array, w: Float64Array, eps: number): Float64Array {
  let ss = 0;
  for (const v of x) ss += v * v;
  const inv = 1 / Math.sqrt(ss / x.length + eps);
  return x.map((v, i) => v * inv * w[i]!);
}

/**
 * Expected output rows for input rows `a` ([rows][D]) and their token ids: in float64 (`rows`
 * f32, the default), or as HF's model held in `rows` computes them (see above).
 */
export function referenceRows(weights: WeightSource, d: PleDims, a: Float32Array, tokens: Int32Array, prefix = '', rows: FloatDtype = 'f32'): Float64Array {
  const { hidden: D, perLayer: P, layers: L, tableVocab: Vp, layerIndex: l } = d;
  const eps = d.eps ?? 1e-6;
  // A value held in the model's dtype: none is rounded in the float64 reference.
  const h16 = (x: number): number => (rows === 'f32' ? x : roundTo(rows, x));
  const param = (name: string): Float64Array => f64(weights.get(`${prefix}${name}`)).map(h16);
  const embed = param('embed_tokens.weight');
  const table = param('embed_tokens_per_layer.weight');
  const W = param('per_layer_model_projection.weight');
  const normP = param('per_layer_projection_norm.weight');
  const gate = param(`layers.${l}.per_layer_input_gate.weight`);
  const proj = param(`layers.${l}.per_layer_projection.weight`);
  const post = param(`layers.${l}.post_per_layer_input_norm.weight`);
  // The scalars take the dtype of what they multiply, the model's: a model held in f32 has upcast
  // a bf16 / f16 checkpoint's embedding and table, so its scalars are float32 whatever those were stored in.
  const embedScale = hfScalar(Math.sqrt(D), rows);
  const projScale = hfScalar(D ** -0.5, rows);
  const tableScale = hfScalar(Math.sqrt(P), rows);
  const inputScale = hfScalar(1 / Math.sqrt(2), rows);
  const count = tokens.length;
  const out = new Float64Array(count * D);
  for (let r = 0; r < count; r++) {
    const t = tokens[r]!;
    const id = t >= 0 && t < Vp ? t : 0;
    // get_per_layer_inputs: the table row, scaled by sqrt(P), reshaped [L, P]; take layer l.
    const tableRow = table.subarray(id * L * P + l * P, id * L * P + (l + 1) * P).map((v) => h16(v * tableScale));
    // project_per_layer_inputs on inputs_embeds = embed_tokens(id) · sqrt(D).
    const e = embed.subarray(t * D, (t + 1) * D).map((v) => h16(v * embedScale));
    const proj_l = new Float64Array(P);
    for (let i = 0; i < P; i++) {
      let s = 0;
      for (let j = 0; j < D; j++) s += W[(l * P + i) * D + j]! * e[j]!;
      proj_l[i] = h16(h16(s) * projScale);
    }
    const normed = rmsNorm(proj_l, normP, eps).map(h16);
    const ple = normed.map((v, i) => h16(h16(v + tableRow[i]!) * inputScale));
    // Decoder layer: gate, gelu_tanh, multiply, projection, post norm.
    const h = new Float64Array(P);
    for (let i = 0; i < P; i++) {
      let s = 0;
      for (let j = 0; j < D; j++) s += gate[i * D + j]! * a[r * D + j]!;
      h[i] = h16(h16(gelu(h16(s))) * ple[i]!);
    }
    const y = new Float64Array(D);
    for (let i = 0; i < D; i++) {
      let s = 0;
      for (let j = 0; j < P; j++) s += proj[i * P + j]! * h[j]!;
      y[i] = h16(s);
    }
    out.set(rmsNorm(y, post, eps).map(h16), r * D);
  }
  return out;
}

/**
 * Bound of the layer with 16-bit rows against `referenceRows` in that dtype: the same values are
 * rounded at the same points. The CPU backend reproduces it exactly (its twins and GEMM sum in
 * f64, as the reference does); a device sums in f32 in another order, so now and then a value
 * rounds the other way by one step of its type (bf16: 2^−8 relative) and the steps after carry it.
 */
export const SAME_DTYPE: Readonly<Record<'bf16' | 'f16', number>> = { bf16: 4e-3, f16: 5e-4 };

