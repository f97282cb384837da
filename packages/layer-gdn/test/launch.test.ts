// The launch shapes and the variant each launch of the layer runs (src/gdn-launch.ts): what the
// CUDA kernels trap on when it is wrong (kernels/gdn-pipe.cuh pipe_smem_floats, gdn-fast-layout.cuh
// fast_smem_floats), checked here without a GPU.
import type { Stream } from '@metrale/core';
import { describe, expect, it } from 'vitest';
import {
  PIPE_MIN_BATCH, PIPE_THREADS, SPLIT_CTAS, foldVariant, pipeSupported, recurrentLaunch, recurrentVariant,
  runsClusters, splitSupported, variantBlock, variantFor, variantGrid, variantSharedBytes,
} from '../src/gdn-launch.js';
import {
  DECODE_PREP_THREADS, DECODE_STATE_THREADS, PIPE_DECODE_FROM, TWO_KERNEL_MIN_BATCH, decodePrepBytes, decodeStateSharedBytes, runsTwoKernelDecode,
  decodePrepStride, twoKernelDecodeLaunches, twoKernelDecodeSupported,
} from '../src/gdn-decode-launch.js';
import { foldPath, foldStateLaunch, foldStateSharedBytes } from '../src/gdn-fold-launch.js';
import { VERIFY_PREP_THREADS, twoKernelVerifyLaunches, twoKernelVerifySupported, verifyStateSharedBytes } from '../src/gdn-verify-launch.js';
import { PREFILL_ALL_CHUNKS, PREFILL_PIECE_MIN_CHUNKS, PREFILL_PIECE_RATIO, launchPrefill, prefillPlan, type PrefillBuffers } from '../src/gdn-prefill-launch.js';
import { prefillKernels } from '../src/gdn-prefill-kernels.js';
import { equalPieces, shrinkingPieces } from '../src/gdn-prefill-pieces.js';

const B80 = { hk: 16, hv: 32, dk: 128, dv: 128, convK: 4, maxK: 4 };
const stream = { id: 0 } as unknown as Stream; // opaque to the launch shapes

