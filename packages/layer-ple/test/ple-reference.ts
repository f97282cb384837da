// An independent float64 reference of the per-layer input path, written from Hugging Face's
// Gemma 3n modules (Gemma3nTextModel.get_per_layer_inputs / project_per_layer_inputs, the
// per-layer part of Gemma3nTextDecoderLayer.forward, Gemma3nRMSNorm: x / sqrt(mean(x²) + eps) · w),
// not from the layer's kernels. Token ids at or past vocab_size_per_layer_input read table row 0
// (Gemma3nModel.forward's mask). Scalars are float32 tensors cast to the weights' dtype, as HF holds them.
import { fromBf16, toBf16, toF32, type HostTensor, type WeightSource } from '@metrale/core';
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

/** Expected output rows for input rows `a` ([rows][D]) and their token ids. */
export function referenceRows(weights: WeightSource, d: PleDims, a: Float32Array, tokens: Int32Array, prefix = ''): Float64Array {
  const { hidden: D, perLayer: P, layers: L, tableVocab: Vp, layerIndex: l } = d;
  const eps = d.eps ?? 1e-6;
  const embedT = weights.get(`${prefix}embed_tokens.weight`);
  const tableT = weights.get(`${prefix}embed_tokens_per_layer.weight`);
  const embed = f64(embedT);
  const table = f64(tableT);
  const W = f64(weights.get(`${prefix}per_layer_model_projection.weight`));
  const normP = f64(weights.get(`${prefix}per_layer_projection_norm.weight`));
  const gate = f64(weights.get(`${prefix}layers.${l}.per_layer_input_gate.weight`));
  const proj = f64(weights.get(`${prefix}layers.${l}.per_layer_projection.weight`));
  const post = f64(weights.get(`${prefix}layers.${l}.post_per_layer_input_norm.weight`));
  const embedScale = hfScalar(Math.sqrt(D), embedT.dtype);
  const projScale = hfScalar(D ** -0.5, embedT.dtype);
  const tableScale = hfScalar(Math.sqrt(P), tableT.dtype);
  const inputScale = hfScalar(1 / Math.sqrt(2), embedT.dtype);
  const rows = tokens.length;
  const out = new Float64Array(rows * D);
  for (let r = 0; r < rows; r++) {
    const t = tokens[r]!;
    const id = t >= 0 && t < Vp ? t : 0;
    // get_per_layer_inputs: the table row, scaled by sqrt(P), reshaped [L, P]; take layer l.
    const tableRow = table.subarray(id * L * P + l * P, id * L * P + (l + 1) * P).map((v) => v * tableScale);
    // project_per_layer_inputs on inputs_embeds = embed_tokens(id) · sqrt(D).
    const e = embed.subarray(t * D, (t + 1) * D).map((v) => v * embedScale);
    const proj_l = new Float64Array(P);
    for (let i = 0; i < P; i++) {
      let s = 0;
      for (let j = 0; j < D; j++) s += W[(l * P + i) * D + j]! * e[j]!;
      proj_l[i] = s * projScale;
    }
    const normed = rmsNorm(proj_l, normP, eps);
    const ple = normed.map((v, i) => (v + tableRow[i]!) * inputScale);
    // Decoder layer: gate, gelu_tanh, multiply, projection, post norm.
    const h = new Float64Array(P);
    for (let i = 0; i < P; i++) {
      let s = 0;
      for (let j = 0; j < D; j++) s += gate[i * D + j]! * a[r * D + j]!;
      h[i] = gelu(s) * ple[i]!;
    }
    const y = new Float64Array(D);
    for (let i = 0; i < D; i++) {
      let s = 0;
      for (let j = 0; j < P; j++) s += proj[i * P + j]! * h[j]!;
      y[i] = s;
    }
    out.set(rmsNorm(y, post, eps), r * D);
  }
  return out;
}

/** ‖a − b‖ / ‖b‖ in float64. */
export function relError(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let num = 0;
  let den = 0;
  for (let i = 0; i < b.length; i++) {
    num += (a[i]! - b[i]!) ** 2;
    den += b[i]! ** 2;
  }
  return Math.sqrt(num / den);
}
