import { readFileSync } from 'node:fs';
import { Template } from '@huggingface/jinja';
import { Tokenizer } from '@huggingface/tokenizers';
import { WeightsError, type Checkpoint } from '@metrale/core';

/**
 * The checkpoint's `tokenizer.json` (through @huggingface/tokenizers) and chat template (through
 * @huggingface/jinja): from `chat_template.jinja`, or `tokenizer_config.json`'s `chat_template`.
 */
export class TextCodec {
  readonly #tokenizer: Tokenizer;
  readonly #template: string | undefined;
  readonly #config: Record<string, unknown>;
  #compiled: Template | undefined;

  private constructor(tokenizer: Tokenizer, config: Record<string, unknown>, template: string | undefined) {
    this.#tokenizer = tokenizer;
    this.#config = config;
    this.#template = template;
  }

  /** The checkpoint's tokenizer, or undefined when it has no tokenizer.json. */
  static fromCheckpoint(checkpoint: Checkpoint): TextCodec | undefined {
    const path = checkpoint.file('tokenizer.json');
    if (!path) return undefined;
    let json: unknown;
    try {
      json = JSON.parse(readFileSync(path, 'utf8'));
    } catch (cause) {
      throw new WeightsError(`cannot read the tokenizer: ${(cause as Error).message}`, path, { cause });
    }
    const config = checkpoint.json('tokenizer_config.json') ?? {};
    const jinja = checkpoint.file('chat_template.jinja');
    let template = jinja ? readFileSync(jinja, 'utf8') : undefined;
    const fromConfig = config.chat_template;
    if (!template && typeof fromConfig === 'string') template = fromConfig;
    if (!template && Array.isArray(fromConfig)) {
      const named = (fromConfig as { name?: string; template?: string }[]).find((t) => t.name === 'default') ?? fromConfig[0];
      template = (named as { template?: string } | undefined)?.template;
    }
    try {
      return new TextCodec(new Tokenizer(json as object, config), config, template);
    } catch (cause) {
      throw new WeightsError(`the tokenizer cannot be built: ${(cause as Error).message}`, path, { cause });
    }
  }

  get hasChatTemplate(): boolean {
    return this.#template !== undefined;
  }

  /** The chat template's source (how it writes tool calls decides how they are parsed). */
  get chatTemplate(): string | undefined {
    return this.#template;
  }

  encode(text: string, addSpecialTokens = true): number[] {
    return this.#tokenizer.encode(text, { add_special_tokens: addSpecialTokens }).ids;
  }

  decode(ids: readonly number[]): string {
    // The tokenizer library refuses an empty list; its text is empty.
    if (ids.length === 0) return '';
    return this.#tokenizer.decode([...ids], { skip_special_tokens: true });
  }

  /** The prompt as one user message through the chat template, with the generation prompt. */
  chat(prompt: string): string {
    return this.renderChat([{ role: 'user', content: prompt }], true);
  }

  /** Messages through the chat template, with the request's tools when it has some (throws what the template raises). */
  renderChat(messages: readonly { role: string; content: string }[], addGenerationPrompt: boolean, tools?: readonly unknown[]): string {
    if (!this.#template) throw new WeightsError('the checkpoint has no chat template (chat_template.jinja or tokenizer_config.json chat_template)');
    const token = (name: string): string | undefined => {
      const v = this.#config[name];
      return typeof v === 'string' ? v : (v as { content?: string } | undefined)?.content;
    };
    // Parsed once: a server renders every chat request through it.
    this.#compiled ??= new Template(this.#template);
    return this.#compiled.render({
      messages: messages.map((m) => ({ ...m })),
      // Templates test `if tools`: no tools is no variable, not an empty list.
      ...(tools && tools.length > 0 ? { tools: tools.map((t) => structuredClone(t)) } : {}),
      add_generation_prompt: addGenerationPrompt,
      bos_token: token('bos_token') ?? '',
      eos_token: token('eos_token') ?? '',
    });
  }
}
