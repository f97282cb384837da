// The launch shapes and the variant each launch of the layer runs (src/gdn-launch.ts): what the
// CUDA kernels trap on when it is wrong (kernels/gdn-pipe.cuh pipe_smem_floats, gdn-fast.cuh
// fast_smem_floats), checked here without a GPU.
import type { Stream } from '@metrale/core';
import { describe, expect, it } from 'vitest';
import {
  PIPE_MIN_BATCH, PIPE_THREADS, foldVariant, pipeSupported, recurrentLaunch, recurrentVariant, variantBlock, variantSharedBytes,
} from '../src/gdn-launch.js';

const B80 = { hk: 16, hv: 32, dk: 128, dv: 128, convK: 4, maxK: 4 };
const stream = { id: 0 } as unknown as Stream; // opaque to the launch shapes

describe('gdn launch shapes', () => {
  it('runs decode steps of at least PIPE_MIN_BATCH positions through pipe, everything else through smem', () => {
    expect(recurrentVariant(B80, 0, 1, PIPE_MIN_BATCH)).toBe('pipe');
    expect(recurrentVariant(B80, 0, 1, 256)).toBe('pipe');
    expect(recurrentVariant(B80, 0, 1, PIPE_MIN_BATCH - 1)).toBe('smem');
    expect(recurrentVariant(B80, 1, 1, 256)).toBe('smem'); // a verify of one row
    expect(recurrentVariant(B80, 0, 4, 256)).toBe('smem'); // a commit of four rows
    expect(foldVariant(B80)).toBe('smem');
  });

  it('falls back where the pipe or fast kernels do not take the shape', () => {
    expect(pipeSupported({ ...B80, dv: 130 })).toBe(false); // 16-byte copies need d_v % 4 = 0
    expect(recurrentVariant({ ...B80, dv: 130 }, 0, 1, 64)).toBe('smem');
    expect(recurrentVariant({ ...B80, dk: 256 }, 0, 1, 64)).toBe('legacy');
    expect(recurrentVariant({ ...B80, maxK: 9 }, 0, 1, 64)).toBe('legacy');
  });

  it('gives the pipe kernels 128 threads and the shared memory of their blocks and tables', () => {
    // 2 blocks of [128][32], k and q, 4 pending keys, 496 scalars, [2][4][32] part sums, o [128]
    expect(variantSharedBytes('pipe', B80)).toBe(4 * (2 * 128 * 32 + (2 + 4) * 128 + 496 + 256 + 128));
    expect(variantSharedBytes('pipe', { ...B80, maxK: 8 })).toBe(4 * (2 * 128 * 32 + (2 + 8) * 128 + 496 + 256 + 128));
    expect(variantBlock('pipe', B80)).toBe(PIPE_THREADS);
    expect(recurrentLaunch(B80, 40, stream, 4, 'pipe')).toEqual({ grid: [40, 32], block: 128, sharedBytes: 39360, stream });
    // the smem kernels: the head's state, 4-row k and q, 4 pending keys, scalars; d_v threads
    expect(recurrentLaunch(B80, 40, stream, 4, 'smem')).toEqual({ grid: [40, 32], block: 128, sharedBytes: 4 * (128 * 128 + 12 * 128 + 496), stream });
  });
});
