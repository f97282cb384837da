// A stand-in for engine-worker.js that speaks its protocol (src/engine/protocol.ts) without a
// model or a device, for in-process server tests: every running request gets `tokensPerStep`
// tokens (ids 100 … 999, cycling) per step, a step every `stepMs` (0: as fast as the loop turns).
// With `faultAfterSteps`, the engine fails after that many steps as a device fault fails it.
import { parentPort, workerData } from 'node:worker_threads';

const port = parentPort;
const { setup, faultAfterSteps } = workerData;
const fake = setup.fake ?? {};
const tokensPerStep = fake.tokensPerStep ?? 1;
const stepMs = fake.stepMs ?? 0;
const maxBatch = setup.maxBatch ?? 8;
/** id → { left, next } */
const running = new Map();
const waiting = [];
let steps = 0;
let scheduled = false;

port.postMessage({
  t: 'model',
  info: {
    dir: '/nonexistent/fake-model', embedded: false, created: false, createMs: 0, name: 'fake-model', modelType: 'fake', vocabSize: 1000,
    eosTokenIds: [], maxModelLen: 10_000_000, weightBytes: 0, precision: {}, dtype: 'f32', samplingDefaults: {},
  },
});
port.postMessage({ t: 'ready', backend: 'fake', device: 'none', loadMs: 0, maxBatch, deviceWeightBytes: 0 });

port.on('message', (m) => {
  if (m.t === 'add') waiting.push(m.req);
  else if (m.t === 'cancel') {
    running.delete(m.id);
    const w = waiting.findIndex((r) => r.id === m.id);
    if (w >= 0) waiting.splice(w, 1);
  } else if (m.t === 'shutdown') {
    port.postMessage({ t: 'closed' });
    port.close();
    return;
  }
  schedule();
});

function schedule() {
  if (scheduled || (running.size === 0 && waiting.length === 0)) return;
  scheduled = true;
  if (stepMs > 0) setTimeout(step, stepMs);
  else setImmediate(step);
}

function step() {
  scheduled = false;
  while (waiting.length > 0 && running.size < maxBatch) {
    const r = waiting.shift();
    running.set(r.id, { left: r.maxTokens, next: 100 });
  }
  const events = [];
  for (const [id, r] of running) {
    const tokens = [];
    for (let i = 0; i < Math.min(tokensPerStep, r.left); i++) {
      tokens.push(r.next);
      r.next = r.next === 999 ? 100 : r.next + 1;
    }
    r.left -= tokens.length;
    const ev = { id, tokens };
    if (r.left === 0) {
      ev.finish = 'length';
      running.delete(id);
    }
    events.push(ev);
  }
  if (faultAfterSteps !== undefined && ++steps >= faultAfterSteps) {
    for (const id of running.keys()) events.push({ id, tokens: [], finish: 'error', error: 'simulated device fault' });
    port.postMessage({ t: 'step', events, running: 0, waiting: 0 });
    port.postMessage({ t: 'failed', message: 'the device is unusable after a failed step: simulated device fault' });
    port.close();
    return;
  }
  port.postMessage({
    t: 'step', events, running: running.size, waiting: waiting.length,
    stats: { prefillRows: 0, prefillSeqs: 0, decodeSeqs: events.length, k: 1, drafted: 0, accepted: 0, kvUsage: 0, prefixQueries: 0, prefixHits: 0, preemptions: 0, ms: 0 },
  });
  schedule();
}
