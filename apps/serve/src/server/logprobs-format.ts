import type { PositionLogprobs } from '@metrale/core';
import type { TokenDecoder } from './text-stream.js';

/** A token of an answer with its logprobs, or without (a prompt's first token has none). */
export type TokenLogprobs = PositionLogprobs | { readonly token: number; readonly rank?: undefined };

/** What JSON cannot hold (−∞, a masked token) is sent as OpenAI and vLLM send it. */
const FLOOR = -9999;
const clamp = (v: number): number => Math.max(v, FLOOR);
const utf8 = new TextEncoder();

/** The text of single tokens, as the logprobs show them (each decoded alone, as vLLM does), kept once decoded. */
export class TokenTexts {
  readonly #decoder: TokenDecoder | undefined;
  readonly #texts = new Map<number, string>();

  constructor(decoder: TokenDecoder | undefined) {
    this.#decoder = decoder;
  }

  of(token: number): string {
    let text = this.#texts.get(token);
    if (text === undefined) {
      text = this.#decoder ? this.#decoder.decode([token]) : `<${token}>`;
      this.#texts.set(token, text);
    }
    return text;
  }
}

function chatEntry(token: number, logprob: number, texts: TokenTexts): { token: string; logprob: number; bytes: number[] } {
  const text = texts.of(token);
  return { token: text, logprob: clamp(logprob), bytes: Array.from(utf8.encode(text)) };
}

/**
 * Chat's `logprobs.content`: each token with its logprob, its text's UTF-8 bytes and the `top_logprobs`
 * most likely tokens of its position, best first (OpenAI's definition; vLLM lists the sampled token first).
 */
export function chatLogprobs(items: readonly TokenLogprobs[], texts: TokenTexts): unknown[] {
  return items.map((e) => ({
    ...chatEntry(e.token, e.rank === undefined ? FLOOR : e.logprob, texts),
    top_logprobs: e.rank === undefined ? [] : e.top.map((t) => chatEntry(t.token, t.logprob, texts)),
  }));
}

/**
 * The completions API's `logprobs` object, as vLLM builds it: per token its text, its logprob (null
 * when it has none), a map of the sampled token and the position's N most likely tokens (N + 1 entries
 * at most) by their text, and the text offset of each token, from `offset` on.
 */
export function completionLogprobs(items: readonly TokenLogprobs[], texts: TokenTexts, offset: number): unknown {
  const tokens: string[] = [];
  const tokenLogprobs: (number | null)[] = [];
  const top: (Record<string, number> | null)[] = [];
  const offsets: number[] = [];
  let at = offset;
  for (const e of items) {
    const text = texts.of(e.token);
    tokens.push(text);
    offsets.push(at);
    at += text.length;
    if (e.rank === undefined) {
      tokenLogprobs.push(null);
      top.push(null);
      continue;
    }
    tokenLogprobs.push(clamp(e.logprob));
    const map: Record<string, number> = { [text]: clamp(e.logprob) };
    for (const t of e.top) {
      if (t.token === e.token) continue;
      const key = texts.of(t.token);
      if (!(key in map)) map[key] = clamp(t.logprob);
    }
    top.push(map);
  }
  return { tokens, token_logprobs: tokenLogprobs, top_logprobs: top, text_offset: offsets };
}
