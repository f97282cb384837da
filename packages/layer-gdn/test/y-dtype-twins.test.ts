// The CPU twins of every kernel that writes y, with y in bf16 and f16 (yDtype 1, 2): each element
// is the f32 run's value rounded once to nearest even (the kernels compute y in f32 and round where
// they store it, kernels/gdn-step.cuh store_y), and everything else they write is the f32 run's,
// bit for bit. The f32 twins themselves are checked against float64 references elsewhere
// (reference.test.ts, decode-twins, verify-twins, prefill.test.ts); the GPU suite checks the CUDA
// kernels against these twins (test/gpu/gdn-rows-dtype.test.ts).
import { CpuBackend } from '@metrale/cpu-backend';
import { f32ToBf16Bits, f32ToF16Bits, InvalidArgumentError, SeededRandom, type DevicePtr, type GpuBackend } from '@metrale/core';
import { afterEach, describe, expect, it } from 'vitest';
import {
  NO_GATE_ROWS, decodePrepStride, launchTwoKernelDecode, launchTwoKernelVerify, recurrentVariantKernels, twoKernelDecodeKernels, twoKernelVerifyKernels, verifyPrepLayout,
} from '../src/index.js';
import { prefillKernels } from '../src/gdn-prefill-kernels.js';
import { layoutOf, randomHost, rng, runChunked, type PShape } from './prefill-harness.js';
import { projectionRows, slotBuffers } from './twin-buffers.js';

const EPS = 1e-6;
const MAX_SEQS = 5;
const S = { hk: 2, hv: 4, dk: 6, dv: 5, convK: 4, maxK: 4 };
type Shape = typeof S;

/** The 16-bit word `code` stores for an f32 value. */
export function yWord(code: 1 | 2, v: number): number {
  return code === 1 ? f32ToBf16Bits(v) : f32ToF16Bits(v);
}

/** Indices where the 16-bit y is not the f32 y rounded once (an element left unwritten, NaN, must be left on both sides: 0xFFFF). */
function mismatches(y32: Float32Array, y16: Uint16Array, code: 1 | 2): number[] {
  const bad: number[] = [];
  for (let i = 0; i < y32.length; i++) if (y16[i] !== (Number.isNaN(y32[i]!) ? 0xffff : yWord(code, y32[i]!))) bad.push(i);
  return bad;
}

type Launch =
  | { kind: 'recurrent'; mode: 0 | 1; k: number; carried: boolean }
  | { kind: 'decode2'; carried: boolean }
  | { kind: 'verify2'; k: number; carried: boolean };

const LAUNCHES: Record<string, Launch> = {
  'gdn.recurrent decode': { kind: 'recurrent', mode: 0, k: 1, carried: false },
  'gdn.recurrent commit of 3 rows, carried': { kind: 'recurrent', mode: 0, k: 3, carried: true },
  'gdn.recurrent verify k = 3': { kind: 'recurrent', mode: 1, k: 3, carried: false },
  'gdn.recurrent verify k = 4, carried': { kind: 'recurrent', mode: 1, k: 4, carried: true },
  'two-kernel decode': { kind: 'decode2', carried: false },
  'two-kernel decode, carried': { kind: 'decode2', carried: true },
  'two-kernel verify k = 3': { kind: 'verify2', k: 3, carried: false },
  'two-kernel verify k = 4, carried': { kind: 'verify2', k: 4, carried: true },
};

const OUTPUTS = ['state', 'convRing', 'stash', 'convStash', 'prep'] as const;

