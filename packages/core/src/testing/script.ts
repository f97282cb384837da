import type { SeededRandom } from '../random/seeded-random.js';

/**
 * A scenario the conformance kit runs several ways (graphs on and off, captures failing, verify
 * versus decode). Sequences are named by small integers local to the script.
 */
export type ScriptOp =
  | { readonly op: 'open'; readonly seq: number; /** Start on these cached blocks (`StepDriver.open(prefix)`). */ readonly prefix?: readonly string[] }
  | { readonly op: 'close'; readonly seq: number }
  | { readonly op: 'prefill'; readonly seqs: readonly number[]; readonly lengths: readonly number[]; readonly input: Float32Array; readonly tokens: Int32Array }
  | { readonly op: 'decode'; readonly seqs: readonly number[]; readonly input: Float32Array; readonly tokens: Int32Array }
  | {
      readonly op: 'verify';
      readonly seqs: readonly number[];
      readonly k: number;
      readonly accepted: readonly number[];
      readonly input: Float32Array;
      readonly tokens: Int32Array;
    };

export type Script = readonly ScriptOp[];

/** Makes rows of random inputs and token ids, deterministic from the kit's seed. */
export class RowSource {
  constructor(
    private readonly random: SeededRandom,
    readonly width: number,
    private readonly vocab: number,
    private readonly scale: number,
  ) {}

  rows(n: number): { input: Float32Array; tokens: Int32Array } {
    const input = this.random.normals(n * this.width, this.scale);
    const tokens = new Int32Array(n);
    // Repeats are likely on purpose: caches keyed by token see hits and misses.
    for (let i = 0; i < n; i++) tokens[i] = this.random.int(0, this.vocab - 1);
    return { input, tokens };
  }

  prefill(seqs: number[], lengths: number[]): ScriptOp {
    return { op: 'prefill', seqs, lengths, ...this.rows(lengths.reduce((a, b) => a + b, 0)) };
  }

  decode(seqs: number[]): ScriptOp {
    return { op: 'decode', seqs, ...this.rows(seqs.length) };
  }

  verify(seqs: number[], k: number, accepted: number[]): ScriptOp {
    return { op: 'verify', seqs, k, accepted, ...this.rows(seqs.length * k) };
  }
}

/**
 * The main scenario: three sequences prefilled at different lengths, decode batches that change
 * membership, order and bucket, verifies with partial acceptance, a sequence closed and its slot
 * reused. Graph keys repeat, so a graph run replays most steps.
 */
export function mainScript(src: RowSource, k: number): Script {
  return [
    { op: 'open', seq: 0 },
    { op: 'open', seq: 1 },
    { op: 'open', seq: 2 },
    src.prefill([0, 1, 2], [3, 5, 1]),
    src.decode([0, 1, 2]),
    src.decode([0, 1, 2]),
    src.decode([2, 0]),
    src.decode([1, 0]),
    src.decode([1]),
    src.decode([2, 1, 0]),
    src.verify([0, 1, 2], k, [k, 0, Math.min(1, k)]),
    src.decode([0, 1, 2]),
    src.verify([1, 2, 0], k, [1, k, Math.min(2, k)]),
    src.verify([2, 0], k, [0, k - 1]),
    src.decode([0, 1, 2]),
    { op: 'close', seq: 1 },
    { op: 'open', seq: 3 },
    src.prefill([3], [2]),
    src.decode([3, 0, 2]),
    src.decode([0, 2, 3]),
    src.verify([3, 0, 2], k, [k, 1, 0]),
    src.decode([3, 0, 2]),
  ];
}

/** Accepted count of sequence i for a run testing n: varied across sequences, 0..k. */
export function acceptedFor(n: number, i: number, k: number): number {
  return (n + i) % (k + 1);
}
