// The engine loop, in a worker thread: it owns the device, the model and the engine loop. The HTTP
// thread sends requests and cancellations and gets tokens back (protocol.ts); between two steps
// the loop takes in every message that arrived, so a request joins, and a cancelled one leaves,
// at the next step. Grammars compile, and their matchers run, on grammar host threads
// (structured/grammar-pool.ts): a request whose grammar is not ready waits outside the loop while
// the others decode.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { parentPort, workerData } from 'node:worker_threads';
import type { GpuBackend, TokenConstraint } from '@metrale/core';
import { selectBackend } from '../backends/select-backend.js';
import { loadRegistry } from '../plugins/load-registry.js';
import { buildParallelEngine } from '../parallel/parallel-engine.js';
import { buildEngine, resolveModel, type Engine } from './build-engine.js';
import { GrammarPool } from '../structured/grammar-pool.js';
import type { GrammarSpec } from '../structured/grammar-spec.js';
import { deviceFault } from './device-fault.js';
import type { AddRequest, FromWorker, ToWorker, WireEvent, WorkerData } from './protocol.js';

const port = parentPort;
if (!port) throw new Error('engine-worker.js runs as a worker thread of `metrale serve`');
const data = workerData as WorkerData;

const inbox: ToWorker[] = [];
let wake: (() => void) | undefined;
port.on('message', (message: ToWorker) => {
  inbox.push(message);
  const w = wake;
  wake = undefined;
  w?.();
});

const post = (message: FromWorker): void => port.postMessage(message);
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

