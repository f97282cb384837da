import { WeightsError, type FloatDtype } from '@metrale/core';

/** Which Hugging Face attention the layer reproduces (DSA.md). */
export type DsaVariant = 'glm_moe_dsa' | 'glm5_next';

/** Element type of the indexer key cache (per-token keys, or pool keys for glm5_next). */
export type IndexCacheDtype = 'f32' | 'bf16' | 'fp8';

/** Element type of the MLA latent cache ([kv_lora | k_rope] per token). */
export type KvCacheDtype = 'f32' | 'bf16';

export type IndexerType = 'full' | 'shared';

/** Device codes of the cache element types, as the kernels take them (KERNELS.md). */
export const KV_DTYPE_CODE: Readonly<Record<KvCacheDtype, number>> = { f32: 0, bf16: 1 };
export const INDEX_DTYPE_CODE: Readonly<Record<IndexCacheDtype, number>> = { f32: 0, bf16: 1, fp8: 2 };

/** The shape and semantics of one DSA attention layer, read from a Hugging Face config. */
export interface DsaConfig {
  readonly variant: DsaVariant;
  /** The config's `model_type` (`glm_moe_dsa`, `glm5_next`, `glm5_next_text`). */
  readonly modelType: string;
  readonly layerIndex: number;
  /** `hidden_size` (D). */
  readonly hidden: number;
  /** `num_attention_heads` (H). */
  readonly heads: number;
  /** `q_lora_rank`. */
  readonly qLora: number;
  /** `kv_lora_rank`. */
  readonly kvLora: number;
  /** `qk_nope_head_dim`. */
  readonly nope: number;
  /** `qk_rope_head_dim` (0 for glm5_next: NoPE). */
  readonly rope: number;
  /** `v_head_dim`. */
  readonly v: number;
  /** `index_n_heads` (H_I). */
  readonly idxHeads: number;
  /** `index_head_dim` (d_I). */
  readonly dI: number;
  /** `index_topk`: tokens the indexer selects per query row (glm5_next: topk / kpool pools). */
  readonly topk: number;
  /** Tokens per pool: `index_kpool` for glm5_next, 1 for glm_moe_dsa (every token is its own candidate). */
  readonly kpool: number;
  /** RoPE base. */
  readonly ropeTheta: number;
  /** MLA RoPE on interleaved pairs (x0,x1),(x2,x3)… (true, HF's GLM-MoE-DSA) or on halves (false). */
  readonly ropeInterleave: boolean;
  /** The same for the indexer's rope channels. */
  readonly indexerRopeInterleave: boolean;
  /** eps of q_a_layernorm and kv_a_layernorm: 1e-6 for glm_moe_dsa (HF's default), rms_norm_eps for glm5_next. */
  readonly mlaEps: number;
  /** eps of the indexer's k_norm LayerNorm (1e-6 in HF). */
  readonly lnEps: number;
  /** qk_head_dim^−0.5. */
  readonly softmaxScale: number;
  /** d_I^−0.5 · H_I^−0.5: the indexer's softmax scale and head-weight scale, applied after the weighted sum. */
  readonly indexScale: number;
  /** This layer's indexer mode. */
  readonly indexerType: IndexerType;
  /** For a shared layer: the previous full DSA layer, whose selection it reuses. */
  readonly selectionSource: number | undefined;
  /** Every layer's indexer mode (`indexer_types`, or HF's derivation of it). */
  readonly indexerTypes: readonly IndexerType[];
  readonly kvCacheDtype: KvCacheDtype;
  readonly indexCacheDtype: IndexCacheDtype;
}

const MODEL_TYPES: Readonly<Record<string, DsaVariant>> = {
  glm_moe_dsa: 'glm_moe_dsa',
  glm5_next: 'glm5_next',
  glm5_next_text: 'glm5_next',
};

const DSA_LAYER_TYPES = new Set(['deepseek_sparse_attention', 'full_attention']);

/** The text config that holds the DSA fields: the config itself or its `text_config` (glm5_next). */
function textConfig(config: Readonly<Record<string, unknown>>): { c: Readonly<Record<string, unknown>>; where: string } {
  if (config.kv_lora_rank === undefined && typeof config.text_config === 'object' && config.text_config !== null) {
    return { c: config.text_config as Record<string, unknown>, where: 'config.text_config' };
  }
  return { c: config, where: 'config' };
}

/**
 * The MLA cache's type when the config does not name one: f32 on the f32 reference path, bf16
 * otherwise (f16 rows too: the attention kernel's tensor-core path reads a bf16 or f32 cache).
 */
export function defaultKvCacheDtype(rows: FloatDtype): KvCacheDtype {
  return rows === 'f32' ? 'f32' : 'bf16';
}

