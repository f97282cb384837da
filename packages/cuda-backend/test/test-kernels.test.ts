// The CPU side of the backend's test kernels that its GPU tests and bench do not check against the
// device (CpuBackend is not a dependency of this package: a memory view over one buffer stands in).
import type { CpuKernelContext } from '@metrale/core';
import { describe, expect, it } from 'vitest';
import { READ_AHEAD_MODES, testKernels } from '../src/index.js';

function context(buffer: ArrayBuffer, grid: number, block: number): CpuKernelContext {
  const mem = { u32: (ptr: bigint, n: number) => new Uint32Array(buffer, Number(ptr), n) };
  return { mem: mem as unknown as CpuKernelContext['mem'], grid: [grid, 1, 1], block: [block, 1, 1], sharedBytes: 0 };
}

describe('read_xor_u32 CPU twin', () => {
  it('gives each CTA the xor of the 16-byte words its threads read, grid-stride', () => {
    const [ctas, threads, n4] = [3, 2, 11];
    const buffer = new ArrayBuffer(4 * 4 * n4 + 4 * ctas);
    const words = new Uint32Array(buffer, 0, 4 * n4);
    for (let i = 0; i < words.length; i++) words[i] = (i * 2654435761) >>> 0;
    new Uint32Array(buffer, 4 * 4 * n4, ctas).fill(0xffffffff); // overwritten, not accumulated
    testKernels.readXorU32.cpu!({ src: 0n, sink: BigInt(4 * 4 * n4), n4 }, context(buffer, ctas, threads));
    // Thread t of the 6 reads words t, t + 6: CTA 0 holds threads 0-1 (words 0, 1, 6, 7), CTA 1 words 2, 3, 8, 9, CTA 2 words 4, 5, 10.
    const xorOf = (...w: number[]) => w.reduce((a, i) => (a ^ words[4 * i]! ^ words[4 * i + 1]! ^ words[4 * i + 2]! ^ words[4 * i + 3]!) >>> 0, 0);
    expect(Array.from(new Uint32Array(buffer, 4 * 4 * n4, ctas))).toEqual([xorOf(0, 1, 6, 7), xorOf(2, 3, 8, 9), xorOf(4, 5, 10)]);
  });
});

describe('read_xor_ahead_u32 CPU twin', () => {
  it("gives each CTA the xor of its contiguous share of the words, whatever it reads ahead", () => {
    const [ctas, n4] = [3, 11]; // ⌈11 / 3⌉ = 4 words a CTA: 0-3, 4-7, 8-10
    const buffer = new ArrayBuffer(4 * 4 * n4 + 4 * ctas);
    const words = new Uint32Array(buffer, 0, 4 * n4);
    for (let i = 0; i < words.length; i++) words[i] = (i * 2654435761) >>> 0;
    const xorOf = (...w: number[]) => w.reduce((a, i) => (a ^ words[4 * i]! ^ words[4 * i + 1]! ^ words[4 * i + 2]! ^ words[4 * i + 3]!) >>> 0, 0);
    for (const ahead of Object.values(READ_AHEAD_MODES)) {
      new Uint32Array(buffer, 4 * 4 * n4, ctas).fill(0xffffffff); // overwritten, not accumulated
      testKernels.readXorAheadU32.cpu!({ src: 0n, sink: BigInt(4 * 4 * n4), n4, ahead }, context(buffer, ctas, 2));
      expect(Array.from(new Uint32Array(buffer, 4 * 4 * n4, ctas))).toEqual([xorOf(0, 1, 2, 3), xorOf(4, 5, 6, 7), xorOf(8, 9, 10)]);
    }
  });
});

describe('spin_cycles CPU twin', () => {
  it('stores the cycles it was asked to spin', () => {
    const buffer = new ArrayBuffer(4);
    testKernels.spinCycles.cpu!({ sink: 0n, cycles: 1234 }, context(buffer, 1, 1));
    expect(new Uint32Array(buffer)[0]).toBe(1234);
  });
});
