// The chunked prefill's CPU twins (src/gdn-prefill.cpu.ts: gdn.prefill-wy, gdn.prefill-scan,
// gdn.prefill-norm) against the row-by-row reference (`gdn.chunk`, chunkCpu) on the CPU backend:
// same random buffers, y, state and ring compared. The exact build (bf16 hi/lo scratch) must agree
// to 1e-4; the fast build (bf16 scratch) to the bf16 bound.
import { CpuBackend } from '@metrale/cpu-backend';
import { afterAll, describe, expect, it } from 'vitest';
import { chunkKernel } from './rowwise-kernel.js';
import { prefillKernels } from '../src/gdn-prefill-kernels.js';
import { diff, layoutOf, OUTPUTS, randomHost, rng, runChunked, runRowwise, type PShape } from './prefill-harness.js';

const SHAPES: readonly PShape[] = [
  { name: 'r1 dk16 dv16', hk: 1, hv: 1, dk: 16, dv: 16, K: 4, maxK: 4, maxSeqs: 4 },
  { name: 'r2 dk16 dv24', hk: 2, hv: 4, dk: 16, dv: 24, K: 4, maxK: 4, maxSeqs: 4 },
  { name: 'r4 dk32 dv16 K3', hk: 1, hv: 4, dk: 32, dv: 16, K: 3, maxK: 3, maxSeqs: 4 },
  { name: 'r3 dk6 dv5', hk: 2, hv: 6, dk: 6, dv: 5, K: 4, maxK: 4, maxSeqs: 4 },
];

const EXACT_TOL = 1e-4;
const FAST_TOL = 2e-2;

const worst = { exact: 0, fast: 0 };

describe('chunked prefill CPU twins vs the row-by-row reference', () => {
  let seed = 1000;
  afterAll(() => console.log(`chunked prefill CPU twins: worst rel L2 vs the row-by-row reference: exact ${worst.exact.toExponential(2)}, fast ${worst.fast.toExponential(2)}`));
  for (const s of SHAPES) {
    const cases = [
      { name: '1 row, fresh', seqs: [{ rows: 1, len: 0 }] },
      { name: '63 / 64 / 65 rows, with history', seqs: [{ rows: 63, len: 5 }, { rows: 64, len: 0 }, { rows: 65, len: 2 }] },
      { name: '130 rows + padding + 7 rows, carried', seqs: [{ rows: 130, len: 9, pending: 3 }, { rows: -4, len: 0 }, { rows: 7, len: 1, pending: 1 }], carried: true },
      { name: 'pending rows only (0 new rows), carried', seqs: [{ rows: 0, len: 6, pending: 2 }, { rows: 3, len: 2, pending: 2 }], carried: true },
    ];
    for (const c of cases) {
      for (const exact of [true, false]) {
        // pieces of one chunk: the pipelined prefill's launches (prefillPlan pieceChunks), each scan
        // from the state the one before wrote.
        for (const [clusters, pieceChunks] of [[true, 0], [false, 0], [false, 1]] as const) {
          it(`${s.name} | ${c.name} | ${exact ? 'exact' : 'fast'}${clusters ? ', fused norm' : ''}${pieceChunks ? ', pieces of 1 chunk' : ''}`, () => {
            const R = rng(seed++);
            const layout = layoutOf(s, R, c.seqs);
            const host = randomHost(s, layout, R);
            const carried = c.carried === true;
            const cpu = new CpuBackend({ memoryLimit: 2 ** 30 });
            try {
              const ref = runRowwise(cpu, chunkKernel as never, s, host, carried);
              const got = runChunked(cpu, prefillKernels, s, host, carried, { exact, clusters, pieceChunks });
              for (const name of OUTPUTS) {
                const d = diff(got[name], ref[name]);
                expect(d.nanMismatch, `${name}: written on one side only`).toBe(0);
                worst[exact ? 'exact' : 'fast'] = Math.max(worst[exact ? 'exact' : 'fast'], d.rel);
                expect(d.rel, `${name} rel`).toBeLessThanOrEqual(exact ? EXACT_TOL : FAST_TOL);
              }
            } finally {
              cpu.dispose();
            }
          });
        }
      }
    }
  }
});

// Regression: the GPU suite's 'r2 dk64 dv192' shape had maxSeqs 3 and its 4-sequence ragged case
// gave the 4th position slot `undefined` (0 in the Int32Array), the slot of an earlier position:
// two positions of one step on one slot race on the GPU (state and ring) while the CPU reference
// runs them in order, y off by ~0.08 on every seed. layoutOf now refuses a batch it has no slots for.
describe('layoutOf (test harness)', () => {
  const s: PShape = { name: 'dv192 slots', hk: 1, hv: 2, dk: 64, dv: 192, K: 4, maxK: 4, maxSeqs: 3 };
  const ragged = [{ rows: 70, len: 3 }, { rows: 5, len: 0 }, { rows: 129, len: 41 }, { rows: 1, len: 1 }];
  it('refuses more sequences than the shape has slots', () => {
    expect(() => layoutOf(s, rng(20457698), ragged)).toThrow(/maxSeqs 3/);
  });
  it('gives every real position a slot of its own (padding: −1)', () => {
    for (let seed = 0; seed < 50; seed++) {
      const L = layoutOf({ ...s, maxSeqs: 4 }, rng(seed), [...ragged.slice(0, 2), { rows: -3, len: 0 }, ...ragged.slice(2)]);
      const real = L.slots.filter((x) => x >= 0);
      expect(real).toHaveLength(4);
      expect(new Set(real).size).toBe(4);
      expect(real.every((x) => Number.isInteger(x) && x < 4)).toBe(true);
      expect(L.slots[2]).toBe(-1);
    }
  });
});
