import { InvalidArgumentError, type DevicePtr, type GpuBackend, type Kernel, type KernelParams, type LaunchConfig, type Stream } from '@metrale/core';
import type { GdnStepPointers } from './gdn-math.cpu.js';
import { equalPieces, shrinkingPieces } from './gdn-prefill-pieces.js';

// Launch shapes, shared-memory sizes and scratch layout of the chunked prefill (kernels/gdn-chunk.cu:
// gdn_prefill_wy, gdn_prefill_scan, gdn_prefill_norm); the CUDA code computes the same sizes
// (wy_lay in kernels/gdn-chunk-wy.cuh, scan_lay in gdn-chunk-scan.cuh, scratch_of in
// gdn-chunk-base.cuh), the CPU twins (gdn-prefill.cpu.ts) the same scratch layout.

/** Rows per chunk of the WY form. */
export const PREFILL_CHUNK = 64;
/**
 * Prefill steps of at most this many rows run the exact build (bf16 hi/lo pairs, three products:
 * about 1e-5 relative error); longer ones the fast build (bf16 operands: about 1e-3..1e-2).
 */
export const PREFILL_EXACT_MAX_ROWS = 1024;
/**
 * CTAs per cluster of the scan on sm_90: 2, each with half a head's d_v and 8 warps (clusters of
 * 4 with a quarter and 4 warps each take twice the SMs and twice the L2 reads, and measured no
 * faster: KERNELS.md, "Removed variants").
 */
export const PREFILL_SCAN_CLUSTER = 2;

const C = PREFILL_CHUNK;
const DKT = 128 + 8;
const CT = C + 8;
const FT = C + 4;
const WY_THREADS = 256;
/** Dynamic shared memory a block may opt into on sm_90 (227 KiB). */
const MAX_SHARED = 227 * 1024;

const roundUp = (x: number, m: number) => Math.ceil(x / m) * m;

/** The shape parameters the prefill kernels take. */
export interface PrefillShape {
  readonly hk: number;
  readonly hv: number;
  readonly dk: number;
  readonly dv: number;
  readonly convK: number;
  readonly maxK: number;
}

/** bf16 planes of the scratch: 1 (fast build) or 2 (exact: hi and lo). */
export type PrefillPlanes = 1 | 2;

/** Byte offsets of the prefill scratch for `rows` step rows (KERNELS.md, "Prefill"). */
export interface PrefillScratchLayout {
  readonly planes: PrefillPlanes;
  readonly rows: number;
  readonly dks: number;
  readonly dvs: number;
  /** Elements (bf16) per plane of each matrix. */
  readonly qrPlane: number;
  readonly wPlane: number;
  readonly uPlane: number;
  readonly aqkPlane: number;
  /** Byte offsets. */
  readonly qr: number;
  readonly kr: number;
  readonly w: number;
  readonly u: number;
  readonly aqk: number;
  readonly sc: number;
  readonly bytes: number;
}

export function prefillScratchLayout(s: PrefillShape, rows: number, planes: PrefillPlanes): PrefillScratchLayout {
  const dks = roundUp(s.dk, 8);
  const dvs = roundUp(s.dv, 8);
  const qrPlane = s.hk * rows * dks;
  const wPlane = s.hv * rows * dks;
  const uPlane = s.hv * rows * dvs;
  const aqkPlane = s.hv * rows * C;
  let o = 0;
  const qr = o;
  o += 2 * planes * qrPlane;
  const kr = o;
  o += 2 * planes * qrPlane;
  const w = o;
  o += 2 * planes * wPlane;
  const u = o;
  o += 2 * planes * uPlane;
  const aqk = o;
  o += 2 * planes * aqkPlane;
  const sc = o;
  o += 16 * s.hv * rows;
  return { planes, rows, dks, dvs, qrPlane, wPlane, uPlane, aqkPlane, qr, kr, w, u, aqk, sc, bytes: o };
}

/** Scratch bytes a layer needs for prefill steps of up to `maxRows` rows (either build). */
export function prefillScratchBytes(s: PrefillShape, maxRows: number): number {
  const fast = prefillScratchLayout(s, maxRows, 1).bytes;
  const exact = prefillScratchLayout(s, Math.min(maxRows, PREFILL_EXACT_MAX_ROWS), 2).bytes;
  return Math.max(fast, exact, 16);
}