/**
 * Reads one DSA layer's shape from a Hugging Face config (`glm_moe_dsa`, or `glm5_next` with or
 * without a nested `text_config`). Every missing or invalid field throws `WeightsError` naming it;
 * so does a layer that `layer_types` marks as not DSA, and an inconsistent `indexer_types` (a
 * shared layer with no full DSA layer before it). `rows` (the precision's row type) picks the MLA
 * cache's type when `metrale_kv_cache_dtype` is absent.
 */
export function readDsaConfig(config: Readonly<Record<string, unknown>>, layerIndex: number, rows: FloatDtype = 'f32'): DsaConfig {
  if (typeof config !== 'object' || config === null) throw new WeightsError(`config must be an object, got ${config === null ? 'null' : typeof config}`);
  if (!Number.isSafeInteger(layerIndex) || layerIndex < 0) throw new WeightsError(`layerIndex must be a non-negative integer, got ${layerIndex}`);
  const { c, where } = textConfig(config);
  const modelType = c.model_type ?? config.model_type;
  if (modelType === undefined) {
    throw new WeightsError(`${where}.model_type is missing; DSA layers come from ${Object.keys(MODEL_TYPES).join(', ')}`);
  }
  const variant = MODEL_TYPES[String(modelType)];
  if (!variant) throw new WeightsError(`${where}.model_type is ${JSON.stringify(modelType)}; DSA layers come from ${Object.keys(MODEL_TYPES).join(', ')}`);

  const int = (name: string, min = 1, fallback?: number): number => {
    const v = c[name] ?? fallback;
    if (v === undefined || v === null) throw new WeightsError(`${where}.${name} is missing (needed by the DSA layer)`);
    if (!Number.isSafeInteger(v) || (v as number) < min) {
      throw new WeightsError(`${where}.${name} must be an integer ≥ ${min}, got ${JSON.stringify(v)}`);
    }
    return v as number;
  };
  const num = (name: string, fallback: number): number => {
    const v = c[name] ?? fallback;
    if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) throw new WeightsError(`${where}.${name} must be a positive number, got ${JSON.stringify(v)}`);
    return v;
  };

  const hidden = int('hidden_size');
  const heads = int('num_attention_heads');
  if (c.q_lora_rank === null) {
    throw new WeightsError(`${where}.q_lora_rank is null; the DSA indexer reads the query latent, so q_lora_rank is required`);
  }
  const qLora = int('q_lora_rank');
  const kvLora = int('kv_lora_rank');
  const nope = int('qk_nope_head_dim', 0);
  const rope = int('qk_rope_head_dim', 0);
  const v = int('v_head_dim');
  const idxHeads = int('index_n_heads');
  const dI = int('index_head_dim');
  const topk = int('index_topk');
  if (nope + rope < 1) throw new WeightsError(`${where}: qk_nope_head_dim + qk_rope_head_dim must be at least 1`);
  if (rope % 2 !== 0) throw new WeightsError(`${where}.qk_rope_head_dim must be even (RoPE rotates pairs), got ${rope}`);
  if (rope > dI) throw new WeightsError(`${where}.qk_rope_head_dim (${rope}) exceeds index_head_dim (${dI}); the indexer ropes its first qk_rope_head_dim channels`);
  const kvHeads = c.num_key_value_heads;
  if (kvHeads !== undefined && kvHeads !== null && kvHeads !== heads) {
    throw new WeightsError(`${where}.num_key_value_heads (${JSON.stringify(kvHeads)}) must equal num_attention_heads (${heads}): MLA expands keys and values per attention head`);
  }
  if (c.attention_bias === true) {
    throw new WeightsError(`${where}.attention_bias is true; this version of @metrale/layer-dsa supports bias-free projections only (GLM-5 and GLM-5.3 have none)`);
  }

  let kpool = 1;
  if (variant === 'glm5_next') {
    kpool = int('index_kpool', 1, 16);
    if (topk % kpool !== 0) throw new WeightsError(`${where}.index_topk (${topk}) must be a multiple of index_kpool (${kpool})`);
    if (rope !== 0) throw new WeightsError(`${where}.qk_rope_head_dim is ${rope}; glm5_next attention is NoPE, so it must be 0`);
    const tail = c.index_kpool_always_select_tail ?? true;
    if (tail !== true) {
      throw new WeightsError(`${where}.index_kpool_always_select_tail is ${JSON.stringify(tail)}; only true is supported (without the tail, early rows select no key)`);
    }
  }

  // RoPE: only HF's 'default' type (GLM-5's); other types change frequencies and the softmax scale (DSA.md).
  let ropeTheta = 10000;
  if (rope > 0) {
    const params = (typeof c.rope_parameters === 'object' && c.rope_parameters !== null ? c.rope_parameters : {}) as Record<string, unknown>;
    const scaling = (typeof c.rope_scaling === 'object' && c.rope_scaling !== null ? c.rope_scaling : {}) as Record<string, unknown>;
    const ropeType = params.rope_type ?? params.type ?? scaling.rope_type ?? scaling.type ?? 'default';
    if (ropeType !== 'default') {
      throw new WeightsError(
        `${where}.rope_parameters.rope_type is ${JSON.stringify(ropeType)}; this version supports 'default' RoPE only ` +
          `(HF scales inv_freq, cos/sin and the softmax scale for other types: DSA.md)`,
      );
    }
    const theta = params.rope_theta ?? c.rope_theta;
    if (theta === undefined) throw new WeightsError(`${where}.rope_parameters.rope_theta is missing (needed for RoPE on ${rope} channels)`);
    if (typeof theta !== 'number' || !Number.isFinite(theta) || theta <= 1) throw new WeightsError(`${where}.rope_parameters.rope_theta must be a number > 1, got ${JSON.stringify(theta)}`);
    ropeTheta = theta;
  }
  const flag = (name: string, fallback: boolean): boolean => {
    const value = c[name] ?? fallback;
    if (typeof value !== 'boolean') throw new WeightsError(`${where}.${name} must be a boolean, got ${JSON.stringify(value)}`);
    return value;
  };
  const ropeInterleave = flag('rope_interleave', true);
  const indexerRopeInterleave = flag('indexer_rope_interleave', ropeInterleave);

  const mlaEps = variant === 'glm5_next' ? num('rms_norm_eps', 1e-5) : 1e-6;

  // Layer kinds: layer_types (glm5_next interleaves linear-attention layers) and indexer_types.
  const layers = c.num_hidden_layers;
  const count = Number.isSafeInteger(layers) && (layers as number) > 0 ? (layers as number) : undefined;
  if (count !== undefined && layerIndex >= count) {
    throw new WeightsError(`layer ${layerIndex} does not exist: ${where}.num_hidden_layers is ${count}`);
  }
  const layerTypes = readLayerTypes(c, where, variant, count);
  const isDsa = (i: number): boolean => layerTypes === undefined || DSA_LAYER_TYPES.has(layerTypes[i] ?? '');
  if (!isDsa(layerIndex)) {
    throw new WeightsError(`${where}.layer_types[${layerIndex}] is ${JSON.stringify(layerTypes![layerIndex])}, not 'deepseek_sparse_attention': layer ${layerIndex} is not a DSA layer`);
  }
  const indexerTypes = readIndexerTypes(c, where, count ?? layerIndex + 1);
  if (layerIndex >= indexerTypes.length) {
    throw new WeightsError(`${where}.indexer_types has ${indexerTypes.length} entries; layer ${layerIndex} has none`);
  }
  // Every shared DSA layer needs a full DSA layer before it: check the whole list, not only this layer.
  let lastFull: number | undefined;
  let selectionSource: number | undefined;
  for (let i = 0; i < indexerTypes.length; i++) {
    if (!isDsa(i)) continue;
    if (indexerTypes[i] === 'full') lastFull = i;
    else if (lastFull === undefined) {
      throw new WeightsError(
        `${where}.indexer_types is inconsistent: layer ${i} is 'shared' but no DSA layer before it is 'full'; ` +
          `a shared layer reuses the selection of the previous full layer, so the first DSA layer must be 'full'`,
      );
    }
    if (i === layerIndex && indexerTypes[i] === 'shared') selectionSource = lastFull;
  }

  const dtype = <T extends string>(name: string, allowed: readonly T[], fallback: T): T => {
    const value = c[name] ?? config[name] ?? fallback;
    if (!allowed.includes(value as T)) throw new WeightsError(`${where}.${name} is ${JSON.stringify(value)}; use one of ${allowed.map((a) => `'${a}'`).join(', ')}`);
    return value as T;
  };

  return {
    variant,
    modelType: String(modelType),
    layerIndex,
    hidden, heads, qLora, kvLora, nope, rope, v, idxHeads, dI, topk, kpool,
    ropeTheta, ropeInterleave, indexerRopeInterleave,
    mlaEps,
    lnEps: 1e-6,
    softmaxScale: (nope + rope) ** -0.5,
    indexScale: dI ** -0.5 * idxHeads ** -0.5,
    indexerType: indexerTypes[layerIndex]!,
    selectionSource,
    indexerTypes,
    kvCacheDtype: dtype('metrale_kv_cache_dtype', ['f32', 'bf16'] as const, defaultKvCacheDtype(rows)),
    indexCacheDtype: dtype('metrale_indexer_cache_dtype', ['bf16', 'f32', 'fp8'] as const, 'bf16'),
  };
}

