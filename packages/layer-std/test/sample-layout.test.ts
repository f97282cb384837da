// The token-selection kernels' layout lives twice: in kernels/std-sample.cu's constants and records
// and in the TypeScript that sizes their scratch, launches them and reads their output back
// (sample-kernels.ts, sample-layout.ts). A mismatch would overrun the scratch or misread a row, on
// the GPU only; this reads the CUDA source and holds the two to each other.
import {
  LOGPROBS_HEAD, LOGPROBS_ROW_WORDS, LOGPROBS_TOP, SAMPLE_PARAMS, SAMPLE_PHASE_DRAW, SAMPLE_POOLED_TOP_K, SAMPLE_SLICE, sampleLaunch, sampleScratchBytes,
  sampleScratchZeroBytes, sampleSlices,
} from '@metrale/layer-std';
import type { Stream } from '@metrale/core';
import { describe, expect, it } from 'vitest';
import { kernelConstant, kernelSource } from './kernel-source.js';

const source = kernelSource('std-sample.cu');
const constant = (name: string): number => kernelConstant(source, 'std-sample.cu', name);

const SIZES: Readonly<Record<string, number>> = { double: 8, u64: 8, float: 4, int: 4, unsigned: 4 };

/** sizeof a struct of scalar fields (`type a, b;` lines; comments left out), with C's alignment. */
function recordBytes(name: string): number {
  const m = new RegExp(`struct ${name} \\{([^}]*)\\};`).exec(source.replace(/\/\/.*$/gm, ''));
  if (!m) throw new Error(`kernels/std-sample.cu has no struct ${name}`);
  let at = 0;
  let align = 1;
  for (const line of m[1]!.split('\n')) {
    const decl = /^\s*(\w+)\s+([^;]+);/.exec(line);
    if (!decl) continue;
    const size = SIZES[decl[1]!];
    if (size === undefined) throw new Error(`struct ${name}: field type ${decl[1]} has no size here`);
    for (const _ of decl[2]!.split(',')) at = Math.ceil(at / size) * size + size;
    align = Math.max(align, size);
  }
  return Math.ceil(at / align) * align;
}

describe('the token-selection kernels\' layout: kernels/std-sample.cu and the TypeScript agree', () => {
  it('slices, threads, parameters and phases', () => {
    expect(constant('kSampleSlice')).toBe(SAMPLE_SLICE);
    expect(constant('kSampleParams')).toBe(SAMPLE_PARAMS);
    expect(constant('kPhaseDraw')).toBe(SAMPLE_PHASE_DRAW);
    expect(constant('kSampleThreads')).toBe(sampleLaunch(1, 151_936, {} as Stream).block);
    expect(sampleSlices(151_936)).toBe(Math.ceil(151_936 / constant('kSampleSlice')));
  });

  it('the pools: the top-k they serve', () => {
    expect(constant('kPoolMax') - constant('kPoolMargin')).toBe(SAMPLE_POOLED_TOP_K);
  });

  it('the scratch: the zeroed histograms and counters, then the rows\', slices\' and pools\' records (SampleScratch)', () => {
    const bins = constant('kDigitBins');
    const row = recordBytes('SampleRow');
    const slice = recordBytes('SampleSlice');
    expect([row, slice]).toEqual([48, 40]);
    for (const [capacity, vocab] of [[1, 151_936], [3, 4_097], [320, 262_144]] as const) {
      const zero = 8 * bins * capacity + (4 * capacity + 7 - ((4 * capacity + 7) % 8));
      expect(sampleScratchZeroBytes(capacity), `zeroed part at ${capacity} rows`).toBe(zero);
      const S = Math.ceil(vocab / constant('kSampleSlice'));
      expect(sampleScratchBytes(capacity, vocab), `${capacity} rows of ${vocab}`).toBe(zero + capacity * row + capacity * S * slice + capacity * S * constant('kPoolMax') * 8);
    }
  });

  it('std.logprobs\' rows', () => {
    expect(constant('kLogprobsTop')).toBe(LOGPROBS_TOP);
    expect(constant('kLogprobsHead')).toBe(LOGPROBS_HEAD);
    expect(constant('kLogprobsRowWords')).toBe(LOGPROBS_ROW_WORDS);
  });
});
