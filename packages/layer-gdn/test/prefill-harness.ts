// Shared by test/prefill.test.ts (CPU twins) and test/gpu/gdn-prefill.test.ts (CUDA): random
// launch buffers for the prefill kernels, the chunked prefill (gdn-prefill-launch.ts) and the
// row-by-row oracle (`gdn.chunk`, gdn-chunk-rowwise.cu / chunkCpu) on any backend, and the
// relative-L2 comparison (test/gpu/gdn-kernels.test.ts takes its random stream and comparison too).
// Inputs are random, never zero; outputs are poisoned with NaN first.
import { bf16BitsToF32, f16BitsToF32, SeededRandom, type DevicePtr, type GpuBackend, type Kernel, type KernelParams } from '@metrale/core';
import { projectionRow } from '../src/gdn-config.js';
import { launchPrefill, prefillPlan, prefillScratchBytes, type PrefillKernels } from '../src/gdn-prefill-launch.js';

export interface PShape {
  readonly name: string;
  readonly hk: number;
  readonly hv: number;
  readonly dk: number;
  readonly dv: number;
  readonly K: number;
  readonly maxK: number;
  readonly maxSeqs: number;
}

export interface PLayout {
  /** Slot per batch position (−1: padding). */
  readonly slots: readonly number[];
  /** Committed length per batch position (pending rows included). */
  readonly seqLens: readonly number[];
  /** Rows per batch position. */
  readonly rows: readonly number[];
  /** Pending carried rows per slot (length maxSeqs), or undefined: no carried state. */
  readonly pending?: readonly number[];
}

export function derived(s: PShape) {
  const r = s.hv / s.hk;
  const convDim = 2 * s.hk * s.dk + s.hv * s.dv;
  const { width } = projectionRow(s);  // a row of the input projections' output: qkvz, then ba
  const stashRow = s.dk + s.dv + 1;
  const stashSeq = s.hv * s.maxK * stashRow;
  const csRows = 2 * s.maxK;
  return { r, convDim, width, stashRow, stashSeq, csRows };
}

/**
 * `rows` rows of the input projections' output (projectionRow): the qkvz columns in [−1, 1), the
 * ba columns in [−2, 2), never zero; the padding NaN (no kernel reads it).
 */
export function projectionHost(s: { hk: number; hv: number; dk: number; dv: number }, rows: number, R: Pick<Rng, 'fill'>): Float32Array {
  const { width, baCol } = projectionRow(s);
  const qkvz = R.fill(rows * baCol, -1, 1);
  const ba = R.fill(rows * 2 * s.hv, -2, 2);
  const out = new Float32Array(rows * width).fill(Number.NaN);
  for (let t = 0; t < rows; t++) {
    out.set(qkvz.subarray(t * baCol, (t + 1) * baCol), t * width);
    out.set(ba.subarray(t * 2 * s.hv, (t + 1) * 2 * s.hv), t * width + baCol);
  }
  return out;
}

/** Random test data from core's SeededRandom: reproducible from a printed seed. */
export function rng(seed: number) {
  const r = new SeededRandom(seed);
  const next = () => r.float();
  return {
    next,
    uniform: (lo: number, hi: number) => lo + (hi - lo) * next(),
    int: (lo: number, hi: number) => r.int(lo, hi),
    /** Random values in [lo, hi), never exactly zero. */
    fill: (n: number, lo: number, hi: number) => {
      const out = new Float32Array(n);
      for (let i = 0; i < n; i++) {
        let v = 0;
        while (v === 0) v = Math.fround(lo + (hi - lo) * next());
        out[i] = v;
      }
      return out;
    },
  };
}
export type Rng = ReturnType<typeof rng>;

