import type { ParsedToolCall, ToolCallFormat, ToolDefinition } from './tool-call-format.js';

/** What a piece of streamed text released: content to send, and calls completed in it. */
export interface ToolStreamPiece {
  readonly content: string;
  readonly calls: ParsedToolCall[];
}

/**
 * Tool calls out of a streamed answer: text before the first `<tool_call>` streams as content
 * (a tail that may begin the tag waits), a call is held until its closing tag and then sent
 * whole (name and arguments in one delta, as vLLM's parsers for these formats send it).
 * Whitespace between and after calls is dropped; a block that does not parse, and an unclosed
 * one at the end, are sent as content.
 */
export class ToolCallStream {
  readonly #format: ToolCallFormat;
  readonly #tools: readonly ToolDefinition[];
  #buffer = '';
  #calls = 0;

  constructor(format: ToolCallFormat, tools: readonly ToolDefinition[]) {
    this.#format = format;
    this.#tools = tools;
  }

  /** Calls sent so far. */
  get calls(): number {
    return this.#calls;
  }

  push(text: string): ToolStreamPiece {
    this.#buffer += text;
    const { open, close } = this.#format;
    let content = '';
    const calls: ParsedToolCall[] = [];
    for (;;) {
      const start = this.#buffer.indexOf(open);
      if (start < 0) {
        // Hold back what could be the start of the tag.
        const keep = partialSuffix(this.#buffer, open);
        content += this.#release(this.#buffer.slice(0, this.#buffer.length - keep));
        this.#buffer = this.#buffer.slice(this.#buffer.length - keep);
        break;
      }
      content += this.#release(this.#buffer.slice(0, start));
      this.#buffer = this.#buffer.slice(start);
      const end = this.#buffer.indexOf(close, open.length);
      if (end < 0) break;
      const block = this.#buffer.slice(0, end + close.length);
      this.#buffer = this.#buffer.slice(block.length);
      const call = this.#format.parseCall(block.slice(open.length, -close.length), this.#tools);
      if (call) {
        calls.push(call);
        this.#calls++;
      } else content += block;
    }
    return { content, calls };
  }

  /** The answer ended: whatever was held back. */
  finish(): ToolStreamPiece {
    const rest = this.#release(this.#buffer);
    this.#buffer = '';
    return { content: rest, calls: [] };
  }

  /** Content between or after calls is only the template's spacing: not sent. */
  #release(text: string): string {
    return this.#calls > 0 && text.trim() === '' ? '' : text;
  }
}

/** Length of the longest end of `text` that is a proper start of `tag`. */
function partialSuffix(text: string, tag: string): number {
  for (let n = Math.min(tag.length - 1, text.length); n > 0; n--) if (text.endsWith(tag.slice(0, n))) return n;
  return 0;
}