/** Shared memory of gdn_prefill_wy (wy_lay). */
export function wySharedBytes(planes: PrefillPlanes, dv: number, r: number): number {
  const vt = roundUp(dv, 16) + 8;
  return planes * (2 * C * DKT * 2 + C * vt * 2 + 2 * C * CT * 2) + 2 * C * FT * 4 + 2 * C * 4 + 2 * r * C * 4;
}

/** Shared memory of gdn_prefill_scan (scan_lay) for `mpc` 16-column groups per CTA. */
export function scanSharedBytes(planes: PrefillPlanes, mpc: number): number {
  const cluster = PREFILL_SCAN_CLUSTER;
  const ut = 16 * mpc + 8;
  const buf = planes * (3 * C * DKT * 2 + C * CT * 2 + C * ut * 2) + C * 16;
  const nbuf = planes === 1 ? 2 : 1;
  return nbuf * buf + 2 * mpc * 48 * 32 * 4 + mpc * C * 4 + 2 * cluster * C * 4 + 2 * C * (16 * mpc + 4) * 4;
}

/** chunkEnd of a launch over all of a step's chunks. */
export const PREFILL_ALL_CHUNKS = 0x7fffffff;

/**
 * A pipelined prefill's pieces shrink by this ratio (gdn-prefill-pieces.ts shrinkingPieces): a
 * batch of one sequence scans on 2 CTAs per value head (64 SMs at the 80B shape), so during the
 * scan the rest of the GPU would idle; in pieces, each piece's WY kernel runs beside the previous
 * piece's scan (and, unfused, the piece before's norm). Equal pieces pay only when few: each
 * piece costs a scan's start, and the next scan waits for the whole WY piece; shrinking pieces
 * keep the part that runs alone (the last scan) short. On the H200 at the 80B shape, 8 192 rows,
 * 0.4 measured best against 0.3, 0.5, 2/3, 0.8 and pieces of 32 chunks, with the norms after the
 * last scan and with each piece's norm beside the next scan (docs/benchmarks.md, GDN prefill).
 * 0.4 cuts 128 chunks as 82, 33, 13.
 */
export const PREFILL_PIECE_RATIO = 0.4;
/** The smallest piece (chunks) of a pipelined prefill: every piece costs a WY and a scan launch. */
export const PREFILL_PIECE_MIN_CHUNKS = 8;

/** One piece of a prefill: its chunks [chunk0, chunkEnd) of every sequence, its WY launch and (unfused) its norm's. */
export interface PrefillPiece {
  readonly chunk0: number;
  readonly chunkEnd: number;
  readonly wy: LaunchConfig;
  readonly norm?: LaunchConfig;
}

export interface PrefillPlan {
  readonly planes: PrefillPlanes;
  /** The scan applies the gated RMSNorm itself (clusters of 2 CTAs); otherwise gdn_prefill_norm does. */
  readonly fuseNorm: boolean;
  /** The WY kernel over all of the step's chunks (one piece's is in `pieces`). */
  readonly wy: LaunchConfig;
  readonly scan: LaunchConfig;
  readonly scratch: PrefillScratchLayout;
  /** The pieces in order: one over all chunks, or a pipelined prefill's (each WY after the first with an early start). */
  readonly pieces: readonly PrefillPiece[];
}

/**
 * Launch shapes of one prefill step of `rows` rows over `batch` positions. `exact`: the exact
 * build (default: steps of at most PREFILL_EXACT_MAX_ROWS rows). `clusters`: the device runs
 * thread-block clusters (sm_90+): the scan can then fuse the norm when one cluster holds a head's
 * d_v (d_v ≤ 64·PREFILL_SCAN_CLUSTER). `fuseNorm`: fuse where it can (true) or never (false); by
 * default the exact build fuses and the fast one does not (on the H200 the fused fast scan
 * measured slower than the fast scan and the norm kernel, docs/benchmarks.md, GDN prefill). A
 * pipelined prefill (KERNELS.md "Pieces"): `pieceChunks` cuts the step into pieces of that many chunks (0: one piece); else `pieceRatio`
 * into pieces that shrink by that ratio down to PREFILL_PIECE_MIN_CHUNKS (shrinkingPieces), by
 * default PREFILL_PIECE_RATIO where it pays — the fast build on a device with clusters (sm_90+: the
 * early start), given `sms` (the device's multiprocessors), when the scan's CTAs fill at most half
 * of them — and one piece elsewhere.
 */