export interface Host {
  /** Rows of both input projections (projectionHost). */
  qkvz: Float32Array;
  y: Float32Array;
  slots: Int32Array;
  rowStarts: Int32Array;
  seqLens: Int32Array;
  state: Float32Array;
  convRing: Float32Array;
  convWeight: Float32Array;
  aLog: Float32Array;
  dtBias: Float32Array;
  normWeight: Float32Array;
  stash: Float32Array;
  convStash: Float32Array;
  pending: Uint32Array;
}
export type HostName = keyof Host;
export const HOST_NAMES: readonly HostName[] = [
  'qkvz', 'y', 'slots', 'rowStarts', 'seqLens', 'state', 'convRing', 'convWeight', 'aLog', 'dtBias', 'normWeight', 'stash', 'convStash', 'pending',
];
/** What a prefill writes. */
export const OUTPUTS = ['y', 'state', 'convRing'] as const;
export type OutputName = (typeof OUTPUTS)[number];

export function randomHost(s: PShape, L: PLayout, R: Rng): Host {
  const { convDim, stashRow, stashSeq, csRows } = derived(s);
  const totalRows = Math.max(1, L.rows.reduce((a, b) => a + b, 0));
  const rowStarts = new Int32Array(L.slots.length + 1);
  for (let p = 0; p < L.slots.length; p++) rowStarts[p + 1] = rowStarts[p]! + L.rows[p]!;
  const aLog = new Float32Array(s.hv);
  for (let h = 0; h < s.hv; h++) aLog[h] = Math.log(R.uniform(0.05, 0.65));
  // A stash of plausible recorded rows: unit keys, moderate deltas, decreasing cumulative gates.
  const stash = R.fill(s.maxSeqs * stashSeq, -0.5, 0.5);
  for (let seq = 0; seq < s.maxSeqs; seq++) {
    for (let h = 0; h < s.hv; h++) {
      let gam = 0;
      for (let t = 0; t < s.maxK; t++) {
        const row = seq * stashSeq + (h * s.maxK + t) * stashRow;
        let n2 = 0;
        for (let i = 0; i < s.dk; i++) n2 += stash[row + i]! ** 2;
        for (let i = 0; i < s.dk; i++) stash[row + i] = stash[row + i]! / Math.sqrt(n2);
        gam -= R.uniform(0.01, 0.6);
        stash[row + s.dk + s.dv] = gam;
      }
    }
  }
  return {
    qkvz: projectionHost(s, totalRows, R),
    y: new Float32Array(totalRows * s.hv * s.dv).fill(Number.NaN),
    slots: Int32Array.from(L.slots),
    rowStarts,
    seqLens: Int32Array.from(L.seqLens),
    state: R.fill(s.maxSeqs * s.hv * s.dk * s.dv, -0.5, 0.5),
    convRing: R.fill(s.maxSeqs * s.K * convDim, -1, 1),
    convWeight: R.fill(convDim * s.K, -0.6, 0.6),
    aLog,
    dtBias: R.fill(s.hv, -1, 1),
    normWeight: R.fill(s.dv, 0.5, 1.5),
    stash,
    convStash: R.fill(s.maxSeqs * csRows * convDim, -1, 1),
    pending: Uint32Array.from(L.pending ?? new Array<number>(s.maxSeqs).fill(0)),
  };
}

type DeviceBuffers = Record<HostName, DevicePtr>;

function toDevice(gpu: GpuBackend, host: Host): DeviceBuffers {
  const out = {} as DeviceBuffers;
  for (const name of HOST_NAMES) {
    const a = host[name];
    const p = gpu.alloc(Math.max(16, a.byteLength));
    gpu.upload(p, a);
    out[name] = p;
  }
  return out;
}

function outputsOf(gpu: GpuBackend, host: Host, d: DeviceBuffers): Record<OutputName, Float32Array> {
  const out = {} as Record<OutputName, Float32Array>;
  for (const name of OUTPUTS) {
    const bytes = gpu.download(d[name], host[name].byteLength);
    out[name] = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4).slice();
  }
  return out;
}

function freeAll(gpu: GpuBackend, d: DeviceBuffers): void {
  for (const name of HOST_NAMES) gpu.free(d[name]);
}

const EPS = 1e-6;
const shapeArgs = (s: PShape) => ({ hk: s.hk, hv: s.hv, dk: s.dk, dv: s.dv, convK: s.K, maxK: s.maxK });

