// NCCL on real GPUs: a one-rank group on any GPU (ncclCommInitRank, each collective, a captured
// all-reduce replayed), and, where there are two GPUs (nvidia-h200-x2), two ranks on their own
// threads and devices whose results must be the exact f32 sums and parts.
import { Worker } from 'node:worker_threads';
import { expect, it } from 'vitest';
import { CudaBackend } from '../../src/index.js';
import { asF32, cuda, describeGpu, randomF32 } from './gpu-setup.js';

const devices = cuda.available ? cuda.devices.length : 0;

describeGpu('NCCL collectives', () => {
  it('a group of one: every collective copies, and a captured all-reduce runs at each replay', () => {
    const g = CudaBackend.create();
    try {
      const comm = g.joinCommunicator(g.createCommunicatorId(1), 0);
      const n = 1024;
      const x = randomF32(n);
      const send = g.alloc(4 * n), recv = g.alloc(4 * n);
      g.upload(send, x);
      for (const op of ['allReduce', 'allGather', 'reduceScatter', 'allToAll'] as const) {
        g.memsetAsync(recv, 0, 4 * n);
        comm[op]({ send, recv, count: n, dtype: 'f32', stream: g.defaultStream });
        expect(asF32(g.download(recv, 4 * n)), op).toEqual(x);
      }
      const s = g.createStream();
      g.beginCapture(s);
      comm.allReduce({ send, recv, count: n, dtype: 'f32', stream: s });
      const graph = g.endCapture(s);
      const exec = g.instantiate(graph);
      const y = randomF32(n);
      g.upload(send, y);
      g.launchGraph(exec, s);
      g.synchronize(s);
      expect(asF32(g.download(recv, 4 * n))).toEqual(y);
      comm.dispose();
    } finally {
      g.dispose();
    }
  });

  if (devices >= 2) {
    it('two ranks on two GPUs: exact f32 sums, gathers, scatters and swaps, eager and replayed', async () => {
      const g = CudaBackend.create();
      const id = g.createCommunicatorId(2);
      g.dispose();
      const n = 4096;
      const inputs = [randomF32(n), randomF32(n)];
      const results = await Promise.all([0, 1].map((rank) => new Promise<{ ok: boolean; message?: string; out: Record<string, number[]> }>((resolve, reject) => {
        const w = new Worker(new URL('./support/nccl-rank.mjs', import.meta.url), { workerData: { id, rank, inputs } });
        w.once('message', resolve);
        w.once('error', reject);
      })));
      const sum = inputs[0]!.map((v, i) => Math.fround(v + inputs[1]![i]!));
      results.forEach((r, rank) => {
        expect(r.ok, r.message).toBe(true);
        expect(Float32Array.from(r.out.allReduce!)).toEqual(sum);
        expect(Float32Array.from(r.out.allGather!)).toEqual(Float32Array.from([...inputs[0]!, ...inputs[1]!]));
        expect(Float32Array.from(r.out.reduceScatter!)).toEqual(sum.slice(rank * n / 2, (rank + 1) * n / 2));
        expect(Float32Array.from(r.out.allToAll!)).toEqual(Float32Array.from([...inputs[0]!.slice(rank * n / 2, (rank + 1) * n / 2), ...inputs[1]!.slice(rank * n / 2, (rank + 1) * n / 2)]));
        expect(Float32Array.from(r.out.replayed!)).toEqual(sum.map((v) => 2 * v));
      });
    });
  } else if (cuda.available) {
    console.warn(`[cuda-backend gpu] the two-rank NCCL test needs two GPUs (this machine has ${devices}); run the lane on nvidia-h200-x2`);
  }
});