function readLayerTypes(c: Readonly<Record<string, unknown>>, where: string, variant: DsaVariant, count: number | undefined): readonly string[] | undefined {
  const raw = c.layer_types;
  if (raw === undefined || raw === null) {
    // HF's defaults: every glm_moe_dsa layer is DSA; glm5_next puts a DSA layer every fourth (i % 4 == 3).
    if (variant === 'glm_moe_dsa' || count === undefined) return undefined;
    return Array.from({ length: count }, (_, i) => (i % 4 === 3 ? 'deepseek_sparse_attention' : 'linear_attention'));
  }
  if (!Array.isArray(raw) || !raw.every((t) => typeof t === 'string')) throw new WeightsError(`${where}.layer_types must be a list of strings`);
  return raw as string[];
}

/** `indexer_types`, or HF's derivation from `index_topk_pattern` / `index_topk_freq` / `index_skip_topk_offset`. */
function readIndexerTypes(c: Readonly<Record<string, unknown>>, where: string, count: number): IndexerType[] {
  const check = (list: unknown[], field: string): IndexerType[] =>
    list.map((t, i) => {
      if (t !== 'full' && t !== 'shared') throw new WeightsError(`${where}.${field}[${i}] is ${JSON.stringify(t)}; indexer types are 'full' or 'shared'`);
      return t;
    });
  const raw = c.indexer_types;
  if (raw !== undefined && raw !== null) {
    if (!Array.isArray(raw)) throw new WeightsError(`${where}.indexer_types must be a list of 'full' / 'shared'`);
    return check(raw, 'indexer_types');
  }
  const pattern = c.index_topk_pattern;
  if (pattern !== undefined && pattern !== null) {
    if (typeof pattern === 'string') {
      return [...pattern].map((ch, i) => {
        if (ch === 'F') return 'full';
        if (ch === 'S') return 'shared';
        throw new WeightsError(`${where}.index_topk_pattern[${i}] is ${JSON.stringify(ch)}; the pattern is made of 'F' and 'S'`);
      });
    }
    if (Array.isArray(pattern)) return check(pattern, 'index_topk_pattern');
    throw new WeightsError(`${where}.index_topk_pattern must be a string of F/S or a list`);
  }
  const freqRaw = c.index_topk_freq ?? 1;
  const offset = c.index_skip_topk_offset ?? 2;
  if (!Number.isSafeInteger(freqRaw) || !Number.isSafeInteger(offset)) {
    throw new WeightsError(`${where}.index_topk_freq and index_skip_topk_offset must be integers, got ${JSON.stringify(freqRaw)} and ${JSON.stringify(offset)}`);
  }
  const freq = Math.max(freqRaw as number, 1);
  return Array.from({ length: count }, (_, i) => (Math.max(i - (offset as number) + 1, 0) % freq === 0 ? 'full' : 'shared'));
}

