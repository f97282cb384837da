import type { TokenConstraint } from '@metrale/core';
import type * as Xgrammar from '@mlc-ai/web-xgrammar';
import { grammarKey, type GrammarSpec } from './grammar-spec.js';
import { readTokenizerVocabulary } from './tokenizer-vocabulary.js';
import { XgrammarConstraint } from './xgrammar-constraint.js';
import { GrammarEngineError, loadXgrammarRuntime, type XgrammarRuntime } from './xgrammar-runtime.js';

/** Compiled grammars kept for reuse (each holds its token-mask cache). */
const CACHE_ENTRIES = 64;

/**
 * JSON as the grammar lets the model write it: on one line with Python's `json.dumps` separators,
 * the form chat templates render arguments in (`tojson`). A fixed layout, not any whitespace,
 * so a model cannot spend its tokens on spaces and compiled grammars stay small.
 */
const JSON_LAYOUT = { anyWhitespace: false, indent: -1, separators: [', ', ': '] as [string, string] };

export interface GrammarEngineOptions {
  /** The served tokenizer.json. */
  readonly tokenizerPath: string;
  /** Logit row width (config.vocab_size). */
  readonly vocabSize: number;
  /** Tokens that end a generation (the model's end-of-sequence ids): allowed where the grammar is complete. */
  readonly stopTokenIds: readonly number[];
}

/**
 * xgrammar for the engine worker: compiles a request's GrammarSpec once (cached by its text) against
 * the served tokenizer's vocabulary and hands out per-request constraints. Everything starts on
 * first use, so a server that never sees a structured request pays nothing.
 *
 * A spec is first converted to a grammar on a separate xgrammar instance without the vocabulary: a
 * bad schema aborts the WebAssembly it runs in, and only that throwaway instance is replaced; the
 * instance that holds the vocabulary and the live matchers only compiles what converted cleanly.
 */
export class GrammarEngine {
  readonly #options: GrammarEngineOptions;
  #runtime: XgrammarRuntime | undefined;
  #compiler: Promise<Xgrammar.GrammarCompiler> | undefined;
  #validator: XgrammarRuntime | undefined;
  readonly #cache = new Map<string, Xgrammar.CompiledGrammar>();

  constructor(options: GrammarEngineOptions) {
    this.#options = options;
  }

  /** Checks and compiles `spec` (cached); throws GrammarEngineError with xgrammar's reason when it cannot. */
  async prepare(spec: GrammarSpec): Promise<void> {
    await this.#compiled(spec);
  }

  /** Whether `spec` is compiled and cached here (a constraint over it starts without compiling). */
  isCompiled(spec: GrammarSpec): boolean {
    return this.#cache.has(grammarKey(spec));
  }

  /** A new constraint for one request, at the start of `spec`. */
  async constraint(spec: GrammarSpec): Promise<TokenConstraint> {
    const compiled = await this.#compiled(spec);
    const runtime = this.#runtime!;
    const matcher = await runtime.guard(() => runtime.api.GrammarMatcher.createGrammarMatcher(compiled));
    return new XgrammarConstraint(runtime, matcher, this.#options.vocabSize);
  }

  async #compiled(spec: GrammarSpec): Promise<Xgrammar.CompiledGrammar> {
    const key = grammarKey(spec);
    const hit = this.#cache.get(key);
    if (hit) {
      // Most recently used last: the first entry is the one to evict.
      this.#cache.delete(key);
      this.#cache.set(key, hit);
      return hit;
    }
    await this.#validate(spec);
    const compiler = await this.#startCompiler();
    const runtime = this.#runtime!;
    const compiled = await runtime.guard(() => {
      switch (spec.kind) {
        case 'json_object':
          return compiler.compileJSONSchema('{"type": "object"}', JSON_LAYOUT.anyWhitespace, JSON_LAYOUT.indent, JSON_LAYOUT.separators, false);
        case 'json_schema':
          return compiler.compileJSONSchema(spec.schema, JSON_LAYOUT.anyWhitespace, JSON_LAYOUT.indent, JSON_LAYOUT.separators, true);
        case 'structural_tag':
          return compiler.compileStructuralTag(spec.tag);
      }
    }).catch((error: unknown) => {
      // What converted cleanly should compile; if it aborted anyway, start afresh next time.
      if (runtime.aborted) this.#reset();
      throw error;
    });
    this.#cache.set(key, compiled);
    if (this.#cache.size > CACHE_ENTRIES) {
      const [oldest, grammar] = this.#cache.entries().next().value as [string, Xgrammar.CompiledGrammar];
      this.#cache.delete(oldest);
      // A matcher made from it keeps its own reference inside xgrammar.
      grammar.dispose();
    }
    return compiled;
  }

  async #validate(spec: GrammarSpec): Promise<void> {
    if (spec.kind === 'json_object') return;
    this.#validator ??= loadXgrammarRuntime();
    const validator = this.#validator;
    try {
      const grammar = await validator.guard(() => spec.kind === 'json_schema'
        ? validator.api.Grammar.fromJSONSchema(spec.schema, JSON_LAYOUT.anyWhitespace, JSON_LAYOUT.indent, JSON_LAYOUT.separators, true)
        : validator.api.Grammar.fromStructuralTag(spec.tag));
      grammar.dispose();
    } finally {
      if (validator.aborted) this.#validator = undefined;
    }
  }

  #startCompiler(): Promise<Xgrammar.GrammarCompiler> {
    this.#compiler ??= (async () => {
      const runtime = loadXgrammarRuntime();
      const { encoded, vocabType, prependSpace } = readTokenizerVocabulary(this.#options.tokenizerPath, this.#options.vocabSize);
      const info = await runtime.guard(() => runtime.api.TokenizerInfo.createTokenizerInfo(encoded, vocabType, prependSpace, this.#options.vocabSize, [...this.#options.stopTokenIds]));
      const compiler = await runtime.guard(() => runtime.api.GrammarCompiler.createGrammarCompiler(info));
      this.#runtime = runtime;
      return compiler;
    })();
    this.#compiler.catch(() => {
      this.#compiler = undefined;
    });
    return this.#compiler;
  }

  /** Drops the compiling instance and its cache (after an abort inside it). */
  #reset(): void {
    this.#compiler = undefined;
    this.#runtime = undefined;
    this.#cache.clear();
  }
}

export { GrammarEngineError };