/** Runs one step's launch on a fresh CPU backend with y in `code`; y's words (f32 or 16-bit) and the other outputs' bytes. */
function runStep(gpu: GpuBackend, l: Launch, code: 0 | 1 | 2, seed: number) {
  const rnd = new SeededRandom(seed);
  const slots = [3, -1, 0, 4, 1];
  const seqLens = [0, 1, 5, 9, 30];
  const rowsPer = l.kind === 'decode2' ? 1 : l.k;
  const batch = slots.length;
  const rows = batch * rowsPer;
  const host = {
    qkvz: projectionRows(S, rows, rnd),
    slots: Int32Array.from(slots),
    rowStarts: Int32Array.from({ length: batch + 1 }, (_, p) => p * rowsPer),
    seqLens: Int32Array.from(seqLens),
    ...slotBuffers(S, MAX_SEQS, l.carried ? [2, 3, 1, 0, S.maxK] : undefined, rnd),
    prep: new Float32Array(Math.max(batch * S.hv * decodePrepStride(S), verifyPrepLayout(S, batch).totalFloats)),
  };
  const d = {} as Record<keyof typeof host, DevicePtr>;
  for (const [name, a] of Object.entries(host) as [keyof typeof host, Float32Array | Int32Array | Uint32Array][]) {
    d[name] = gpu.alloc(Math.max(16, a.byteLength));
    gpu.upload(d[name], a);
  }
  const yElems = rows * S.hv * S.dv;
  const yBytes = (code === 0 ? 4 : 2) * yElems;
  const y = gpu.alloc(yBytes);
  gpu.upload(y, new Uint8Array(yBytes).fill(0xff));  // NaN in f32, bf16 and f16
  const stream = gpu.defaultStream;
  const common = {
    qkvz: d.qkvz, y, slots: d.slots, rowStarts: d.rowStarts, seqLens: d.seqLens, state: d.state, convRing: d.convRing,
    convWeight: d.convWeight, aLog: d.aLog, dtBias: d.dtBias, normWeight: d.normWeight,
    stash: l.carried || l.kind !== 'recurrent' || l.mode === 1 ? d.stash : 0n, convStash: l.carried ? d.convStash : 0n, pending: l.carried ? d.pending : 0n,
    batch, ...S, eps: EPS, yDtype: code,
  };
  if (l.kind === 'recurrent') gpu.launch(recurrentVariantKernels.general, { grid: [batch, S.hv], block: S.dv, stream }, { ...common, mode: l.mode, k: l.k });
  else if (l.kind === 'decode2') launchTwoKernelDecode(gpu, twoKernelDecodeKernels, S, stream, { ...common, prep: d.prep, ...NO_GATE_ROWS });
  else launchTwoKernelVerify(gpu, twoKernelVerifyKernels, S, stream, { ...common, prep: d.prep, k: l.k });
  gpu.synchronize();
  const bytes = (p: DevicePtr, n: number) => gpu.download(p, n).slice();
  return {
    y: bytes(y, yBytes),
    outputs: Object.fromEntries(OUTPUTS.map((n) => [n, bytes(d[n], host[n].byteLength)])) as Record<(typeof OUTPUTS)[number], Uint8Array>,
  };
}

describe('the twins with y in a 16-bit row type store the f32 result rounded once', () => {
  let gpu: CpuBackend | undefined;
  afterEach(() => gpu?.dispose());
  const fresh = () => {
    gpu?.dispose();
    gpu = new CpuBackend();
    return gpu;
  };

  for (const [name, l] of Object.entries(LAUNCHES)) {
    for (const code of [1, 2] as const) {
      it(`${name}: y in ${code === 1 ? 'bf16' : 'f16'}`, () => {
        const ref = runStep(fresh(), l, 0, 41);
        const got = runStep(fresh(), l, code, 41);
        const y32 = new Float32Array(ref.y.buffer);
        const y16 = new Uint16Array(got.y.buffer);
        expect(y32.some((v) => !Number.isNaN(v)), 'y written').toBe(true);
        expect(mismatches(y32, y16, code)).toEqual([]);
        for (const n of OUTPUTS) expect(Buffer.from(got.outputs[n]).equals(Buffer.from(ref.outputs[n])), `${n} unchanged`).toBe(true);
      });
    }
  }

  it('a yDtype that is not a row type is refused', () => {
    expect(() => runStep(fresh(), LAUNCHES['gdn.recurrent decode']!, 3 as 1, 1)).toThrow(InvalidArgumentError);
  });
});

describe('the chunked prefill with y in a 16-bit row type', () => {
  const shapes: PShape[] = [
    { name: 'r2 dk16 dv24', hk: 2, hv: 4, dk: 16, dv: 24, K: 4, maxK: 4, maxSeqs: 4 },
    { name: 'r3 dk6 dv5', hk: 2, hv: 6, dk: 6, dv: 5, K: 4, maxK: 4, maxSeqs: 4 },
  ];
  const seqs = [{ rows: 70, len: 9, pending: 3 }, { rows: -4, len: 0 }, { rows: 7, len: 1, pending: 1 }];
  let seed = 500;
  for (const s of shapes) {
    for (const exact of [true, false]) {
      // Fused (the scan stores y), unfused (the norm kernel reads o, writes y) and in pieces.
      for (const [clusters, pieceChunks] of [[true, 0], [false, 0], [false, 1]] as const) {
        for (const code of [1, 2] as const) {
          it(`${s.name} | ${exact ? 'exact' : 'fast'}${clusters ? ', fused norm' : ', norm kernel'}${pieceChunks ? ', pieces of 1 chunk' : ''} | y in ${code === 1 ? 'bf16' : 'f16'}`, () => {
            const R = rng(seed++);
            const host = randomHost(s, layoutOf(s, R, seqs), R);
            const cpu = new CpuBackend({ memoryLimit: 2 ** 30 });
            try {
              const ref = runChunked(cpu, prefillKernels, s, host, true, { exact, clusters, pieceChunks });
              const got = runChunked(cpu, prefillKernels, s, host, true, { exact, clusters, pieceChunks, yDtype: code });
              expect(ref.y.some((v) => !Number.isNaN(v)), 'y written').toBe(true);
              expect(mismatches(ref.y, got.yBits!, code)).toEqual([]);
              for (const n of ['state', 'convRing'] as const) expect(Array.from(got[n])).toEqual(Array.from(ref[n]));
            } finally {
              cpu.dispose();
            }
          });
        }
      }
    }
  }
});