export function prefillPlan(
  s: PrefillShape, batch: number, rows: number, stream: Stream,
  opts: { clusters: boolean; exact?: boolean; fuseNorm?: boolean; sms?: number; pieceChunks?: number; pieceRatio?: number },
): PrefillPlan {
  if (s.dk > 128 || s.dv > 256 || s.hv % s.hk !== 0) throw new InvalidArgumentError(`gdn prefill: unsupported shape ${JSON.stringify(s)} (d_k ≤ 128, d_v ≤ 256)`);
  const exact = opts.exact ?? rows <= PREFILL_EXACT_MAX_ROWS;
  const planes: PrefillPlanes = exact ? 2 : 1;
  const r = s.hv / s.hk;
  const cl = PREFILL_SCAN_CLUSTER;
  const nm = Math.ceil(s.dv / 16);
  const ctas = cl * Math.ceil(nm / (4 * cl));
  const mpc = Math.ceil(nm / ctas);
  const canFuse = opts.clusters && ctas === cl;
  const fuseNorm = canFuse && (opts.fuseNorm ?? exact);
  const wyShared = wySharedBytes(planes, s.dv, r);
  const scanShared = scanSharedBytes(planes, mpc);
  if (wyShared > MAX_SHARED || scanShared > MAX_SHARED) {
    throw new InvalidArgumentError(`gdn prefill: shape ${JSON.stringify(s)} needs ${Math.max(wyShared, scanShared)} bytes of shared memory (at most ${MAX_SHARED})`);
  }
  const wyCtas = Math.floor(rows / C) + batch;  // at least the step's chunks
  const wy: LaunchConfig = { grid: [wyCtas, s.hk], block: WY_THREADS, sharedBytes: wyShared, stream };
  const chunks = Math.ceil(rows / C);
  const scanCtas = ctas * s.hv * batch;
  const pays = !exact && opts.clusters && opts.sms !== undefined && 2 * scanCtas <= opts.sms;
  const ends =
    opts.pieceChunks !== undefined
      ? opts.pieceChunks === 0 ? [chunks] : equalPieces(chunks, opts.pieceChunks)
      : opts.pieceRatio !== undefined || pays ? shrinkingPieces(chunks, opts.pieceRatio ?? PREFILL_PIECE_RATIO, PREFILL_PIECE_MIN_CHUNKS) : [chunks];
  // The norm (unfused) of the rows of chunks [c0, c1): beside the next piece's scan (an early
  // start), the last piece's after it; one piece's covers all of the step's rows.
  const normOf = (c0: number, c1: number) =>
    fuseNorm ? {} : { norm: { grid: [Math.max(1, Math.min(rows, batch * C * (c1 - c0)))], block: 128, stream, ...(c1 === chunks ? {} : { earlyStart: true }) } };
  const pieces: PrefillPiece[] = [];
  // One piece: the whole step's WY launch.
  if (ends.length <= 1) pieces.push({ chunk0: 0, chunkEnd: PREFILL_ALL_CHUNKS, wy, ...normOf(0, chunks) });
  else {
    ends.forEach((c1, i) => {
      const c0 = i === 0 ? 0 : ends[i - 1]!;
      // A sequence has at most c1 − c0 chunks in the piece; after the first, each WY kernel starts beside the last scan.
      const grid = [Math.min(wyCtas, batch * (c1 - c0)), s.hk];
      const wyPiece: LaunchConfig = { ...wy, grid, ...(c0 > 0 ? { earlyStart: true } : {}) };
      pieces.push({ chunk0: c0, chunkEnd: c1 === chunks ? PREFILL_ALL_CHUNKS : c1, wy: wyPiece, ...normOf(c0, c1) });
    });
  }
  return {
    planes,
    fuseNorm,
    pieces,
    wy,
    scan: { grid: [ctas, s.hv, batch], block: 64 * mpc, sharedBytes: scanShared, stream },
    scratch: prefillScratchLayout(s, rows, planes),
  };
}

/** The parameters of every prefill kernel, in the order of the CUDA signatures. */
export const PREFILL_PARAMS = {
  qkvz: 'ptr', y: 'ptr',
  slots: 'ptr', rowStarts: 'ptr', seqLens: 'ptr',
  state: 'ptr', convRing: 'ptr',
  convWeight: 'ptr', aLog: 'ptr', dtBias: 'ptr', normWeight: 'ptr',
  stash: 'ptr', convStash: 'ptr', pending: 'ptr',
  scratch: 'ptr',
  batch: 'i32', rows: 'i32',
  hk: 'i32', hv: 'i32', dk: 'i32', dv: 'i32', convK: 'i32', maxK: 'i32',
  eps: 'f32',
  fuseNorm: 'i32',
  chunk0: 'i32', chunkEnd: 'i32',
  o: 'ptr', yDtype: 'i32',
} as const satisfies KernelParams;

