import type { GpuBackend, Stream } from '../device/gpu-backend.js';
import type { LayerState } from './layer-state.js';

/**
 * What a layer does so that it stays correct under CUDA-graph replay. Every method is optional;
 * an absent method means the default: prestage and re-arm do nothing, the room check passes and
 * the replay sync does nothing.
 */
export interface LayerGraphHooks<S extends LayerState = LayerState> {
  /**
   * Host work for one sequence's rows of this step, done before any replay or capture while the
   * step's token ids are on the host (PLE: hash the tokens, upload missed rows on `stream`, write
   * slot indices into the device buffer the graph reads). `tokens` holds 1 id for decode, k for verify.
   */
  decodePrestage?(tokens: Int32Array, state: S, gpu: GpuBackend, stream: Stream): void;
  /**
   * Re-arm what a failed capture consumed of the prestaged state, so the same step can run
   * eagerly. Must not redo the prestage work itself (no second LRU touch, no second upload).
   */
  decodePrestageRearm?(state: S): void;
  /**
   * Throw `ReplayRoomError` if a replayed step of `k` rows starting at `seqLen` would write past
   * the end of a host-tracked cache. Called before anything of the step is launched.
   */
  checkReplayRoom?(state: S, seqLen: number, k: number): void;
  /**
   * After a replay, in which the layer's own forward code did not run, bring host bookkeeping up
   * to date. `seqLen` is the committed length before the step: rewind to it when ahead (rejected
   * rows of the last verify), throw when behind, then advance by `k`.
   */
  syncReplayedStep?(state: S, seqLen: number, k: number): void;
}
