import { expect } from 'vitest';
import {
  type LayerTimer,
  SeededRandom,
  StepDriver,
  type DevicePtr,
  type GdnCarrySize,
  type GpuBackend,
  type LayerLimits,
  type Sequence,
  type SpeculationMode,
} from '../../src/index.js';
import { cpuBackend } from './cpu.js';
import { CallLog, KernelLayer, RecordingLayer } from './recording-layer.js';
import { RecordingModel } from './recording-model.js';

export const WIDTH = 4;

export const LIMITS: LayerLimits = { maxSeqs: 6, maxSeqLen: 64, maxBatch: 4, maxK: 3, maxRows: 12 };

export interface LayerSpec {
  readonly name: string;
  readonly salt: number;
  /** A layer with no hooks at all. */
  readonly plain?: boolean;
  readonly woaStashFloats?: number;
  readonly carry?: GdnCarrySize;
  readonly foldsCarried?: boolean;
  readonly capacity?: number;
}

export const TWO_LAYERS: readonly LayerSpec[] = [
  { name: 'L0', salt: 0.125 },
  { name: 'L1', salt: -0.375 },
];

export interface RigOptions {
  readonly layers?: readonly LayerSpec[];
  readonly limits?: LayerLimits;
  readonly graphs?: boolean;
  readonly speculation?: SpeculationMode;
  readonly buckets?: readonly number[];
  /** The backend the rig runs on (default: a fresh CpuBackend); `owner` is disposed with the rig. */
  readonly gpu?: GpuBackend;
  readonly owner?: GpuBackend;
  /** The driver's layer timer (the caller disposes it). */
  readonly timer?: LayerTimer;
}

/** A backend, a stack of test layers logging to one log, a driver over them, and the host model. */
export class Rig {
  readonly gpu: GpuBackend;
  readonly log = new CallLog();
  readonly layers: KernelLayer[];
  readonly driver: StepDriver;
  readonly model: RecordingModel;
  readonly limits: LayerLimits;
  readonly #owner: GpuBackend;

  constructor(options: RigOptions = {}) {
    this.limits = options.limits ?? LIMITS;
    this.#owner = options.owner ?? options.gpu ?? cpuBackend();
    this.gpu = options.gpu ?? this.#owner;
    const specs = options.layers ?? TWO_LAYERS;
    this.layers = specs.map((s) => {
      const base = { name: s.name, log: this.log, gpu: this.gpu, limits: this.limits, width: WIDTH, salt: s.salt };
      if (s.plain) return new KernelLayer(base);
      return new RecordingLayer({
        ...base,
        ...(s.woaStashFloats === undefined ? {} : { woaStashFloats: s.woaStashFloats }),
        ...(s.carry === undefined ? {} : { carry: s.carry }),
        ...(s.foldsCarried === undefined ? {} : { foldsCarried: s.foldsCarried }),
        ...(s.capacity === undefined ? {} : { capacity: s.capacity }),
      });
    });
    try {
      this.driver = new StepDriver({
        ...(options.timer ? { layerTimer: options.timer } : {}),
        gpu: this.gpu,
        layers: this.layers,
        limits: this.limits,
        ...(options.graphs === undefined ? {} : { graphs: options.graphs }),
        ...(options.speculation === undefined ? {} : { speculation: options.speculation }),
        ...(options.buckets === undefined ? {} : { buckets: options.buckets }),
      });
    } catch (error) {
      this.#owner.dispose();
      throw error;
    }
    this.model = new RecordingModel(specs.map((s) => s.salt), WIDTH);
  }

  recording(i: number): RecordingLayer {
    const l = this.layers[i];
    if (!(l instanceof RecordingLayer)) throw new Error(`layer ${i} is not a RecordingLayer`);
    return l;
  }

  /** Opens a sequence in the driver and in the model. */
  open(): Sequence {
    const s = this.driver.open();
    this.model.open(s.slot);
    return s;
  }

