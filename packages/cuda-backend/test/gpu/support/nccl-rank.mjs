// One rank of the GPU lane's NCCL group test, on its own thread and device (the package's dist):
// all-reduce eagerly and from a replayed graph, all-gather, reduce-scatter and all-to-all.
import { parentPort, workerData } from 'node:worker_threads';
import { CudaBackend } from '../../../dist/index.js';

const { id, rank, inputs } = workerData;
const g = CudaBackend.create({ device: rank });
const out = {};
try {
  const comm = g.joinCommunicator(id, rank);
  const x = inputs[rank];
  const n = x.length;
  const send = g.alloc(4 * n), recv = g.alloc(4 * n * comm.size);
  g.upload(send, x);
  const f32 = (count) => Array.from(new Float32Array(g.download(recv, 4 * count).buffer));
  comm.allReduce({ send, recv, count: n, dtype: 'f32', stream: g.defaultStream });
  out.allReduce = f32(n);
  comm.allGather({ send, recv, count: n, dtype: 'f32', stream: g.defaultStream });
  out.allGather = f32(n * comm.size);
  comm.reduceScatter({ send, recv, count: n / comm.size, dtype: 'f32', stream: g.defaultStream });
  out.reduceScatter = f32(n / comm.size);
  comm.allToAll({ send, recv, count: n / comm.size, dtype: 'f32', stream: g.defaultStream });
  out.allToAll = f32(n);
  const s = g.createStream();
  g.beginCapture(s);
  comm.allReduce({ send, recv, count: n, dtype: 'f32', stream: s });
  const exec = g.instantiate(g.endCapture(s));
  g.upload(send, x.map((v) => 2 * v));
  g.launchGraph(exec, s);
  g.synchronize(s);
  out.replayed = f32(n);
  comm.dispose();
  parentPort.postMessage({ ok: true, out });
} catch (error) {
  parentPort.postMessage({ ok: false, message: error.message });
} finally {
  g.dispose();
}
