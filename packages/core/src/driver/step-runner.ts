import type { LayerLimits } from '../contract/layer.js';
import type { GpuBackend, Stream } from '../device/gpu-backend.js';
import type { KvCacheInfo } from '../kv/kv-binding.js';
import type { KvCache } from '../kv/kv-cache.js';
import type { BatchBuckets } from './batch-buckets.js';
import type { Sequence } from './sequence.js';
import type { StepInput, StepResult } from './step-driver.js';

/**
 * What the engine loop drives: a `StepDriver`, or a `TensorParallelDriver` that runs the same calls
 * on every rank of a tensor-parallel group. Results (the logits rows) are on `gpu`, in stream order
 * on `stream`.
 */
export interface StepRunner {
  readonly gpu: GpuBackend;
  readonly stream: Stream;
  readonly limits: LayerLimits;
  /** The padded batch sizes decode and verify steps run at (their graphs' keys). */
  readonly buckets: BatchBuckets;
  /** The KV page pool the engine loop claims pages from (rank 0's under tensor parallelism). */
  readonly kv: KvCache;
  readonly kvInfo: KvCacheInfo;
  /** Whether a sequence can start at a cached prefix (`open(prefix)`). */
  readonly canResume: boolean;
  /** Whether a prefix needs a saved state snapshot at its end. */
  readonly savesState: boolean;
  open(prefix?: readonly string[]): Sequence;
  saveSnapshot(seq: Sequence, hash: string): void;
  close(seq: Sequence): void;
  prefill(input: StepInput & { readonly lengths: readonly number[] }, onChunk?: (result: StepResult, firstRow: number) => void): StepResult;
  decode(input: StepInput): StepResult;
  /**
   * Whether a decode step of `sequences` sequences may take its token ids on the device
   * (`StepInput.deviceTokens`); a runner without it never does.
   */
  decodesFromDevice?(sequences: number): boolean;
  verify(input: StepInput & { readonly k: number }): StepResult;
  accept(accepted: readonly number[]): void;
  readOutput(result: StepResult): Uint8Array;
  readOutputF32(result: StepResult): Float32Array;
  dispose(): void;
}
