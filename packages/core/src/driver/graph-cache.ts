import type { StepPhase } from '../contract/layer.js';
import type { GpuBackend, GraphExec } from '../device/gpu-backend.js';

export type GraphKey = string;

export function graphKey(phase: StepPhase, bucket: number, k: number): GraphKey {
  return `${phase}:${bucket}:${k}`;
}

export type GraphEntry = { readonly kind: 'graph'; readonly exec: GraphExec; replays: number } | { readonly kind: 'failed'; readonly reason: string };

/**
 * Captured graphs keyed by (phase, bucket, k). A key whose capture failed is remembered as failed
 * and never captured again: its steps run eagerly.
 */
export class GraphCache {
  readonly #entries = new Map<GraphKey, GraphEntry>();

  constructor(private readonly gpu: GpuBackend) {}

  /** The graph of a key, its failure, or undefined when capture was not tried yet. */
  get(key: GraphKey): GraphEntry | undefined {
    return this.#entries.get(key);
  }

  store(key: GraphKey, exec: GraphExec): void {
    this.#entries.set(key, { kind: 'graph', exec, replays: 0 });
  }

  markFailed(key: GraphKey, reason: string): void {
    this.#entries.set(key, { kind: 'failed', reason });
  }

  /** Per key: 'graph' with its replay count, or 'failed' with the reason. */
  describe(): Record<GraphKey, { kind: 'graph'; replays: number } | { kind: 'failed'; reason: string }> {
    const out: Record<string, { kind: 'graph'; replays: number } | { kind: 'failed'; reason: string }> = {};
    for (const [k, e] of this.#entries) out[k] = e.kind === 'graph' ? { kind: 'graph', replays: e.replays } : { kind: 'failed', reason: e.reason };
    return out;
  }

  dispose(): void {
    for (const e of this.#entries.values()) if (e.kind === 'graph') this.gpu.destroyGraphExec(e.exec);
    this.#entries.clear();
  }
}

