import type { LayerLimits, LayerStep, TransformerLayer } from '../contract/layer.js';
import type { LayerState } from '../contract/layer-state.js';
import type { GpuBackend } from '../device/gpu-backend.js';
import { InvalidArgumentError } from '../errors.js';
import { DeviceMemory } from './device-memory.js';

/**
 * A layer whose rows depend on nothing but themselves (norms, MLP, MoE, embedding, lm head, AltUp,
 * Laurel): no per-sequence state and every hook at its default, so verify rows leave no trace by
 * design, and a sequence may start at a cached prefix (`resumeAt` does nothing).
 */
export abstract class StatelessLayer implements TransformerLayer<LayerState> {
  abstract readonly type: string;
  abstract readonly inputRowBytes: number;
  abstract readonly outputRowBytes: number;
  protected readonly memory: DeviceMemory;
  #disposed = false;

  constructor(
    protected readonly gpu: GpuBackend,
    readonly limits: LayerLimits,
  ) {
    this.memory = new DeviceMemory(gpu);
  }

  openState(slot: number): LayerState {
    return { slot };
  }

  closeState(_state: LayerState): void {}

  /** Nothing of earlier rows is kept: a sequence may start anywhere. */
  resumeAt(_state: LayerState, _length: number): void {}

  forward(step: LayerStep<LayerState>): void {
    this.checkStep(step);
    this.run(step);
  }

  /** Throws when the layer was disposed or the step has more rows than its limits (another entry point than `forward` calls it too). */
  protected checkStep(step: LayerStep<LayerState>): void {
    if (this.#disposed) throw new InvalidArgumentError(`${this.type}: forward on a disposed layer`);
    if (step.rows > this.limits.maxRows) throw new InvalidArgumentError(`${this.type}: a step of ${step.rows} rows exceeds limits.maxRows (${this.limits.maxRows})`);
  }

  /** The step's kernels; every row is independent, padding rows included. */
  protected abstract run(step: LayerStep<LayerState>): void;

  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    this.memory.free();
  }
}
