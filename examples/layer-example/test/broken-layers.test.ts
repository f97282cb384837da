import { CpuBackend } from '@metrale/cpu-backend';
import { ConformanceError, defineKernel, definePlugin, type CreateLayerContext, type LayerStep } from '@metrale/core';
import { runLayerConformance } from '@metrale/core/testing';
import { SlidingWindowLayer, attendKernel, type SlidingWindowState } from '@metrale/layer-example';
import { describe, expect, it } from 'vitest';
import { exampleSetup } from './example-weights.js';

// The classic graph bug: a per-step host value (the sequence's position) passed as a kernel
// argument. A captured graph freezes it, so every replay writes the cache at the capture's position.
const appendAt = defineKernel({
  name: 'broken.append-at',
  params: { input: 'ptr', cache: 'ptr', row: 'i32', slot: 'i32', position: 'i32', hidden: 'i32', capacity: 'i32' },
  cpu: (a, { mem }) => {
    const src = mem.f32(a.input + BigInt(a.row * a.hidden * 4), a.hidden);
    mem.f32(a.cache + BigInt((a.slot * a.capacity + a.position) * a.hidden * 4), a.hidden).set(src);
  },
});

class BakedPositionLayer extends SlidingWindowLayer {
  protected override launch(step: LayerStep<SlidingWindowState>): void {
    const { host, tables } = step;
    for (let p = 0; p < step.batch; p++) {
      const state = host.states[p];
      if (!state) continue;
      for (let row = host.rowStarts[p]!; row < host.rowStarts[p + 1]!; row++) {
        const position = host.seqLens[p]! + row - host.rowStarts[p]!;
        this.gpu.launch(appendAt, { grid: 1, block: 1, stream: step.stream }, {
          input: step.input, cache: this.cache, row, slot: state.slot, position, hidden: this.hidden, capacity: this.capacity,
        });
      }
    }
    this.gpu.launch(attendKernel, { grid: step.rows, block: 32, stream: step.stream }, {
      input: step.input, output: step.output, cache: this.cache, gain: this.gain, slots: tables.slots, rowStarts: tables.rowStarts,
      positions: tables.positions, batch: step.batch, hidden: this.hidden, capacity: this.capacity, window: this.window, scale: 1 / Math.sqrt(this.hidden),
    });
  }
}

// Forgets to rewind: after a verify whose rows were partly rejected, the host length stays ahead.
class NoRewindLayer extends SlidingWindowLayer {
  override syncReplayedStep(state: SlidingWindowState, _seqLen: number, k: number): void {
    state.length += k;
  }
}

function pluginOf(Layer: new (c: CreateLayerContext) => SlidingWindowLayer) {
  return definePlugin({ name: Layer.name, version: '0.0.0', specificationVersion: '1.0.0', layerTypes: ['sliding-window'], create: (c) => new Layer(c) });
}

function failedChecks(Layer: new (c: CreateLayerContext) => SlidingWindowLayer): string[] {
  try {
    runLayerConformance(pluginOf(Layer), { backend: () => new CpuBackend(), ...exampleSetup() });
  } catch (error) {
    expect(error).toBeInstanceOf(ConformanceError);
    return (error as ConformanceError).failures.map((f) => f.check);
  }
  return [];
}

describe('the conformance kit catches deliberately broken layers', () => {
  it('passes the correct layer', () => {
    expect(failedChecks(SlidingWindowLayer)).toEqual([]);
  });

  it('fails a layer that bakes a per-step value into a kernel argument', () => {
    expect(failedChecks(BakedPositionLayer)).toContain('replay-equals-eager');
  });

  it('fails a layer that forgets to rewind on replay sync', () => {
    const failed = failedChecks(NoRewindLayer);
    expect(failed).toContain('replay-equals-eager');
    expect(failed).toContain('verify-accept-equals-decode');
  });
});