export type PrefillKernel = Kernel<typeof PREFILL_PARAMS>;

/** The kernels of a prefill: fast and exact builds of the WY and scan kernels, and the norm. */
export interface PrefillKernels {
  readonly wy: PrefillKernel;
  readonly wyExact: PrefillKernel;
  readonly scan: PrefillKernel;
  readonly scanExact: PrefillKernel;
  readonly norm: PrefillKernel;
}

/** The buffers of a prefill launch (KERNELS.md); `scratch` holds at least plan.scratch.bytes. */
export interface PrefillBuffers extends GdnStepPointers {
  readonly scratch: DevicePtr;
  /**
   * Where an unfused scan leaves its raw O rows (f32, [rows][H_v·d_v]) for gdn_prefill_norm;
   * default `y`, which then must be f32 (the norm runs in place).
   */
  readonly o?: DevicePtr;
  /** The element type y is stored in (FLOAT_DTYPE_CODE; default 0, f32). */
  readonly yDtype?: number;
}

/**
 * Enqueues the prefill of `rows` rows over `batch` positions: per piece of the plan gdn_prefill_wy
 * and gdn_prefill_scan, then gdn_prefill_norm where the scan does not fuse it. In a pipelined
 * prefill each scan lets the next kernels start at once: the norm of the piece before (its rows
 * are final) and the next piece's WY kernel (it reads nothing a scan writes); neither completes
 * before the kernel before it (kernels/gdn-chunk.cu piece_done), so each scan, stream-ordered,
 * finds the state of the one before. Order: WY₀, scan₀, WY₁, scan₁, norm₀, WY₂, scan₂, norm₁, …,
 * scanₙ₋₁, normₙ₋₂, normₙ₋₁.
 */
export function launchPrefill(gpu: GpuBackend, kernels: PrefillKernels, s: PrefillShape, bufs: PrefillBuffers, batch: number, rows: number, eps: number, plan: PrefillPlan): void {
  if (batch === 0) return;
  const yDtype = bufs.yDtype ?? 0;
  const o = bufs.o ?? bufs.y;
  if (yDtype !== 0 && o === bufs.y && !plan.fuseNorm) {
    throw new InvalidArgumentError('gdn prefill: an unfused norm with a 16-bit y needs its own f32 buffer `o` for the raw O rows (it cannot run in place)');
  }
  const args = {
    qkvz: bufs.qkvz, y: bufs.y, slots: bufs.slots, rowStarts: bufs.rowStarts, seqLens: bufs.seqLens,
    state: bufs.state, convRing: bufs.convRing, convWeight: bufs.convWeight, aLog: bufs.aLog, dtBias: bufs.dtBias,
    normWeight: bufs.normWeight, stash: bufs.stash, convStash: bufs.convStash, pending: bufs.pending, scratch: bufs.scratch,
    batch, rows, hk: s.hk, hv: s.hv, dk: s.dk, dv: s.dv, convK: s.convK, maxK: s.maxK, eps, fuseNorm: plan.fuseNorm ? 1 : 0,
    chunk0: 0, chunkEnd: PREFILL_ALL_CHUNKS, o, yDtype,
  };
  const exact = plan.planes === 2;
  const scan = exact ? kernels.scanExact : kernels.scan;
  const P = plan.pieces;
  const pieceArgs = (i: number) => ({ ...args, chunk0: P[i]!.chunk0, chunkEnd: P[i]!.chunkEnd });
  const normOf = (i: number) => {
    const norm = P[i]!.norm;
    if (norm) gpu.launch(kernels.norm, norm, pieceArgs(i));
  };
  P.forEach((piece, i) => {
    if (i >= 2) normOf(i - 2);
    gpu.launch(exact ? kernels.wyExact : kernels.wy, piece.wy, pieceArgs(i));
    gpu.launch(scan, plan.scan, pieceArgs(i));
  });
  for (let i = Math.max(0, P.length - 2); i < P.length; i++) normOf(i);
}
