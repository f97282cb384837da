/** Anything that turns token ids into text (the checkpoint's tokenizer). */
export interface TokenDecoder {
  decode(ids: readonly number[]): string;
}

export interface TextPiece {
  /** Text that can be sent now (never part of a stop string). */
  readonly text: string;
  /** Tokens consumed from this push (fewer than given when a stop string ended the output). */
  readonly tokens: number;
  /** A stop string matched: the output ends here, the stop string itself excluded. */
  readonly stopped: boolean;
}

/**
 * The text of a generation as its tokens arrive, for streaming: decoding token by token would
 * split multi-byte characters and merge-dependent spaces, so each step decodes a short window of
 * recent tokens and sends what that window added (held back while it ends in a partial UTF-8
 * character). Stop strings are searched across token boundaries; the last `longest stop − 1`
 * characters wait until it is clear they do not start one.
 */
export class TextStream {
  readonly #decoder: TokenDecoder;
  readonly #stops: readonly string[];
  readonly #hold: number;
  readonly #ids: number[] = [];
  #prefix = 0;
  #read = 0;
  #pending = '';
  #done = false;

  constructor(decoder: TokenDecoder, stops: readonly string[] = []) {
    this.#decoder = decoder;
    this.#stops = stops.filter((s) => s.length > 0);
    this.#hold = Math.max(0, ...this.#stops.map((s) => s.length - 1));
  }

  get stopped(): boolean {
    return this.#done;
  }

  /** Takes the next tokens; returns the text they release. */
  push(tokens: readonly number[]): TextPiece {
    if (this.#done) return { text: '', tokens: 0, stopped: true };
    let out = '';
    for (let i = 0; i < tokens.length; i++) {
      this.#ids.push(tokens[i]!);
      this.#pending += this.#newText();
      const at = this.#firstStop();
      if (at >= 0) {
        out += this.#pending.slice(0, at);
        this.#pending = '';
        this.#done = true;
        return { text: out, tokens: i + 1, stopped: true };
      }
      const ready = this.#pending.length - this.#hold;
      if (ready > 0) {
        out += this.#pending.slice(0, ready);
        this.#pending = this.#pending.slice(ready);
      }
    }
    return { text: out, tokens: tokens.length, stopped: false };
  }

  /** The generation ended without a stop string: what was held back. */
  flush(): string {
    if (this.#done) return '';
    this.#done = true;
    // A trailing partial character stays undecodable; the tokenizer's own rendering of it is used.
    const tail = this.#decoder.decode(this.#ids.slice(this.#prefix));
    const sent = this.#decoder.decode(this.#ids.slice(this.#prefix, this.#read));
    const rest = this.#pending + (tail.length > sent.length ? tail.slice(sent.length) : '');
    this.#pending = '';
    return rest;
  }

  #newText(): string {
    const sent = this.#decoder.decode(this.#ids.slice(this.#prefix, this.#read));
    const now = this.#decoder.decode(this.#ids.slice(this.#prefix));
    if (now.length <= sent.length || now.endsWith('\uFFFD')) return '';
    this.#prefix = this.#read;
    this.#read = this.#ids.length;
    return now.slice(sent.length);
  }

  #firstStop(): number {
    let best = -1;
    for (const s of this.#stops) {
      const at = this.#pending.indexOf(s);
      if (at >= 0 && (best < 0 || at < best)) best = at;
    }
    return best;
  }
}