describe('gdn launch shapes', () => {
  it('runs decode steps of at least PIPE_MIN_BATCH positions through pipe, smaller ones through split where clusters run, the rest through smem', () => {
    expect(recurrentVariant(B80, 0, 1, PIPE_MIN_BATCH)).toBe('pipe');
    expect(recurrentVariant(B80, 0, 1, 256, true)).toBe('pipe');
    expect(recurrentVariant(B80, 0, 1, PIPE_MIN_BATCH - 1, true)).toBe('split');
    expect(recurrentVariant(B80, 0, 1, 1, true)).toBe('split');
    expect(recurrentVariant(B80, 0, 1, PIPE_MIN_BATCH - 1)).toBe('smem'); // no clusters (before sm_90)
    expect(recurrentVariant(B80, 1, 1, 256, true)).toBe('smem'); // a verify of one row
    expect(recurrentVariant(B80, 0, 4, 256, true)).toBe('smem'); // a commit of four rows
    expect(foldVariant(B80)).toBe('smem');
    expect(foldVariant({ ...B80, maxK: 9 })).toBe('general');
  });

  it('says clusters run on CUDA devices from sm_90 only', () => {
    const dev = (kind: 'cuda' | 'cpu', cc: [number, number]) => ({ kind, device: { computeCapability: cc } }) as unknown as Parameters<typeof runsClusters>[0];
    expect(runsClusters(dev('cuda', [9, 0]))).toBe(true);
    expect(runsClusters(dev('cuda', [10, 0]))).toBe(true);
    expect(runsClusters(dev('cuda', [8, 9]))).toBe(false);
    expect(runsClusters(dev('cpu', [9, 0]))).toBe(false);
  });

  it('falls back where the pipe, split or smem kernels do not take the shape: to the general kernels at last', () => {
    expect(pipeSupported({ ...B80, dv: 130 })).toBe(false); // 16-byte copies need d_v % 4 = 0
    expect(splitSupported({ ...B80, dv: 160 })).toBe(false); // 4 CTAs of 32 columns
    expect(recurrentVariant({ ...B80, dv: 130 }, 0, 1, 64)).toBe('smem');
    expect(recurrentVariant({ ...B80, dv: 160 }, 0, 1, 4, true)).toBe('smem');
    expect(recurrentVariant({ ...B80, dv: 160 }, 0, 1, 64)).toBe('pipe');
    expect(variantFor({ ...B80, dv: 130 }, 'split')).toBe('smem');
    expect(variantFor({ ...B80, dv: 160 }, 'split')).toBe('pipe');
    expect(recurrentVariant({ ...B80, dk: 256 }, 0, 1, 64)).toBe('general');
    expect(recurrentVariant({ ...B80, maxK: 9 }, 0, 1, 4, true)).toBe('general');
    expect(recurrentVariant({ ...B80, convK: 5 }, 1, 4, 4, true)).toBe('general');
    expect(variantFor(B80, 'general')).toBe('general');
  });

  it('gives split 4 CTAs per head and every other variant one', () => {
    expect(variantGrid('split', 5, 32)).toEqual([5 * SPLIT_CTAS, 32]);
    expect(variantGrid('smem', 5, 32)).toEqual([5, 32]);
    expect(variantGrid('pipe', 5, 32)).toEqual([5, 32]);
    expect(variantGrid('general', 5, 32)).toEqual([5, 32]);
  });

  it('gives the pipe kernels 128 threads and the shared memory of their blocks and tables', () => {
    // 2 blocks of [128][32], k and q, 4 pending keys, 496 scalars, [2][4][32] part sums, o [128]
    // (and v, z [128]; the cluster's 4 partial sums)
    expect(variantSharedBytes('pipe', B80)).toBe(4 * (2 * 128 * 32 + (2 + 4) * 128 + 496 + 256 + 3 * 128 + 4));
    expect(variantSharedBytes('pipe', { ...B80, maxK: 8 })).toBe(4 * (2 * 128 * 32 + (2 + 8) * 128 + 496 + 256 + 3 * 128 + 4));
    expect(variantSharedBytes('split', B80)).toBe(4 * (1 * 128 * 32 + (2 + 4) * 128 + 496 + 256 + 3 * 128 + 4));
    expect(variantBlock('pipe', B80)).toBe(PIPE_THREADS);
    expect(variantBlock('split', B80)).toBe(PIPE_THREADS);
    expect(recurrentLaunch(B80, 40, stream, 4, 'pipe')).toEqual({ grid: [40, 32], block: 128, sharedBytes: 40400, stream });
    expect(recurrentLaunch(B80, 40, stream, 4, 'split')).toEqual({ grid: [160, 32], block: 128, sharedBytes: 4 * (128 * 32 + 6 * 128 + 496 + 256 + 3 * 128 + 4), stream });
    // the smem kernels: the head's state, 4-row k and q, 4 pending keys, scalars; d_v threads
    expect(recurrentLaunch(B80, 40, stream, 4, 'smem')).toEqual({ grid: [40, 32], block: 128, sharedBytes: 4 * (128 * 128 + 12 * 128 + 496), stream });
    // the general kernels: d_v threads, no dynamic shared memory
    expect(recurrentLaunch({ ...B80, dv: 192 }, 3, stream, 12, 'general')).toEqual({ grid: [3, 32], block: 192, sharedBytes: 0, stream });
    expect(variantBlock('general', B80)).toBe(128);
  });
});

