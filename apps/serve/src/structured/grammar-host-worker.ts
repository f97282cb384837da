// A grammar host: one thread with its own xgrammar instance (the vocabulary, the compiled grammars,
// the matchers of the requests that use them). A compiled grammar cannot leave the WebAssembly
// instance that compiled it, so its matchers live here too, and the engine thread asks for their
// masks by message (grammar-host.ts). Messages are handled one at a time, in order: a matcher is
// opened only after a compile queued before it has finished, so a host that serves masks is never
// in the middle of a compile (the pool sends compiles only to hosts without matchers).
import { parentPort, workerData } from 'node:worker_threads';
import type { TokenConstraint } from '@metrale/core';
import { GrammarEngine } from './grammar-engine.js';
import {
  SLOT_ERROR_BYTES, SLOT_HEADER_WORDS, SLOT_SEQ, SLOT_STATUS, slotErrorBytes,
  type FromHost, type GrammarHostData, type MaskRequest, type ToHost,
} from './grammar-host-protocol.js';

const port = parentPort;
if (!port) throw new Error('grammar-host-worker.js runs as a worker thread of the engine');
const data = workerData as GrammarHostData;
const engine = new GrammarEngine(data);
const matchers = new Map<number, { constraint: TokenConstraint; slot: SharedArrayBuffer; words: Int32Array }>();
const encoder = new TextEncoder();
const post = (m: FromHost): void => port.postMessage(m);
const messageOf = (error: unknown): string => (error instanceof Error ? error.message : String(error));

function answer(req: MaskRequest): void {
  const m = matchers.get(req.id);
  if (!m) return;
  const { constraint, slot, words } = m;
  try {
    if (req.rollback > 0) constraint.rollback(req.rollback);
    for (const t of req.accept) {
      // The engine accepted it against this matcher's own mask: a refusal here is a bug, said as one.
      if (!constraint.accept(t)) throw new Error(`the grammar refused token ${t}, which its mask allowed`);
    }
    words.set(constraint.allowedTokens(), SLOT_HEADER_WORDS);
    Atomics.store(words, SLOT_STATUS, 0);
  } catch (error) {
    const bytes = encoder.encode(messageOf(error)).subarray(0, slotErrorBytes(slot, data.vocabSize).length);
    slotErrorBytes(slot, data.vocabSize).set(bytes);
    Atomics.store(words, SLOT_ERROR_BYTES, bytes.length);
    Atomics.store(words, SLOT_STATUS, 1);
  }
  Atomics.store(words, SLOT_SEQ, req.seq);
  Atomics.notify(words, SLOT_SEQ);
}

async function handle(m: ToHost): Promise<void> {
  switch (m.t) {
    case 'compile':
      try {
        await engine.prepare(m.spec);
        post({ t: 'compiled', key: m.key });
      } catch (error) {
        post({ t: 'compiled', key: m.key, error: messageOf(error) });
      }
      return;
    case 'open':
      // Compiling here could hold the masks of live matchers: the engine compiles it again first.
      if (!engine.isCompiled(m.spec)) return post({ t: 'opened', key: m.key, evicted: true });
      try {
        const constraint = await engine.constraint(m.spec);
        matchers.set(m.id, { constraint, slot: m.slot, words: new Int32Array(m.slot) });
        post({ t: 'opened', key: m.key });
      } catch (error) {
        post({ t: 'opened', key: m.key, error: messageOf(error) });
      }
      return;
    case 'masks':
      for (const req of m.reqs) answer(req);
      return;
    case 'close':
      matchers.get(m.id)?.constraint.release();
      matchers.delete(m.id);
      return;
  }
}

// One message at a time, each to its end, whatever it awaits.
let queue = Promise.resolve();
port.on('message', (m: ToHost) => {
  queue = queue.then(() => handle(m));
});
