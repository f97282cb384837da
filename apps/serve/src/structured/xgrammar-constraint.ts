import type { TokenConstraint } from '@metrale/core';
import type * as Xgrammar from '@mlc-ai/web-xgrammar';
import type { XgrammarRuntime } from './xgrammar-runtime.js';

/** A request's TokenConstraint over an xgrammar GrammarMatcher: its masks, its steps and its rollbacks. */
export class XgrammarConstraint implements TokenConstraint {
  readonly #runtime: XgrammarRuntime;
  readonly #matcher: Xgrammar.GrammarMatcher;
  readonly #vocabSize: number;
  #released = false;

  constructor(runtime: XgrammarRuntime, matcher: Xgrammar.GrammarMatcher, vocabSize: number) {
    this.#runtime = runtime;
    this.#matcher = matcher;
    this.#vocabSize = vocabSize;
  }

  allowedTokens(): Int32Array {
    return this.#runtime.readBitmask(this.#matcher, this.#vocabSize);
  }

  accept(token: number): boolean {
    return this.#matcher.acceptToken(token);
  }

  rollback(n: number): void {
    this.#matcher.rollBack(n);
  }

  isComplete(): boolean {
    return this.#matcher.isTerminated();
  }

  release(): void {
    if (this.#released) return;
    this.#released = true;
    this.#matcher.dispose();
  }
}