describe('two-kernel decode launch shapes (src/gdn-decode-launch.ts)', () => {
  it('sizes both launches as the kernels check them (gdn-decode-prep.cuh check_prep, gdn-decode-state.cuh state_smem_floats)', () => {
    // state: the record [2·128 + 128 + 4], 4 pending keys [128], dot products [2][8][128], u [128], Σo² [8]
    expect(decodeStateSharedBytes(B80)).toBe(4 * (388 + 4 * 128 + 17 * 128 + 8));
    expect(decodePrepStride(B80)).toBe(388);
    expect(decodeStateSharedBytes({ ...B80, maxK: 8 }) - decodeStateSharedBytes(B80)).toBe(4 * 4 * 128);
    expect(decodePrepBytes(B80, 256)).toBe(4 * 256 * 32 * 388);
    const l = twoKernelDecodeLaunches(B80, 40, stream, 4);
    // prep: two warps per key head (q and k; v), no shared memory
    expect(DECODE_PREP_THREADS).toBe(64);
    expect(l.prep).toEqual({ grid: [40, 16], block: DECODE_PREP_THREADS, stream });
    // state: an early start after the prep (it waits for the records)
    expect(l.state).toEqual({ grid: [40, 32], block: DECODE_STATE_THREADS, sharedBytes: decodeStateSharedBytes(B80), stream, earlyStart: true });
  });

  it('runs below PIPE_DECODE_FROM and from TWO_KERNEL_MIN_BATCH positions where it takes the shape (d_v ≤ 128 and a multiple of 4)', () => {
    expect(runsTwoKernelDecode(B80, TWO_KERNEL_MIN_BATCH)).toBe(true);
    expect(runsTwoKernelDecode(B80, 256)).toBe(true);
    expect(runsTwoKernelDecode(B80, 1)).toBe(true);
    expect(runsTwoKernelDecode(B80, PIPE_DECODE_FROM - 1)).toBe(true);
    expect(runsTwoKernelDecode(B80, PIPE_DECODE_FROM)).toBe(false);
    expect(runsTwoKernelDecode(B80, TWO_KERNEL_MIN_BATCH - 1)).toBe(false);
    expect(twoKernelDecodeSupported({ ...B80, dv: 130 })).toBe(false);
    expect(twoKernelDecodeSupported({ ...B80, dv: 256 })).toBe(false);
    expect(twoKernelDecodeSupported({ ...B80, dk: 192 })).toBe(false);
    expect(twoKernelDecodeSupported({ ...B80, maxK: 9 })).toBe(false);
    expect(twoKernelDecodeSupported({ ...B80, dk: 48, dv: 40, convK: 3 })).toBe(true);
    // the prep's float4 lanes: d_k a multiple of 4; a lane per value head of a key head
    expect(twoKernelDecodeSupported({ ...B80, dk: 46 })).toBe(false);
    expect(twoKernelDecodeSupported({ ...B80, hk: 1, hv: 32 })).toBe(true);
    expect(twoKernelDecodeSupported({ ...B80, hk: 1, hv: 64 })).toBe(false);
  });
});

describe('two-kernel verify and register fold launch shapes (src/gdn-verify-launch.ts, src/gdn-fold-launch.ts)', () => {
  it('launches the verify prep as two warps per (position, key head) with no shared memory', () => {
    const l = twoKernelVerifyLaunches(B80, 40, stream, 4);
    expect(VERIFY_PREP_THREADS).toBe(64);
    expect(l.prep).toEqual({ grid: [40, 16], block: VERIFY_PREP_THREADS, stream });
    // state: keys [8][128], values [4·128 + 48], 4 pending keys [128], Σo² [16], the ring [4][4][512]
    expect(l.state).toEqual({ grid: [40, 32], block: 128, sharedBytes: 4 * (1024 + 560 + 512 + 16 + 8192), stream, earlyStart: true });
    // a d_v of 128 puts the dot products [8][4][128] in 4096 of the ring's 8192 floats
    expect(verifyStateSharedBytes({ ...B80, dv: 64 })).toBe(4 * (1024 + 4 * 64 + 48 + 512 + 16 + 8192));
    expect(twoKernelVerifySupported(B80)).toBe(true);
    expect(twoKernelVerifySupported({ ...B80, dk: 46 })).toBe(false);
    // the prep's gates: a lane per (value head, row) of a key head, 4 rows
    expect(twoKernelVerifySupported({ ...B80, hk: 4, hv: 32 })).toBe(true);
    expect(twoKernelVerifySupported({ ...B80, hk: 2, hv: 32 })).toBe(false);
  });

  it('folds in registers where the two-kernel decode takes the shape, else through the gdn.fold variant', () => {
    // the accepted rows' keys [4][128] and u [4][128], their γ [4]
    expect(foldStateSharedBytes(B80)).toBe(4 * (4 * 256 + 4));
    expect(foldStateSharedBytes({ ...B80, maxK: 6 })).toBe(4 * (6 * 256 + 8));
    expect(foldStateLaunch(B80, 40, stream, 4)).toEqual({ grid: [40, 32], block: DECODE_STATE_THREADS, sharedBytes: foldStateSharedBytes(B80), stream });
    expect(foldPath(B80)).toBe('register');
    expect(foldPath({ ...B80, dv: 256 })).toBe(foldVariant({ ...B80, dv: 256 }));
    expect(foldPath({ ...B80, dk: 46 })).toBe('smem');
  });
});

