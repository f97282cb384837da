import { InvalidArgumentError, type DevicePtr, type GpuBackend, type Kernel, type KernelParams, type LaunchConfig, type Stream } from '@metrale/core';
import type { GdnStepPointers } from './gdn-math.cpu.js';

// Launch shapes, shared-memory sizes and scratch layout of the chunked prefill (kernels/gdn-chunk.cu:
// gdn_prefill_wy, gdn_prefill_scan, gdn_prefill_norm); the CUDA code computes the same sizes
// (wy_lay, scan_lay, scratch_of), the CPU twins (gdn-prefill.cpu.ts) the same scratch layout.

/** Rows per chunk of the WY form. */
export const PREFILL_CHUNK = 64;
/**
 * Prefill steps of at most this many rows run the exact build (bf16 hi/lo pairs, three products:
 * about 1e-5 relative error); longer ones the fast build (bf16 operands: about 1e-3..1e-2).
 */
export const PREFILL_EXACT_MAX_ROWS = 1024;
/**
 * CTAs per cluster of the scan on sm_90 (gdn_prefill_scan: 2, each with half a head's d_v and 8
 * warps; gdn_prefill_scan_c4: 4 with a quarter and 4 warps, twice the SMs and twice the L2 reads).
 */
export const PREFILL_SCAN_CLUSTER: 2 | 4 = 2;

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
export function scanSharedBytes(planes: PrefillPlanes, mpc: number, cluster = PREFILL_SCAN_CLUSTER): number {
  const ut = 16 * mpc + 8;
  const buf = planes * (3 * C * DKT * 2 + C * CT * 2 + C * ut * 2) + C * 16;
  const nbuf = planes === 1 ? 2 : 1;
  return nbuf * buf + 2 * mpc * 48 * 32 * 4 + mpc * C * 4 + 2 * cluster * C * 4 + 2 * C * (16 * mpc + 4) * 4;
}

export interface PrefillPlan {
  readonly planes: PrefillPlanes;
  /** CTAs per cluster of the scan (which scan kernel runs). */
  readonly cluster: 2 | 4;
  /** The scan applies the gated RMSNorm itself (clusters of 2 CTAs); otherwise gdn_prefill_norm does. */
  readonly fuseNorm: boolean;
  readonly wy: LaunchConfig;
  readonly scan: LaunchConfig;
  readonly norm: LaunchConfig | undefined;
  readonly scratch: PrefillScratchLayout;
}

/**
 * Launch shapes of one prefill step of `rows` rows over `batch` positions. `exact`: the exact
 * build (default: steps of at most PREFILL_EXACT_MAX_ROWS rows). `clusters`: the device runs
 * thread-block clusters (sm_90+): the scan can then fuse the norm when one cluster holds a head's
 * d_v (d_v ≤ 64·cluster). `fuseNorm`: fuse where it can (true) or never (false); by default the
 * exact build fuses and the fast one does not (on the H200 the fused fast scan took 1.30 ms
 * against 0.99 ms with the norm kernel for 8 192 rows, docs/benchmarks.md). `cluster`: CTAs per
 * cluster of the scan (default PREFILL_SCAN_CLUSTER).
 */