/** The row-by-row prefill (`gdn.chunk`) on `gpu`. */
export function runRowwise(gpu: GpuBackend, chunkKernel: Kernel<KernelParams>, s: PShape, host: Host, carried: boolean): Record<OutputName, Float32Array> {
  const d = toDevice(gpu, host);
  try {
    const batch = host.slots.length;
    gpu.launch(chunkKernel, { grid: [batch, s.hv], block: Math.min(s.dv, 1024), stream: gpu.defaultStream }, {
      qkvz: d.qkvz, y: d.y, slots: d.slots, rowStarts: d.rowStarts, seqLens: d.seqLens, state: d.state, convRing: d.convRing,
      convWeight: d.convWeight, aLog: d.aLog, dtBias: d.dtBias, normWeight: d.normWeight,
      stash: carried ? d.stash : 0n, convStash: carried ? d.convStash : 0n, pending: carried ? d.pending : 0n,
      batch, ...shapeArgs(s), eps: EPS,
    } as never);
    gpu.synchronize();
    return outputsOf(gpu, host, d);
  } finally {
    freeAll(gpu, d);
  }
}

export interface PrefillOptions {
  readonly exact: boolean;
  /** Fuse the gated norm into the scan (clusters; sm_90 on CUDA). */
  readonly clusters: boolean;
  /** Chunks per piece of a pipelined prefill (prefillPlan; default: one piece, or with `sms` the plan's own choice). */
  readonly pieceChunks?: number;
  /** The device's multiprocessors: prefillPlan then pipelines where the layer would. */
  readonly sms?: number;
  /** Fuse the norm (default: `clusters`); with clusters and `fuseNorm` false, the layer's fast-build plan. */
  readonly fuseNorm?: boolean;
  /**
   * The element type of y (FLOAT_DTYPE_CODE, default 0): 1 bf16 or 2 f16 stores y in 16 bits (the
   * result's `y` decoded to f32, `yBits` the words) and gives the unfused norm its own f32 `o`.
   */
  readonly yDtype?: 0 | 1 | 2;
}

/** The 16-bit words of a y stored as bf16 or f16, decoded to f32 (0xFFFF, the poison, is NaN in both). */
export function decodeY(bits: Uint16Array, yDtype: 1 | 2): Float32Array {
  return Float32Array.from(bits, (b) => (yDtype === 1 ? bf16BitsToF32(b) : f16BitsToF32(b)));
}

/** The chunked prefill on `gpu`. */
export function runChunked(
  gpu: GpuBackend, kernels: PrefillKernels, s: PShape, host: Host, carried: boolean, opts: PrefillOptions,
): Record<OutputName, Float32Array> & { yBits?: Uint16Array } {
  const d = toDevice(gpu, host);
  const yDtype = opts.yDtype ?? 0;
  // A 16-bit y: its own buffer, poisoned (0xFFFF: NaN in bf16 and f16), and an f32 o (NaN).
  const y16 = yDtype === 0 ? 0n : gpu.alloc(Math.max(16, 2 * host.y.length));
  const o = yDtype === 0 ? d.y : gpu.alloc(Math.max(16, host.y.byteLength));
  if (yDtype !== 0) {
    gpu.upload(y16, new Uint16Array(host.y.length).fill(0xffff));
    gpu.upload(o, host.y);
  }
  const batch = host.slots.length;
  const rows = host.rowStarts[batch]!;
  const shape = shapeArgs(s);
  // clusters: the fused norm wherever one cluster holds a head (the layer fuses only the exact build).
  const plan = prefillPlan(shape, batch, rows, gpu.defaultStream, {
    clusters: opts.clusters, fuseNorm: opts.fuseNorm ?? opts.clusters, exact: opts.exact,
    ...(opts.sms !== undefined ? { sms: opts.sms } : {}),
    ...(opts.pieceChunks !== undefined || opts.sms === undefined ? { pieceChunks: opts.pieceChunks ?? 0 } : {}),
  });
  const scratch = gpu.alloc(Math.max(prefillScratchBytes(shape, Math.max(rows, 1)), plan.scratch.bytes));
  try {
    launchPrefill(gpu, kernels, shape, {
      qkvz: d.qkvz, y: d.y, slots: d.slots, rowStarts: d.rowStarts, seqLens: d.seqLens, state: d.state, convRing: d.convRing,
      convWeight: d.convWeight, aLog: d.aLog, dtBias: d.dtBias, normWeight: d.normWeight,
      stash: carried ? d.stash : 0n, convStash: carried ? d.convStash : 0n, pending: carried ? d.pending : 0n, scratch,
      ...(yDtype === 0 ? {} : { y: y16, o, yDtype }),
    }, batch, rows, EPS, plan);
    gpu.synchronize();
    const out: Record<OutputName, Float32Array> & { yBits?: Uint16Array } = outputsOf(gpu, host, d);
    if (yDtype !== 0) {
      const bytes = gpu.download(y16, 2 * host.y.length);
      out.yBits = new Uint16Array(bytes.slice().buffer);
      out.y = decodeY(out.yBits, yDtype);
    }
    return out;
  } finally {
    gpu.free(scratch);
    if (yDtype !== 0) {
      gpu.free(y16);
      gpu.free(o);
    }
    freeAll(gpu, d);
  }
}

