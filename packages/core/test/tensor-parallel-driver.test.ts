// TensorParallelDriver: rank 0 here (core's sources), ranks 1…n−1 in worker threads (core's dist),
// each with a CPU backend and a rank-sum layer that all-reduces. Every driver call must reach every
// rank, results must be the group's (rank 0's, after the collective), a failure every rank has
// alike before any device work must leave the group usable, and a failure of one rank part-way
// must fail the call (not hang) and the group after it.
import { MessageChannel, Worker } from 'node:worker_threads';
import { CpuBackend } from '@metrale/cpu-backend';
import { afterEach, describe, expect, it } from 'vitest';
import * as core from '../src/index.js';
import { DeviceError, InvalidArgumentError, StepDriver, TensorParallelDriver } from '../src/index.js';
// @ts-expect-error: a plain ES module shared with the follower threads
import { makeRankSumLayer, RANK_SUM_LIMITS } from './support/rank-sum-layer.mjs';

const followerScript = new URL('./support/follower-thread.mjs', import.meta.url);

interface Group {
  readonly driver: TensorParallelDriver;
  readonly workers: Worker[];
  readonly gpu: CpuBackend;
}

const open: Group[] = [];
afterEach(async () => {
  for (const g of open.splice(0)) {
    await Promise.all(g.workers.map((w) => w.terminate()));
    g.gpu.dispose();
  }
});

async function startGroup(size: number, fail?: { failRank: number; failToken: number }): Promise<Group> {
  const gpu = new CpuBackend();
  const commId = gpu.createCommunicatorId(size, { timeoutMs: 20_000 });
  const workers: Worker[] = [];
  const links = [];
  for (let rank = 1; rank < size; rank++) {
    const { port1, port2 } = new MessageChannel();
    const signal = new Int32Array(new SharedArrayBuffer(4));
    const w = new Worker(followerScript, { workerData: { commId, rank, port: port2, signal, fail }, transferList: [port2] });
    workers.push(w);
    links.push({ port: port1, signal });
    await new Promise((resolve, reject) => {
      w.once('message', resolve);
      w.once('error', reject);
    });
  }
  const comm = gpu.joinCommunicator(commId, 0);
  const local = new StepDriver({ gpu, layers: [makeRankSumLayer(core, gpu, comm, fail)], limits: RANK_SUM_LIMITS });
  const group = { driver: new TensorParallelDriver({ local, comm, followers: links, replyTimeoutMs: 20_000 }), workers, gpu };
  open.push(group);
  return group;
}

describe('TensorParallelDriver', () => {
  it.each([2, 3])('%i ranks: prefill, decode (captured, then replayed), verify and accept give the group’s sums', async (size) => {
    const { driver } = await startGroup(size);
    const sum = (size * (size + 1)) / 2;
    const a = driver.open();
    const b = driver.open();
    const prefill = driver.readOutputF32(driver.prefill({ seqs: [a, b], lengths: [3, 2], tokens: Int32Array.from([1, 2, 3, 4, 5]) }));
    expect(Array.from(prefill)).toEqual([1, 2, 3, 4, 5].map((t) => t * sum));
    for (const [i, path] of [[10, 'capture'], [20, 'replay']] as const) {
      const r = driver.decode({ seqs: [a, b], tokens: Int32Array.from([i, i + 1]) });
      expect(r.path).toBe(path);
      expect(Array.from(driver.readOutputF32(r))).toEqual([i * sum, (i + 1) * sum]);
    }
    const v = driver.verify({ seqs: [a], k: 3, tokens: Int32Array.from([7, 8, 9]) });
    expect(Array.from(driver.readOutputF32(v))).toEqual([7 * sum, 8 * sum, 9 * sum]);
    driver.accept([2]);
    expect(a.length).toBe(3 + 2 + 2);
    driver.close(a);
    const c = driver.open();
    expect(c.slot).toBe(a.slot);
    driver.dispose();
  });

  it('a failure every rank has before any device work is rethrown and the group goes on', async () => {
    const { driver } = await startGroup(2);
    const seqs = Array.from({ length: 4 }, () => driver.open());
    // A fifth sequence: every rank refuses it alike.
    expect(() => driver.open()).toThrow(InvalidArgumentError);
    expect(() => driver.decode({ seqs: [seqs[0]!, seqs[0]!], tokens: Int32Array.from([1, 2]) })).toThrow(/listed twice/);
    const r = driver.decode({ seqs: [seqs[1]!], tokens: Int32Array.from([6]) });
    expect(Array.from(driver.readOutputF32(r))).toEqual([18]);
  });

  it('one rank failing part-way fails the call on rank 0 instead of hanging, and the group after it', async () => {
    const { driver } = await startGroup(3, { failRank: 2, failToken: 66 });
    const a = driver.open();
    driver.prefill({ seqs: [a], lengths: [1], tokens: Int32Array.from([1]) });
    const t0 = performance.now();
    let error: unknown;
    try {
      driver.decode({ seqs: [a], tokens: Int32Array.from([66]) });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(DeviceError);
    expect((error as Error).message).toMatch(/rank 2 cannot take token 66/);
    expect(performance.now() - t0).toBeLessThan(10_000);
    expect(() => driver.decode({ seqs: [a], tokens: Int32Array.from([1]) })).toThrow(/the group failed earlier.*restart the engine/);
  });
});
