import { Tinypool } from 'tinypool';
import { ApiError } from '../server/api-error.js';
import type { TemplateMessage, TokenizerResult, TokenizerTask, TokenizerWorkerData } from './tokenizer-tasks.js';

/**
 * Prompts longer than this (characters) are tokenized abortably: a client that leaves ends the
 * work by ending its thread, which a fresh one replaces. Shorter ones finish in milliseconds and
 * are simply left to finish, since a thread reloads its tokenizer for seconds.
 */
const ABORTABLE_CHARS = 64 * 1024;

export interface TokenizerPoolOptions {
  /** Tokenizer threads (each holds its own copy of the tokenizer). */
  readonly threads: number;
  /** Tasks waiting for a thread at most; beyond, 429. */
  readonly maxQueue: number;
}

/**
 * The checkpoint's tokenizer and chat template in threads of their own (tinypool), so that
 * tokenizing a long prompt or rendering many messages never blocks the HTTP thread: its event
 * loop keeps answering other requests and streaming their tokens meanwhile.
 */
export class TokenizerPool {
  readonly #pool: Tinypool;
  #failure: Error | undefined;

  private constructor(pool: Tinypool) {
    this.#pool = pool;
    // A thread that cannot load the tokenizer: later tasks would wait for one forever.
    pool.on('error', (error: Error) => {
      this.#failure = error;
      pool.cancelPendingTasks();
    });
  }

  /** Starts the threads; they load the tokenizer of `dir` at once, while the weights load. */
  static start(dir: string, options: TokenizerPoolOptions): TokenizerPool {
    const workerData: TokenizerWorkerData = { dir };
    return new TokenizerPool(new Tinypool({
      filename: new URL('./tokenizer-worker.js', import.meta.url),
      workerData,
      minThreads: options.threads,
      maxThreads: options.threads,
      maxQueue: options.maxQueue,
    }));
  }

  /** The text's token ids. */
  async encode(text: string, addSpecialTokens: boolean, signal?: AbortSignal): Promise<Int32Array> {
    return this.#ids(await this.#run({ op: 'encode', text, addSpecialTokens }, text.length, signal));
  }

  /**
   * The messages (and the request's tools, OpenAI's `tools` list) through the chat template, then
   * tokenized; 400 naming `field` when the template refuses them.
   */
  async chat(messages: readonly TemplateMessage[], addGenerationPrompt: boolean, field: string, signal?: AbortSignal, tools?: readonly unknown[]): Promise<Int32Array> {
    const chars = messages.reduce((a, m) => a + m.content.length, 0);
    const result = await this.#run({ op: 'chat', messages, addGenerationPrompt, ...(tools ? { tools } : {}) }, chars, signal);
    if (!(result instanceof Int32Array) && 'templateError' in result) {
      throw new ApiError(400, `${field}: the chat template cannot render them: ${result.templateError}`, { param: field });
    }
    return this.#ids(result);
  }

  async decode(ids: readonly number[], signal?: AbortSignal): Promise<string> {
    const result = await this.#run({ op: 'decode', ids }, ids.length, signal);
    if (result instanceof Int32Array || !('text' in result)) throw new Error('the tokenizer thread answered a decode with no text');
    return result.text;
  }

  async close(): Promise<void> {
    await this.#pool.destroy();
  }

  #ids(result: TokenizerResult): Int32Array {
    if (!(result instanceof Int32Array)) throw new Error('the tokenizer thread answered with no token ids');
    return result;
  }

  async #run(task: TokenizerTask, size: number, signal: AbortSignal | undefined): Promise<TokenizerResult> {
    if (this.#failure) throw new ApiError(500, `the tokenizer cannot run: ${this.#failure.message}`, { code: 'tokenizer_failed' });
    signal?.throwIfAborted();
    try {
      return await this.#pool.run(task, size > ABORTABLE_CHARS && signal ? { signal } : {}) as TokenizerResult;
    } catch (error) {
      if (signal?.aborted) throw signal.reason;
      const message = (error as Error).message;
      if (/queue is at limit/i.test(message)) {
        throw new ApiError(429, 'the tokenizer is at capacity (every thread busy and its queue full); retry later', { code: 'queue_full' });
      }
      // The pool's own error (a thread that could not load) says more than the task's.
      const failure = this.#failure as Error | undefined;
      throw new ApiError(500, `the tokenizer failed: ${failure?.message ?? message}`, { code: 'tokenizer_failed' });
    }
  }
}
