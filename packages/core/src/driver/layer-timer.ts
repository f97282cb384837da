import type { StepPhase } from '../contract/layer.js';
import type { GpuBackend, GpuEvent, Stream } from '../device/gpu-backend.js';

/**
 * Device time by layer kind of the steps a driver runs eagerly (prefill chunks, and decode or
 * verify without graphs). The driver marks the start of each layer with its `type`, and a composite
 * layer (a decoder block) marks each part it runs through `LayerStep.section`; the time from one
 * mark to the next counts for the first mark's label, so a block's time splits by the kinds of its
 * parts (norm, mixer, MLP, residual add). Reading the events waits for the stream, so
 * a timed driver runs step by step — a benchmark's tool, not a server's. Graph captures and
 * replays are not timed (a graph has no events between its layers): a benchmark times the eager
 * path beside the replayed one.
 */
export class LayerTimer {
  readonly #gpu: GpuBackend;
  readonly #events: GpuEvent[] = [];
  readonly #labels: string[] = [];
  /** Whether mark i is a layer's start (made by the driver) rather than a part's (a section). */
  readonly #layerStarts: boolean[] = [];
  readonly #ms = new Map<StepPhase, Map<string, number>>();
  readonly #steps = new Map<StepPhase, number>();
  #marks = 0;

  constructor(gpu: GpuBackend) {
    this.#gpu = gpu;
  }

  /** Timed forwards of `phase` (of every phase when absent) since the last reset. */
  steps(phase?: StepPhase): number {
    if (phase) return this.#steps.get(phase) ?? 0;
    return [...this.#steps.values()].reduce((a, b) => a + b, 0);
  }

  /** The driver: layer `type` starts on `stream` (ending the previous interval). */
  layer(type: string, stream: Stream): void {
    this.#record(type, true, stream);
  }

  /** A composite layer: its part of kind `label` starts on `stream` (ending the previous interval). */
  section(label: string, stream: Stream): void {
    this.#record(label, false, stream);
  }

  #record(label: string, layerStart: boolean, stream: Stream): void {
    if (this.#marks === this.#events.length) this.#events.push(this.#gpu.createEvent());
    this.#gpu.recordEvent(this.#events[this.#marks]!, stream);
    this.#labels[this.#marks] = label;
    this.#layerStarts[this.#marks] = layerStart;
    this.#marks++;
  }

  /** Ends the step's last interval: waits for the stream and adds every interval's time to `phase`. */
  collect(stream: Stream, phase: StepPhase): void {
    this.#record('', true, stream);
    const n = this.#marks;
    this.#gpu.synchronizeEvent(this.#events[n - 1]!);
    let ms = this.#ms.get(phase);
    if (!ms) this.#ms.set(phase, (ms = new Map()));
    for (let i = 0; i + 1 < n; i++) {
      // A composite layer marks its first part before doing any work: the gap between the layer's
      // start and that mark counts for the part, not for the layer's own (per-instance) type.
      const label = this.#layerStarts[i] && !this.#layerStarts[i + 1] ? this.#labels[i + 1]! : this.#labels[i]!;
      ms.set(label, (ms.get(label) ?? 0) + this.#gpu.elapsedMs(this.#events[i]!, this.#events[i + 1]!));
    }
    this.#marks = 0;
    this.#steps.set(phase, (this.#steps.get(phase) ?? 0) + 1);
  }

  /** Milliseconds per label of `phase`'s steps since the last reset, in the order the labels first ran. */
  totals(phase: StepPhase): Record<string, number> {
    return Object.fromEntries(this.#ms.get(phase) ?? []);
  }

  reset(): void {
    this.#ms.clear();
    this.#steps.clear();
    this.#marks = 0;
  }

  dispose(): void {
    for (const e of this.#events.splice(0)) this.#gpu.destroyEvent(e);
  }
}
