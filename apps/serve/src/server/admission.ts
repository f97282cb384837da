import { ApiError } from './api-error.js';

/** A request's place in the server, held from admission until its generations end. */
export interface AdmissionTicket {
  /** Gives the place back (only the first call counts). */
  release(): void;
}

/**
 * The queue check, made when a generation request arrives, before any expensive work (its prompt's
 * tokenization, its chat template): requests admitted and not yet finished may exceed the engine's
 * slots by `maxQueue` at most; beyond that, 429 at once.
 */
export class Admission {
  readonly #maxQueue: number;
  readonly #slots: () => number;
  #admitted = 0;

  /** `slots`: sequences the engine runs at once (0 before it is ready). */
  constructor(maxQueue: number, slots: () => number) {
    this.#maxQueue = maxQueue;
    this.#slots = slots;
  }

  /** Generations admitted and not yet finished. */
  get admitted(): number {
    return this.#admitted;
  }

  /** Admits `count` generations (a request's prompts × n) or throws the 429. */
  enter(count: number): AdmissionTicket {
    const slots = this.#slots();
    if (this.#admitted + count - slots > this.#maxQueue) {
      throw new ApiError(429, `the server is at capacity (${this.#admitted} generations in flight, ${slots} running at once and ${this.#maxQueue} waiting at most); retry later`, { code: 'queue_full' });
    }
    this.#admitted += count;
    let held = true;
    return {
      release: () => {
        if (!held) return;
        held = false;
        this.#admitted -= count;
      },
    };
  }
}