export interface Diff {
  readonly rel: number;
  readonly maxAbs: number;
  readonly nanMismatch: number;
}

/** Relative L2 error (NaN on one side only counts as a mismatch). */
export function diff(got: Float32Array, ref: Float32Array): Diff {
  let num = 0;
  let den = 0;
  let maxAbs = 0;
  let nanMismatch = 0;
  for (let i = 0; i < ref.length; i++) {
    const g = got[i]!;
    const r = ref[i]!;
    const gn = Number.isNaN(g);
    const rn = Number.isNaN(r);
    if (gn || rn) {
      if (gn !== rn) nanMismatch++;
      continue;
    }
    num += (g - r) ** 2;
    den += r * r;
    maxAbs = Math.max(maxAbs, Math.abs(g - r));
  }
  return { rel: den > 0 ? Math.sqrt(num / den) : Math.sqrt(num), maxAbs, nanMismatch };
}

/** Batch positions with the given rows: padding where rows < 0 (slot −1), committed lengths as given. */
export function layoutOf(s: PShape, R: Rng, seqs: readonly { rows: number; len: number; pending?: number }[]): PLayout {
  const free = Array.from({ length: s.maxSeqs }, (_, i) => i);
  for (let i = free.length - 1; i > 0; i--) {
    const j = R.int(0, i);
    [free[i], free[j]] = [free[j]!, free[i]!];
  }
  const slots: number[] = [];
  const seqLens: number[] = [];
  const rows: number[] = [];
  const pending = new Array<number>(s.maxSeqs).fill(0);
  let next = 0;
  for (const q of seqs) {
    if (q.rows < 0) {
      slots.push(-1);
      seqLens.push(1);
      rows.push(-q.rows);
      continue;
    }
    // Every real position needs a slot of its own: a slot shared by two positions of one step is
    // outside the kernels' contract (their CTAs run side by side and would race on its state and
    // ring, while the CPU reference runs them one after the other).
    if (next >= s.maxSeqs) throw new Error(`layoutOf: ${seqs.filter((x) => x.rows >= 0).length} sequences need more slots than ${s.name}'s maxSeqs ${s.maxSeqs}`);
    const slot = free[next++]!;
    slots.push(slot);
    seqLens.push(q.len);
    rows.push(q.rows);
    pending[slot] = Math.min(q.pending ?? 0, q.len, s.maxK);
  }
  // Slots no position uses keep a count too: the kernels must leave them alone.
  for (let i = next; i < s.maxSeqs; i++) pending[free[i]!] = R.int(0, s.maxK);
  return { slots, seqLens, rows, pending };
}
