// What the HTTP thread asks of the tokenizer threads (tokenizer-pool.ts → tokenizer-worker.ts).

export interface TokenizerWorkerData {
  /** The checkpoint directory: tokenizer.json, tokenizer_config.json, chat_template.jinja. */
  readonly dir: string;
}

export interface TemplateMessage {
  readonly role: string;
  readonly content: string;
  /** An assistant message's earlier calls, arguments parsed (GLM's template iterates them). */
  readonly tool_calls?: readonly { readonly id: string; readonly type: 'function'; readonly function: { readonly name: string; readonly arguments: unknown } }[];
  /** A tool message's answer to this call. */
  readonly tool_call_id?: string;
}

export type TokenizerTask =
  | { readonly op: 'encode'; readonly text: string; readonly addSpecialTokens: boolean }
  | { readonly op: 'chat'; readonly messages: readonly TemplateMessage[]; readonly addGenerationPrompt: boolean; readonly tools?: readonly unknown[] }
  | { readonly op: 'decode'; readonly ids: readonly number[] };

/**
 * Token ids (moved, not copied), decoded text, or why the chat template refused the messages (a
 * client error; anything else thrown in the worker is the server's).
 */
export type TokenizerResult = Int32Array | { readonly text: string } | { readonly templateError: string };
