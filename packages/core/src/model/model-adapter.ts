import type { LayerLimits, TransformerLayer } from '../contract/layer.js';
import type { GpuBackend } from '../device/gpu-backend.js';
import type { ParallelContext } from '../parallel/parallel-context.js';
import type { ShardRule } from '../parallel/sharded-weights.js';
import type { PluginRegistry } from '../plugin/registry.js';
import type { WeightSource } from '../weights/weight-source.js';
import type { Precision } from './precision.js';

/** Everything an adapter gets to build a model. */
export interface ModelBuildContext {
  readonly gpu: GpuBackend;
  /** config.json as written by `save_pretrained`. */
  readonly config: Readonly<Record<string, unknown>>;
  /** The checkpoint's tensors under their Hugging Face names (`model.layers.0.…`). */
  readonly weights: WeightSource;
  readonly limits: LayerLimits;
  /** The data path every layer is built for (absent: `F32_PRECISION`). */
  readonly precision?: Precision;
  /** Loaded plugins, for adapters that let a plugin provide a layer type. */
  readonly plugins?: PluginRegistry;
  /**
   * The tensor-parallel group this stack is one rank of (absent: one device). The adapter builds
   * the rank's shard: its heads, intermediates and vocabulary part, read as parts of the
   * checkpoint's tensors, and the collectives that join the ranks' partial results.
   */
  readonly parallel?: ParallelContext;
}

/** A built model: the driver's layer stack, token ids in, logits out. */
export interface ModelStack {
  /** Embedding first, lm head last; the last layer's output rows are f32 logits. */
  readonly layers: readonly TransformerLayer<any>[];
  readonly vocabSize: number;
  /** Token ids that end a sequence (config `eos_token_id`), possibly none. */
  readonly eosTokenIds: readonly number[];
  /** Frees every layer and the buffers the model shares between them. */
  dispose(): void;
}

/** Maps a Hugging Face `model_type` to a stack of layers. */
export interface ModelAdapter {
  readonly modelType: string;
  /** One line for listings (`qwen3_next: Gated DeltaNet + gated attention, MoE`). */
  readonly description?: string;
  build(context: ModelBuildContext): ModelStack;
  /**
   * Which of the checkpoint's tensors a tensor-parallel rank holds a part of (the rest it holds
   * whole), for the per-device size check before anything loads. Absent: only the lm head splits.
   */
  shardRule?(config: Readonly<Record<string, unknown>>): ShardRule;
  /**
   * The checkpoint's tensors the model never reads (a vision tower, multi-token-prediction
   * layers), by full name: left out of the device-size check. Absent: every tensor counts.
   */
  unreadTensors?(config: Readonly<Record<string, unknown>>): (name: string) => boolean;
}