export function prefillPlan(
  s: PrefillShape, batch: number, rows: number, stream: Stream,
  opts: { clusters: boolean; exact?: boolean; cluster?: 2 | 4; fuseNorm?: boolean },
): PrefillPlan {
  if (s.dk > 128 || s.dv > 256 || s.hv % s.hk !== 0) throw new InvalidArgumentError(`gdn prefill: unsupported shape ${JSON.stringify(s)} (d_k ≤ 128, d_v ≤ 256)`);
  const exact = opts.exact ?? rows <= PREFILL_EXACT_MAX_ROWS;
  const planes: PrefillPlanes = exact ? 2 : 1;
  const r = s.hv / s.hk;
  const cl = opts.cluster ?? PREFILL_SCAN_CLUSTER;
  const nm = Math.ceil(s.dv / 16);
  const ctas = cl * Math.ceil(nm / (4 * cl));
  const mpc = Math.ceil(nm / ctas);
  const canFuse = opts.clusters && ctas === cl;
  const fuseNorm = canFuse && (opts.fuseNorm ?? exact);
  const wyShared = wySharedBytes(planes, s.dv, r);
  const scanShared = scanSharedBytes(planes, mpc, cl);
  if (wyShared > MAX_SHARED || scanShared > MAX_SHARED) {
    throw new InvalidArgumentError(`gdn prefill: shape ${JSON.stringify(s)} needs ${Math.max(wyShared, scanShared)} bytes of shared memory (at most ${MAX_SHARED})`);
  }
  return {
    planes,
    cluster: cl,
    fuseNorm,
    wy: { grid: [Math.floor(rows / C) + batch, s.hk], block: WY_THREADS, sharedBytes: wyShared, stream },
    scan: { grid: [ctas, s.hv, batch], block: 64 * mpc, sharedBytes: scanShared, stream },
    norm: fuseNorm ? undefined : { grid: [Math.max(rows, 1)], block: 128, stream },
    scratch: prefillScratchLayout(s, rows, planes),
  };
}

/** The parameters of every prefill kernel, in the order of the CUDA signatures. */
export const PREFILL_PARAMS = {
  qkvz: 'ptr', ba: 'ptr', y: 'ptr',
  slots: 'ptr', rowStarts: 'ptr', seqLens: 'ptr',
  state: 'ptr', convRing: 'ptr',
  convWeight: 'ptr', aLog: 'ptr', dtBias: 'ptr', normWeight: 'ptr',
  stash: 'ptr', convStash: 'ptr', pending: 'ptr',
  scratch: 'ptr',
  batch: 'i32', rows: 'i32',
  hk: 'i32', hv: 'i32', dk: 'i32', dv: 'i32', convK: 'i32', maxK: 'i32',
  eps: 'f32',
  fuseNorm: 'i32',
} as const satisfies KernelParams;

export type PrefillKernel = Kernel<typeof PREFILL_PARAMS>;

/** The kernels of a prefill: fast and exact builds of the WY and scan kernels (clusters of 2 and 4), and the norm. */
export interface PrefillKernels {
  readonly wy: PrefillKernel;
  readonly wyExact: PrefillKernel;
  readonly scan: PrefillKernel;
  readonly scanExact: PrefillKernel;
  readonly scanC4: PrefillKernel;
  readonly scanC4Exact: PrefillKernel;
  readonly norm: PrefillKernel;
}

/** The buffers of a prefill launch (KERNELS.md); `scratch` holds at least plan.scratch.bytes. */
export interface PrefillBuffers extends GdnStepPointers {
  readonly scratch: DevicePtr;
}

/** Enqueues the prefill of `rows` rows over `batch` positions: gdn_prefill_wy, gdn_prefill_scan (and gdn_prefill_norm). */
export function launchPrefill(gpu: GpuBackend, kernels: PrefillKernels, s: PrefillShape, bufs: PrefillBuffers, batch: number, rows: number, eps: number, plan: PrefillPlan): void {
  if (batch === 0) return;
  const args = {
    qkvz: bufs.qkvz, ba: bufs.ba, y: bufs.y, slots: bufs.slots, rowStarts: bufs.rowStarts, seqLens: bufs.seqLens,
    state: bufs.state, convRing: bufs.convRing, convWeight: bufs.convWeight, aLog: bufs.aLog, dtBias: bufs.dtBias,
    normWeight: bufs.normWeight, stash: bufs.stash, convStash: bufs.convStash, pending: bufs.pending, scratch: bufs.scratch,
    batch, rows, hk: s.hk, hv: s.hv, dk: s.dk, dv: s.dv, convK: s.convK, maxK: s.maxK, eps, fuseNorm: plan.fuseNorm ? 1 : 0,
  };
  const exact = plan.planes === 2;
  gpu.launch(exact ? kernels.wyExact : kernels.wy, plan.wy, args);
  const scan = plan.cluster === 4 ? (exact ? kernels.scanC4Exact : kernels.scanC4) : exact ? kernels.scanExact : kernels.scan;
  gpu.launch(scan, plan.scan, args);
  if (plan.norm) gpu.launch(kernels.norm, plan.norm, args);
}