/** Derived widths and offsets of the layer's scratch rows (KERNELS.md). */
export interface DsaGeometry {
  /** Whether the layer runs its own indexer. */
  readonly full: boolean;
  /** Whether the indexer scores pools (glm5_next). */
  readonly pooled: boolean;
  /** `xa` row: [q_a (qLora) | kv_a (kvLora + rope) | k_I (dI) | w (H_I) | gate (dI, pooled)]. */
  readonly xaWidth: number;
  readonly kOff: number;
  readonly wOff: number;
  readonly gOff: number;
  /** `qb` row: [per head (nope + rope) × H | q_I (H_I · dI), full layers]. */
  readonly qbWidth: number;
  readonly qIOff: number;
  /** One MLA cache row and one absorbed query per head: kvLora + rope. */
  readonly latWidth: number;
  /** Selected tokens per row at most: topk + kpool − 1 (the tail). */
  readonly selWidth: number;
}

export function dsaGeometry(cfg: DsaConfig): DsaGeometry {
  const full = cfg.indexerType === 'full';
  const pooled = cfg.variant === 'glm5_next';
  const kOff = cfg.qLora + cfg.kvLora + cfg.rope;
  const wOff = kOff + cfg.dI;
  const gOff = wOff + cfg.idxHeads;
  const xaWidth = full ? gOff + (pooled ? cfg.dI : 0) : kOff;
  const qIOff = cfg.heads * (cfg.nope + cfg.rope);
  return {
    full, pooled, xaWidth, kOff, wOff, gOff,
    qbWidth: qIOff + (full ? cfg.idxHeads * cfg.dI : 0),
    qIOff,
    latWidth: cfg.kvLora + cfg.rope,
    selWidth: cfg.topk + cfg.kpool - 1,
  };
}
