import { Worker } from 'node:worker_threads';
import { InvalidArgumentError, bf16BitsToF32, f32ToBf16Bits, type CommunicatorId } from '@metrale/core';
import { describe, expect, it } from 'vitest';
import { CpuBackend } from '../src/index.js';

interface RankResult {
  readonly ok: boolean;
  readonly out?: Record<string, Uint8Array | number>;
  readonly name?: string;
  readonly message?: string;
}

const script = new URL('./support/rank-thread.mjs', import.meta.url);

/** Runs `scenario` on `size` ranks, one worker thread each, and returns each rank's message. */
async function runRanks(id: CommunicatorId, scenario: string, count: number, dtype: string, inputs: ArrayBufferView[]): Promise<RankResult[]> {
  return Promise.all(inputs.map((_, rank) => new Promise<RankResult>((resolve, reject) => {
    const w = new Worker(script, { workerData: { id, rank, scenario, count, dtype, inputs } });
    w.once('message', (m: RankResult) => {
      resolve(m);
      void w.terminate();
    });
    w.once('error', reject);
  })));
}

const f32 = (b: Uint8Array | number | undefined) => new Float32Array((b as Uint8Array).slice().buffer);
const u16 = (b: Uint8Array | number | undefined) => new Uint16Array((b as Uint8Array).slice().buffer);

function rankInputs(size: number, count: number): Float32Array[] {
  return Array.from({ length: size }, (_, r) => Float32Array.from({ length: count }, (_, i) => Math.fround(Math.sin(1 + i * 0.37 + r * 1.91) * (r + 1) * 1e3 + 0.1 * i)));
}

/** Σ over ranks in rank order, in f32: the sum the communicator must give. */
function rankOrderSum(inputs: readonly Float32Array[], i: number): number {
  let acc = inputs[0]![i]!;
  for (let r = 1; r < inputs.length; r++) acc = Math.fround(acc + inputs[r]![i]!);
  return acc;
}

describe('cpu communicator: ranks on threads, meeting in shared memory', () => {
  it.each([2, 3, 4])('%i ranks: all-reduce (and in place), all-gather, reduce-scatter, all-to-all, in rounds', async (size) => {
    const gpu = new CpuBackend();
    const count = 12 * size;
    // 40-byte slots: every collective takes several rounds.
    const id = gpu.createCommunicatorId(size, { slotBytes: 40 });
    gpu.dispose();
    const inputs = rankInputs(size, count);
    const results = await runRanks(id, 'ops', count, 'f32', inputs);
    const part = count / size;
    for (const [rank, res] of results.entries()) {
      expect(res, res.message).toMatchObject({ ok: true });
      const o = res.out!;
      const sum = Float32Array.from({ length: count }, (_, i) => rankOrderSum(inputs, i));
      expect(f32(o.allReduce)).toEqual(sum);
      expect(f32(o.inPlace)).toEqual(sum);
      const gathered = new Float32Array(size * count);
      inputs.forEach((x, r) => gathered.set(x, r * count));
      expect(f32(o.allGather)).toEqual(gathered);
      expect(f32(o.reduceScatter)).toEqual(sum.slice(rank * part, (rank + 1) * part));
      const swapped = new Float32Array(count);
      inputs.forEach((x, r) => swapped.set(x.subarray(rank * part, (rank + 1) * part), r * part));
      expect(f32(o.allToAll)).toEqual(swapped);
    }
  });

  it('sums bf16 in f32 in rank order and rounds once', async () => {
    const gpu = new CpuBackend();
    const id = gpu.createCommunicatorId(3);
    gpu.dispose();
    const count = 63;
    const values = rankInputs(3, count).map((x) => Float32Array.from(x, (v) => bf16BitsToF32(f32ToBf16Bits(v / 997))));
    const inputs = values.map((x) => Uint16Array.from(x, (v) => f32ToBf16Bits(v)));
    const results = await runRanks(id, 'ops', count, 'bf16', inputs);
    const expected = Uint16Array.from({ length: count }, (_, i) => f32ToBf16Bits(rankOrderSum(values, i)));
    for (const res of results) {
      expect(res, res.message).toMatchObject({ ok: true });
      expect(u16(res.out!.allReduce)).toEqual(expected);
    }
  });

  it('is recorded by a capture and runs at every replay, with the memory of that moment', async () => {
    const gpu = new CpuBackend();
    const id = gpu.createCommunicatorId(2);
    gpu.dispose();
    const count = 16;
    const inputs = rankInputs(2, count);
    const results = await runRanks(id, 'graph', count, 'f32', inputs);
    const sum = Float32Array.from({ length: count }, (_, i) => rankOrderSum(inputs, i));
    for (const res of results) {
      expect(res, res.message).toMatchObject({ ok: true });
      expect(res.out).toMatchObject({ nodes: 1, afterCapture: 0, collectivesRun: 2 });
      expect(f32(res.out!.first)).toEqual(sum);
      expect(f32(res.out!.second)).toEqual(sum.map((x) => 2 * x));
    }
  });

  it('a rank that aborts releases the others with its reason; a rank that never comes times them out', async () => {
    const gpu = new CpuBackend();
    const aborted = await runRanks(gpu.createCommunicatorId(3), 'abort', 8, 'f32', rankInputs(3, 8));
    expect(aborted[1]).toMatchObject({ ok: true });
    for (const r of [0, 2]) {
      expect(aborted[r]).toMatchObject({ ok: false, name: 'DeviceError' });
      expect(aborted[r]!.message).toMatch(/aborted: rank 1: its step failed/);
    }
    const absent = await runRanks(gpu.createCommunicatorId(2, { timeoutMs: 300 }), 'absent', 8, 'f32', rankInputs(2, 8));
    expect(absent[0]).toMatchObject({ ok: false, name: 'DeviceError' });
    expect(absent[0]!.message).toMatch(/rank 0 waited 300 ms at allReduce/);
    gpu.dispose();
  });

  it('refuses bad ids, ranks and arguments by name', () => {
    const gpu = new CpuBackend();
    const id = gpu.createCommunicatorId(2);
    expect(() => gpu.joinCommunicator({ backend: 'cuda', size: 2, payload: {} }, 0)).toThrow(/made by the cuda backend/);
    expect(() => gpu.joinCommunicator(id, 2)).toThrow(/rank must be an integer in 0\.\.1, got 2/);
    const comm = gpu.joinCommunicator(id, 0);
    expect(() => gpu.joinCommunicator(id, 0)).toThrow(/rank 0 has already joined/);
    const small = gpu.alloc(16);
    expect(() => comm.allGather({ send: small, recv: small, count: 4, dtype: 'f32', stream: gpu.defaultStream })).toThrow(/allGather \(rank 0 of 2\) \(recv\)/);
    expect(() => comm.allReduce({ send: small, recv: small, count: 4, dtype: 'i32' as never, stream: gpu.defaultStream })).toThrow(InvalidArgumentError);
    expect(() => gpu.createCommunicatorId(0)).toThrow(/size must be a positive integer/);
    gpu.dispose();
  });
});
