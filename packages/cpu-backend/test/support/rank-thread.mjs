// One rank of a communicator test: a CPU backend on its own thread (the package's built dist, as
// an application's worker loads it), running the scenario the test names and posting its results.
import { parentPort, workerData } from 'node:worker_threads';
import { CpuBackend } from '../../dist/index.js';

const { id, rank, scenario, count, dtype, inputs } = workerData;
const gpu = new CpuBackend();
const bytes = (dt) => (dt === 'f32' ? 4 : 2);

function upload(values) {
  const ptr = gpu.alloc(Math.max(1, values.byteLength));
  gpu.upload(ptr, values);
  return ptr;
}

function run() {
  const comm = gpu.joinCommunicator(id, rank);
  const size = comm.size;
  const eb = bytes(dtype);
  const send = upload(inputs[rank]);
  const out = {};
  if (scenario === 'ops') {
    const reduced = gpu.alloc(count * eb);
    comm.allReduce({ send, recv: reduced, count, dtype, stream: gpu.defaultStream });
    out.allReduce = gpu.download(reduced, count * eb);
    // In place.
    const inPlace = upload(inputs[rank]);
    comm.allReduce({ send: inPlace, recv: inPlace, count, dtype, stream: gpu.defaultStream });
    out.inPlace = gpu.download(inPlace, count * eb);
    const gathered = gpu.alloc(size * count * eb);
    comm.allGather({ send, recv: gathered, count, dtype, stream: gpu.defaultStream });
    out.allGather = gpu.download(gathered, size * count * eb);
    const part = count / size;
    const scattered = gpu.alloc(part * eb);
    comm.reduceScatter({ send, recv: scattered, count: part, dtype, stream: gpu.defaultStream });
    out.reduceScatter = gpu.download(scattered, part * eb);
    const swapped = gpu.alloc(count * eb);
    comm.allToAll({ send, recv: swapped, count: part, dtype, stream: gpu.defaultStream });
    out.allToAll = gpu.download(swapped, count * eb);
  } else if (scenario === 'graph') {
    // Captured once, replayed twice with new inputs: the collective runs at each replay.
    const stream = gpu.createStream();
    const recv = gpu.alloc(count * eb);
    gpu.beginCapture(stream);
    comm.allReduce({ send, recv, count, dtype, stream });
    const graph = gpu.endCapture(stream);
    out.nodes = graph.nodes;
    out.afterCapture = gpu.stats().collectivesRun;
    const exec = gpu.instantiate(graph);
    gpu.launchGraph(exec, stream);
    out.first = gpu.download(recv, count * eb);
    const doubled = new Float32Array(inputs[rank].buffer.slice(0)).map((x) => 2 * x);
    gpu.upload(send, doubled);
    gpu.launchGraph(exec, stream);
    out.second = gpu.download(recv, count * eb);
    out.collectivesRun = gpu.stats().collectivesRun;
  } else if (scenario === 'abort') {
    // Rank 1 fails before the collective; the others must not wait for it.
    if (rank === 1) comm.abort('its step failed');
    else comm.allReduce({ send, recv: send, count, dtype, stream: gpu.defaultStream });
  } else if (scenario === 'absent') {
    // Rank 1 never comes: the others time out.
    if (rank !== 1) comm.allReduce({ send, recv: send, count, dtype, stream: gpu.defaultStream });
  }
  return out;
}

try {
  parentPort.postMessage({ ok: true, out: run() });
} catch (error) {
  parentPort.postMessage({ ok: false, name: error.name, message: error.message });
} finally {
  gpu.dispose();
}
