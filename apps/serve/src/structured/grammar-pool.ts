import type { TokenConstraint } from '@metrale/core';
import { grammarKey, type GrammarSpec } from './grammar-spec.js';
import { GrammarEvictedError, GrammarHost } from './grammar-host.js';
import { newMaskSlot, type GrammarHostData, type MaskRequest } from './grammar-host-protocol.js';
import { RemoteConstraint } from './remote-constraint.js';

/** Grammar host threads at most (each holds the vocabulary, about 35 MB, and its compiled grammars). */
export const DEFAULT_MAX_GRAMMAR_HOSTS = 4;

export interface GrammarPoolOptions extends GrammarHostData {
  /** The host thread's script; default: grammar-host-worker.js beside this module's bundle. */
  readonly workerUrl?: URL;
  readonly maxHosts?: number;
}

/**
 * Structured output for the engine thread, which never compiles a grammar nor waits for a compile.
 *
 * Grammars compile on grammar host threads (grammar-host-worker.ts), each its own xgrammar
 * instance. A compiled grammar cannot leave the instance that compiled it, so the matchers of the
 * requests that use it live on that host as well, and their masks come back through shared memory
 * (remote-constraint.ts). A host compiling is busy for the compile's length (0.3–2 s), so a
 * compile goes only to a host with no matcher open or opening, and never holds a running
 * request's masks: to an idle host, or to a new one (up to `maxHosts`); past that it waits until
 * a host's requests have finished. A request whose grammar is compiling waits outside the batch
 * (the engine worker adds it once its constraint is open); everything else keeps decoding.
 *
 * Each step, `prefetch` sends every constrained request's next mask request in one message per
 * host right after the step, so the hosts compute the masks while the engine runs the next
 * step's forward, and sampling finds them ready.
 */
export class GrammarPool {
  readonly #data: GrammarHostData;
  readonly #workerUrl: URL;
  readonly #maxHosts: number;
  readonly #hosts: GrammarHost[] = [];
  /** Where each compiled grammar lives (by its text), or its compile in flight. */
  readonly #where = new Map<string, Placement>();
  /** Compiles waiting for a free host: each starts its compile on the host it is given. */
  readonly #queued: ((host: GrammarHost) => void)[] = [];
  readonly #open = new Set<RemoteConstraint>();
  #nextId = 1;

  constructor(options: GrammarPoolOptions) {
    this.#data = { tokenizerPath: options.tokenizerPath, vocabSize: options.vocabSize, stopTokenIds: options.stopTokenIds };
    this.#workerUrl = options.workerUrl ?? new URL('./grammar-host-worker.js', import.meta.url);
    this.#maxHosts = options.maxHosts ?? DEFAULT_MAX_GRAMMAR_HOSTS;
  }

  /** Host threads started so far. */
  get hosts(): number {
    return this.#hosts.length;
  }

  /** Checks and compiles `spec` on a host (once; later calls find it); rejects with xgrammar's reason. */
  prepare(spec: GrammarSpec): Promise<void> {
    const key = grammarKey(spec);
    const known = this.#where.get(key);
    if (known && !known.host?.failed) return known.compiled;
    const placement: Placement = { host: undefined, compiled: Promise.resolve() };
    placement.compiled = new Promise<void>((resolve, reject) => {
      this.#queued.push((host) => {
        placement.host = host;
        host.compile(spec).then(resolve, reject);
      });
    });
    this.#where.set(key, placement);
    placement.compiled.then(
      () => this.#drain(),
      () => {
        // Refused: nothing cached; a later request with the same text gets the same answer anew.
        if (this.#where.get(key) === placement) this.#where.delete(key);
        this.#drain();
      },
    );
    this.#drain();
    return placement.compiled;
  }

  /** A constraint at the start of `spec` (compiled first when it is not), its first mask on its way. */
  async constraint(spec: GrammarSpec): Promise<TokenConstraint> {
    for (;;) {
      await this.prepare(spec);
      const host = this.#where.get(grammarKey(spec))?.host;
      if (!host) continue;
      const id = this.#nextId++;
      const slot = newMaskSlot(this.#data.vocabSize);
      try {
        await host.open(id, spec, slot);
      } catch (error) {
        this.#drain();
        if (!(error instanceof GrammarEvictedError)) throw error;
        this.#where.delete(grammarKey(spec));
        continue;
      }
      const constraint: RemoteConstraint = new RemoteConstraint({
        host, id, slot, vocabSize: this.#data.vocabSize, stopTokenIds: this.#data.stopTokenIds,
        onRelease: () => {
          this.#open.delete(constraint);
          this.#drain();
        },
      });
      this.#open.add(constraint);
      const first = constraint.prefetch();
      if (first) host.masks([first]);
      return constraint;
    }
  }

  /** Asks every host, in one message each, for the masks the open constraints need next. */
  prefetch(): void {
    const byHost = new Map<GrammarHost, MaskRequest[]>();
    for (const c of this.#open) {
      const req = c.prefetch();
      if (!req) continue;
      const host = c.host;
      const list = byHost.get(host) ?? [];
      list.push(req);
      byHost.set(host, list);
    }
    for (const [host, reqs] of byHost) host.masks(reqs);
  }

  /** Ends the host threads. */
  async close(): Promise<void> {
    await Promise.all(this.#hosts.map((h) => h.terminate()));
  }

  #liveHosts(): number {
    for (let i = this.#hosts.length - 1; i >= 0; i--) if (this.#hosts[i]!.failed) this.#hosts.splice(i, 1);
    return this.#hosts.length;
  }

  /**
   * Gives waiting compiles, in arrival order, the hosts where a compile holds no running request:
   * an idle one, else a new one while under `maxHosts`; the rest wait for a host to become idle.
   */
  #drain(): void {
    while (this.#queued.length > 0) {
      let host = this.#hosts.find((h) => h.free);
      if (!host && this.#liveHosts() < this.#maxHosts) {
        host = new GrammarHost(this.#data, this.#workerUrl);
        this.#hosts.push(host);
      }
      if (!host) return;
      // Starts the compile now, so the host counts as busy before the next one is placed.
      this.#queued.shift()!(host);
    }
  }
}

/** Where a grammar compiles or compiled: its host (none while it waits for one). */
interface Placement {
  host: GrammarHost | undefined;
  compiled: Promise<void>;
}