describe('prefill pieces (prefillPlan: a pipelined prefill)', () => {
  const s = B80;
  const bounds = (p: { pieces: readonly { chunk0: number; chunkEnd: number }[] }) => p.pieces.map((x) => [x.chunk0, x.chunkEnd]);
  it('pipelines the fast build of a batch of one where clusters run and the scan fills at most half the SMs, in shrinking pieces', () => {
    const p = prefillPlan(s, 1, 8192, stream, { clusters: true, sms: 132 });
    expect(p.planes).toBe(1);
    const ends = shrinkingPieces(128, PREFILL_PIECE_RATIO, PREFILL_PIECE_MIN_CHUNKS);
    expect(ends).toEqual([82, 115, 128]);
    expect(p.pieces).toHaveLength(ends.length);
    // Contiguous, in order, the last open-ended; each WY grid covers its piece; early start after the first.
    p.pieces.forEach((piece, i) => {
      expect(piece.chunk0).toBe(i === 0 ? 0 : ends[i - 1]);
      expect(piece.chunkEnd).toBe(i === ends.length - 1 ? PREFILL_ALL_CHUNKS : ends[i]);
      expect(piece.wy.grid).toEqual([ends[i]! - (i === 0 ? 0 : ends[i - 1]!), s.hk]);
      expect(piece.wy.earlyStart === true).toBe(i > 0);
      // Its rows' norm: beside the next piece's scan, the last after the last scan.
      expect(piece.norm?.grid).toEqual([64 * (ends[i]! - (i === 0 ? 0 : ends[i - 1]!))]);
      expect(piece.norm?.earlyStart === true).toBe(i < ends.length - 1);
    });
    expect(p.scan.earlyStart).toBeUndefined();
    // The exact build fuses the norm: no norm launches of its own.
    expect(prefillPlan(s, 1, 8192, stream, { clusters: true, exact: true, pieceChunks: 32 }).pieces.every((x) => x.norm === undefined)).toBe(true);
  });
  it('launches WY₀, scan₀, WY₁, scan₁, norm₀, …, the last two norms after the last scan; one piece: WY, scan, norm over the step', () => {
    const launched = (plan: ReturnType<typeof prefillPlan>) => {
      const out: string[] = [];
      const recorder = { launch: (k: { name: string }, _l: unknown, a: { chunk0: number; chunkEnd: number }) => void out.push(`${k.name.replace('gdn.prefill-', '')} ${a.chunk0}-${a.chunkEnd === PREFILL_ALL_CHUNKS ? 'end' : a.chunkEnd}`) };
      const bufs = Object.fromEntries(['qkvz', 'y', 'slots', 'rowStarts', 'seqLens', 'state', 'convRing', 'convWeight', 'aLog', 'dtBias', 'normWeight', 'stash', 'convStash', 'pending', 'scratch'].map((n) => [n, 16n])) as unknown as PrefillBuffers;
      launchPrefill(recorder as never, prefillKernels, s, bufs, 1, 8192, 1e-6, plan);
      return out;
    };
    const one = prefillPlan(s, 1, 8192, stream, { clusters: true });
    expect(one.pieces[0]!.norm?.grid).toEqual([8192]);  // the one piece carries the norm over the step's rows
    expect(launched(one)).toEqual(['wy 0-end', 'scan 0-end', 'norm 0-end']);
    expect(launched(prefillPlan(s, 1, 8192, stream, { clusters: true, sms: 132 }))).toEqual([
      'wy 0-82', 'scan 0-82', 'wy 82-115', 'scan 82-115', 'norm 0-82', 'wy 115-end', 'scan 115-end', 'norm 82-115', 'norm 115-end',
    ]);
    // Fused (the exact build): no norm launches.
    expect(launched(prefillPlan(s, 1, 8192, stream, { clusters: true, exact: true, pieceChunks: 64 }))).toEqual(['wy-exact 0-64', 'scan-exact 0-64', 'wy-exact 64-end', 'scan-exact 64-end']);
  });
  it('passes y\'s row type and the raw O rows to every launch; a 16-bit y needs its own o where the norm runs unfused', () => {
    const args: { name: string; y: bigint; o: bigint; yDtype: number }[] = [];
    const recorder = { launch: (k: { name: string }, _l: unknown, a: { y: bigint; o: bigint; yDtype: number }) => void args.push({ name: k.name, y: a.y, o: a.o, yDtype: a.yDtype }) };
    const bufs = Object.fromEntries(['qkvz', 'y', 'slots', 'rowStarts', 'seqLens', 'state', 'convRing', 'convWeight', 'aLog', 'dtBias', 'normWeight', 'stash', 'convStash', 'pending', 'scratch'].map((n) => [n, 16n])) as unknown as PrefillBuffers;
    const unfused = prefillPlan(s, 1, 2048, stream, { clusters: false });
    launchPrefill(recorder as never, prefillKernels, s, bufs, 1, 2048, 1e-6, unfused);
    expect(args.map((a) => [a.o, a.yDtype])).toEqual(args.map(() => [16n, 0]));  // f32: o is y, the norm in place
    args.length = 0;
    launchPrefill(recorder as never, prefillKernels, s, { ...bufs, y: 32n, o: 48n, yDtype: 1 }, 1, 2048, 1e-6, unfused);
    expect(args.map((a) => a.name)).toEqual(['gdn.prefill-wy', 'gdn.prefill-scan', 'gdn.prefill-norm']);
    expect(args.every((a) => a.y === 32n && a.o === 48n && a.yDtype === 1)).toBe(true);
    expect(() => launchPrefill(recorder as never, prefillKernels, s, { ...bufs, yDtype: 1 }, 1, 2048, 1e-6, unfused)).toThrow(/its own f32 buffer `o`/);
    // Fused, the scan stores y itself: no o needed.
    expect(() => launchPrefill(recorder as never, prefillKernels, s, { ...bufs, yDtype: 1 }, 1, 512, 1e-6, prefillPlan(s, 1, 512, stream, { clusters: true }))).not.toThrow();
  });
  it('runs one piece where pipelining would not pay or cannot start early', () => {
    const one = [[0, PREFILL_ALL_CHUNKS]];
    expect(bounds(prefillPlan(s, 1, 8192, stream, { clusters: true }))).toEqual(one); // no SM count
    expect(bounds(prefillPlan(s, 1, 8192, stream, { clusters: false, sms: 132 }))).toEqual(one); // before sm_90
    expect(bounds(prefillPlan(s, 4, 8192, stream, { clusters: true, sms: 132 }))).toEqual(one); // 256 scan CTAs
    expect(bounds(prefillPlan(s, 1, 1024, stream, { clusters: true, sms: 132 }))).toEqual(one); // exact build
    expect(bounds(prefillPlan(s, 1, 8192, stream, { clusters: true, sms: 132, pieceChunks: 0 }))).toEqual(one);
    expect(bounds(prefillPlan(s, 1, 64 * 15, stream, { clusters: true, sms: 132, exact: false }))).toEqual(one); // two pieces would leave one under 8 chunks
  });
  it('cuts any plan into the pieces asked for (ragged batches: every sequence by its own chunks)', () => {
    const p = prefillPlan(s, 3, 200, stream, { clusters: false, pieceChunks: 1 });
    expect(bounds(p)).toEqual([[0, 1], [1, 2], [2, 3], [3, PREFILL_ALL_CHUNKS]]);
    expect(p.pieces.map((x) => (x.wy.grid as readonly number[])[0])).toEqual([3, 3, 3, 3]);
    expect(bounds(prefillPlan(s, 1, 8192, stream, { clusters: false, pieceRatio: 0.5 })).map((b) => b[0])).toEqual([0, 68, 102, 119]);
    expect(() => prefillPlan(s, 1, 200, stream, { clusters: false, pieceChunks: 1.5 })).toThrow(/pieceChunks must be a positive integer, got 1.5/);
    expect(() => prefillPlan(s, 1, 200, stream, { clusters: false, pieceChunks: -1 })).toThrow(/pieceChunks/);
    expect(() => prefillPlan(s, 1, 200, stream, { clusters: false, pieceRatio: 1 })).toThrow(/pieceRatio must be in \(0, 1\), got 1/);
  });
  it('shrinking pieces: each at least the smallest, contiguous, covering every chunk', () => {
    for (const chunks of [1, 7, 16, 17, 40, 128, 129, 1000]) {
      for (const ratio of [0.3, 0.5, 2 / 3, 0.9]) {
        const ends = shrinkingPieces(chunks, ratio, 8);
        expect(ends.at(-1)).toBe(chunks);
        const sizes = ends.map((e, i) => e - (i === 0 ? 0 : ends[i - 1]!));
        expect(sizes.every((x) => x > 0)).toBe(true);
        if (sizes.length > 1) expect(Math.min(...sizes)).toBeGreaterThanOrEqual(7); // rounding of the boundaries: within a chunk
      }
    }
    expect(equalPieces(10, 4)).toEqual([4, 8, 10]);
  });
});