  /** A one-chunk prefill through the driver and the model; asserts the driver's output equals the model's. */
  prefill(seqs: readonly Sequence[], lengths: readonly number[], input: Float32Array, tokens: Int32Array): Float32Array {
    if (seqs.length > this.limits.maxBatch) {
      // One prefill per group of maxBatch sequences, so each is one chunk.
      const n = this.limits.maxBatch;
      const rows = lengths.slice(0, n).reduce((a, b) => a + b, 0);
      const head = this.prefill(seqs.slice(0, n), lengths.slice(0, n), input.subarray(0, rows * WIDTH), tokens.subarray(0, rows));
      const tail = this.prefill(seqs.slice(n), lengths.slice(n), input.subarray(rows * WIDTH), tokens.subarray(rows));
      return concat([head, tail]);
    }
    if (lengths.reduce((a, b) => a + b, 0) > this.limits.maxRows) throw new Error('Rig.prefill: one chunk only');
    let at = 0;
    const rows = seqs.flatMap((s, i) => Array.from({ length: lengths[i]! }, (_, r) => ({ slot: s.slot, seqLen: s.length, position: s.length + r, token: tokens[at++]! })));
    const expected = this.model.step(rows, input);
    const result = this.driver.prefill({ seqs, lengths, input, tokens });
    expect(result.path).toBe('prefill');
    const got = this.driver.readOutputF32(result).slice();
    expect(got).toEqual(expected);
    return got;
  }

  /** A decode or verify step through the driver and the model; returns the driver's real output rows. */
  step(seqs: readonly Sequence[], k: number | undefined, input: Float32Array, tokens: Int32Array) {
    const lengths = seqs.map((s) => s.length);
    const result = k === undefined ? this.driver.decode({ seqs, input, tokens }) : this.driver.verify({ seqs, k, input, tokens });
    const output = this.driver.readOutputF32(result).slice();
    const expected = this.model.step(RecordingModel.stepRows(seqs.map((s) => s.slot), lengths, k ?? 1, tokens), input);
    return { result, output, expected };
  }

  dispose(): void {
    try {
      this.driver.dispose();
      for (const l of this.layers) l.dispose();
    } finally {
      this.#owner.dispose();
    }
  }
}

/** Runs `fn` with a rig and always disposes it. */
export function withRig<T>(options: RigOptions, fn: (rig: Rig) => T): T {
  const rig = new Rig(options);
  try {
    return fn(rig);
  } finally {
    rig.dispose();
  }
}

export function concat(parts: readonly Float32Array[]): Float32Array {
  const out = new Float32Array(parts.reduce((a, p) => a + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** Random rows of WIDTH f32 (never all zero) and random token ids. */
export class Inputs {
  readonly random: SeededRandom;
  constructor(seed: number) {
    this.random = new SeededRandom(seed);
  }
  rows(n: number): Float32Array {
    return this.random.normals(n * WIDTH);
  }
  tokens(n: number): Int32Array {
    return Int32Array.from({ length: n }, () => this.random.int(1, 999));
  }
}

export function readI32(gpu: GpuBackend, ptr: DevicePtr, n: number): number[] {
  gpu.synchronize();
  return Array.from(new Int32Array(gpu.download(ptr, 4 * n).slice().buffer));
}

export function readU32(gpu: GpuBackend, ptr: DevicePtr, n: number): number[] {
  gpu.synchronize();
  return Array.from(new Uint32Array(gpu.download(ptr, 4 * n).slice().buffer));
}

/** Asserts `fn` throws an instance of `type` whose message matches every pattern; returns it. */
export function expectThrow<E extends Error>(fn: () => unknown, type: abstract new (...args: never[]) => E, ...patterns: RegExp[]): E {
  let caught: unknown;
  try {
    fn();
  } catch (error) {
    caught = error;
  }
  expect(caught, 'expected a throw').toBeInstanceOf(type);
  for (const p of patterns) expect((caught as Error).message).toMatch(p);
  return caught as E;
}