async function main(): Promise<void> {
  let gpu: GpuBackend | undefined;
  let engine: Engine;
  let grammars: GrammarPool | undefined;
  try {
    // Plugins are loaded here, where the model is built: --plugin ones too.
    const registry = await loadRegistry(data.setup.plugins);
    post({ t: 'plugins', loaded: { modelTypes: registry.modelTypes, layerTypes: registry.layerTypes, warnings: registry.warnings } });
    const { info, checkpoint } = resolveModel(data.setup, registry);
    post({ t: 'model', info });
    const tokenizerPath = join(info.dir, 'tokenizer.json');
    // Structured output masks tokens by their text: it needs the served tokenizer's vocabulary.
    if (existsSync(tokenizerPath)) grammars = new GrammarPool({ tokenizerPath, vocabSize: info.vocabSize, stopTokenIds: info.eosTokenIds });
    if (data.loadDelayMs > 0) await sleep(data.loadDelayMs);
    if (inbox.some((m) => m.t === 'shutdown')) {
      checkpoint.close();
      post({ t: 'closed' });
      return;
    }
    gpu = await selectBackend(data.setup.backend);
    const t0 = performance.now();
    let lastPost = 0;
    const onProgress = (loaded: number, total: number) => {
      const now = performance.now();
      if (loaded < total && now - lastPost < 100) return;
      lastPost = now;
      post({ t: 'progress', loaded, total });
    };
    engine = (data.setup.tensorParallelSize ?? 1) > 1
      ? await buildParallelEngine(data.setup, info, checkpoint, gpu, registry, onProgress)
      : buildEngine(data.setup, info, checkpoint, gpu, registry, onProgress);
    const loadMs = performance.now() - t0;
    // Every batch bucket's decode (and verify) graph now, so no request waits on a capture; not on the CPU
    // backend, whose captures cost nothing beside its steps (which would only delay the start).
    const capture = data.setup.graphs && gpu.kind !== 'cpu';
    const t1 = performance.now();
    if (capture) engine.loop.captureGraphs();
    const captureMs = capture ? performance.now() - t1 : undefined;
    const { kv } = engine;
    post({
      t: 'ready', backend: gpu.kind, device: gpu.device.name, loadMs, ...(captureMs !== undefined ? { captureMs } : {}), maxBatch: engine.limits.maxBatch,
      deviceWeightBytes: engine.deviceWeightBytes.total,
      kv: { pageSize: kv.pageSize, pages: kv.pages, tokens: kv.tokens, bytes: kv.bytes, snapshots: kv.snapshots, prefixCaching: kv.prefixCaching },
    });
  } catch (error) {
    try {
      gpu?.dispose();
    } catch {
      // Already failing: the first error is the one to report.
    }
    post({ t: 'failed', message: (error as Error).message ?? String(error), ...((error as Error).stack ? { stack: (error as Error).stack! } : {}) });
    // Nothing more to do: closing the port lets the thread exit.
    port!.close();
    return;
  }

  const { loop } = engine;
  let steps = 0;
  const noGrammars = 'structured output needs the model\'s tokenizer.json, and this checkpoint has none';
  const prepareGrammar = (key: number, spec: GrammarSpec): void => {
    if (!grammars) return post({ t: 'grammar', key, error: noGrammars });
    grammars.prepare(spec).then(
      () => post({ t: 'grammar', key }),
      (error: unknown) => post({ t: 'grammar', key, error: (error as Error).message ?? String(error) }),
    );
  };
  // Requests whose constraint is being opened (compiled first when it is not): they join the loop
  // once it is ready, unless cancelled meanwhile.
  const opening = new Set<number>();
  const ready: { req: AddRequest; constraint?: TokenConstraint; error?: Error }[] = [];
  const arrive = (item: (typeof ready)[number]): void => {
    if (!opening.delete(item.req.id)) return item.constraint?.release();
    ready.push(item);
    const w = wake;
    wake = undefined;
    w?.();
  };
  const add = (req: AddRequest, constraint: TokenConstraint | undefined, events: WireEvent[]): void => {
    try {
      loop.add({
        id: req.id, prompt: req.prompt, maxTokens: req.maxTokens, stopTokenIds: req.stopTokenIds,
        // The request's seed seeds its sampler (the loop draws a random one without).
        ...(req.sampling ? { sampling: req.seed !== undefined ? { ...req.sampling, seed: req.seed } : req.sampling } : {}),
        ...(constraint ? { constraint } : {}),
        ...(req.logprobs !== undefined ? { logprobs: req.logprobs } : {}),
        ...(req.promptLogprobs !== undefined ? { promptLogprobs: req.promptLogprobs } : {}),
      });
    } catch (error) {
      constraint?.release();
      events.push({ id: req.id, tokens: [], finish: 'error', error: (error as Error).message, rejected: true });
    }
  };
  for (;;) {
    const events: WireEvent[] = [];
    let changed = false;
    let stopping = false;
    for (const item of ready.splice(0)) {
      changed = true;
      if (item.error) events.push({ id: item.req.id, tokens: [], finish: 'error', error: item.error.message, rejected: true });
      else add(item.req, item.constraint, events);
    }
    while (inbox.length > 0) {
      const m = inbox.shift()!;
      changed = true;
      if (m.t === 'add') {
        const { req } = m;
        if (!req.grammar) add(req, undefined, events);
        else if (!grammars) events.push({ id: req.id, tokens: [], finish: 'error', error: noGrammars, rejected: true });
        else {
          // Compiled already (the HTTP thread prepared it): a matcher opens on its grammar's host.
          opening.add(req.id);
          grammars.constraint(req.grammar).then(
            (constraint) => arrive({ req, constraint }),
            (error: unknown) => arrive({ req, error: error instanceof Error ? error : new Error(String(error)) }),
          );
        }
      } else if (m.t === 'cancel') {
        if (!opening.delete(m.id)) loop.cancel(m.id);
      } else if (m.t === 'grammar') prepareGrammar(m.key, m.spec);
      else stopping = true;
    }
    if (stopping) {
      loop.cancelAll();
      opening.clear();
      await grammars?.close();
      await engine.dispose();
      gpu.dispose();
      post({ t: 'closed' });
      port!.close();
      return;
    }
    if (loop.idle) {
      if (changed) post({ t: 'step', events, running: 0, waiting: opening.size });
      if (inbox.length === 0 && ready.length === 0) await new Promise<void>((resolve) => (wake = resolve));
      continue;
    }
    let failed = false;
    try {
      const report = loop.step();
      // The next step's masks compute on the grammar hosts while its forward runs here.
      grammars?.prefetch();
      events.push(...report.events);
      failed = report.events.some((e) => e.finish === 'error');
      post({
        t: 'step', events, running: report.running, waiting: report.waiting + opening.size,
        stats: {
          prefillRows: report.prefillRows, prefillSeqs: report.prefillSeqs, decodeSeqs: report.decodeSeqs, k: report.k, drafted: report.drafted, accepted: report.accepted,
          kvUsage: report.kvUsage, prefixQueries: report.prefixQueries, prefixHits: report.prefixHits, preemptions: report.preemptions, ms: report.ms,
        },
      });
    } catch (error) {
      // Not a step failure the loop contained: end every request in flight, keep serving.
      const message = (error as Error).message ?? String(error);
      for (const id of loop.cancelAll()) events.push({ id, tokens: [], finish: 'error', error: message });
      post({ t: 'step', events, running: loop.running, waiting: loop.waiting + opening.size });
      failed = true;
    }
    if (data.faultAfterSteps !== undefined && ++steps === data.faultAfterSteps) gpu.dispose();
    // Serving on is right only when the device survived the failure; a poisoned one fails the engine.
    const fault = failed ? (engine.fault?.() ?? deviceFault(gpu)) : undefined;
    if (fault) {
      void grammars?.close();
      post({ t: 'failed', message: `the device is unusable after a failed step: ${fault.message}`, ...(fault.stack ? { stack: fault.stack } : {}) });
      loop.cancelAll();
      for (const free of [() => void Promise.resolve(engine.dispose()).catch(() => undefined), () => gpu!.dispose()]) {
        try {
          free();
        } catch {
          // A broken device refuses to free; the process exits soon.
        }
      }
      port!.close();
      return;
    }
    // Let the messages that arrived during the step in before the next one.
    await nextTurn();
  }
}

await main();
