import { randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import type { TemplateMessage } from '../tokenizer/tokenizer-tasks.js';
import { parseToolCalls, toolCallFormatFor, type ParsedToolCall } from '../tools/tool-call-format.js';
import { ToolCallStream } from '../tools/tool-call-stream.js';
import { runAdmitted } from './admitted-request.js';
import { ApiError } from './api-error.js';
import { chatStructure, prepareGrammar, type ChatStructure } from './chat-structure.js';
import { runChoices, type ChoiceFormat } from './choice-runner.js';
import type { FinishReason, GenerationResult } from './generation.js';
import { TokenTexts, chatLogprobs, type TokenLogprobs } from './logprobs-format.js';
import { checkMinTokens, checkModel, completionBudget, refuseUnsupported, samplingOf, stopStrings, stopTokensOf, withChoices } from './request-params.js';
import { chatRequest, parseBody, type ChatMessage } from './request-schemas.js';
import type { ServerContext } from './server-context.js';

/** An earlier call's arguments as the template reads them: an object when they are JSON (GLM's template iterates them). */
function templateArguments(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** Messages as the chat template sees them: text parts joined, no content as empty text, earlier tool calls and answers kept. */
export function templateMessages(messages: readonly ChatMessage[]): TemplateMessage[] {
  return messages.map((m) => ({
    role: m.role === 'developer' ? 'system' : m.role,
    content: typeof m.content === 'string' ? m.content : (m.content ?? []).map((p) => p.text).join(''),
    ...(m.tool_calls?.length ? { tool_calls: m.tool_calls.map((c) => ({ ...c, function: { name: c.function.name, arguments: templateArguments(c.function.arguments) } })) } : {}),
    ...(m.tool_call_id != null ? { tool_call_id: m.tool_call_id } : {}),
  }));
}

/** The prompt's token ids: the messages (and tools) through the checkpoint's chat template, on a tokenizer thread. */
export function chatPrompt(ctx: ServerContext, messages: readonly ChatMessage[], addGenerationPrompt: boolean, signal?: AbortSignal, tools?: readonly unknown[]): Promise<Int32Array> {
  return ctx.requireTokenizer('messages').chat(templateMessages(messages), addGenerationPrompt, 'messages', signal, tools);
}

const toolCallId = () => `call_${randomUUID().replace(/-/g, '').slice(0, 24)}`;

const toolCallObjects = (calls: readonly ParsedToolCall[], first = 0, withIndex = false) => calls.map((c, j) => ({
  ...(withIndex ? { index: first + j } : {}), id: toolCallId(), type: 'function' as const, function: { name: c.name, arguments: c.arguments },
}));

/** An answer that made calls and ended by itself finished for them (OpenAI's `tool_calls`). */
const finishOf = (finish: FinishReason, calls: number): string => (finish === 'stop' && calls > 0 ? 'tool_calls' : finish);

/** The chat logprobs object of some tokens, or null when the request did not ask for logprobs. */
type ChatLogprobs = (items: readonly TokenLogprobs[]) => unknown;

/**
 * The chat answer's shapes: text, or tool calls parsed out of it when the request offers tools;
 * with the tokens' logprobs when asked.
 */
function chatFormat(head: { id: string; object: string; created: number; model: string }, structure: ChatStructure, logprobs: ChatLogprobs): ChoiceFormat {
  const { id, created, model } = head;
  const tools = structure.tools;
  const streams: ToolCallStream[] = [];
  // Logprobs of tokens whose text a tool-call stream holds back go out with the next event.
  const held: TokenLogprobs[][] = [];
  const withHeld = (index: number, items: readonly TokenLogprobs[]) => {
    const all = [...(held[index] ?? []), ...items];
    held[index] = [];
    return all.length > 0 ? logprobs(all) : null;
  };
  const message = (r: GenerationResult) => {
    if (!tools) return { message: { role: 'assistant', content: r.text }, finish_reason: r.finishReason };
    const { content, calls } = parseToolCalls(tools.format, r.text, tools.definitions);
    if (calls.length === 0) return { message: { role: 'assistant', content: r.text }, finish_reason: r.finishReason };
    return { message: { role: 'assistant', content: content.trim() ? content : null, tool_calls: toolCallObjects(calls) }, finish_reason: finishOf(r.finishReason, calls.length) };
  };
  return {
    opening: (index) => ({ ...head, choices: [{ index, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }] }),
    chunk: (index, text, finish, items) => {
      if (!tools) return { ...head, choices: [{ index, delta: text === null ? {} : { content: text }, logprobs: withHeld(index, items), finish_reason: finish }] };
      const stream = (streams[index] ??= new ToolCallStream(tools.format, tools.definitions));
      const before = stream.calls;
      const piece = text === null ? stream.finish() : stream.push(text);
      if (text !== null && !piece.content && piece.calls.length === 0) {
        (held[index] ??= []).push(...items);
        return undefined;
      }
      const delta = {
        ...(piece.content ? { content: piece.content } : {}),
        ...(piece.calls.length > 0 ? { tool_calls: toolCallObjects(piece.calls, before, true) } : {}),
      };
      return { ...head, choices: [{ index, delta, logprobs: withHeld(index, items), finish_reason: finish && finishOf(finish, stream.calls) }] };
    },
    usageChunk: (usage) => ({ ...head, choices: [], usage }),
    response: (results, usage) => ({
      id, object: 'chat.completion', created, model,
      choices: results.map((r, index) => ({ index, ...message(r), logprobs: logprobs(r.logprobs) })),
      usage,
    }),
  };
}

/** POST /v1/chat/completions. */
export function registerChat(app: FastifyInstance, ctx: ServerContext): void {
  app.post('/v1/chat/completions', async (request, reply) => {
    const arrived = performance.now();
    const body = parseBody(chatRequest, request.body);
    refuseUnsupported(body, 'chat');
    if ((body.top_logprobs ?? 0) > 0 && !body.logprobs) {
      throw new ApiError(400, 'top_logprobs needs logprobs: true', { param: 'top_logprobs' });
    }
    const served = ctx.servedOrUnavailable();
    checkModel(body.model, served);
    const structure = chatStructure(body, toolCallFormatFor(ctx.codec?.chatTemplate, ctx.engine.info?.modelType ?? ''));
    const sampling = samplingOf(body, served);
    const stopTokenIds = stopTokensOf(body, served);
    const n = body.n ?? 1;
    return runAdmitted(ctx, reply, n, arrived, async (lifetime, ticket) => {
      // Compiled (or found compiled) before the answer starts, so a refused schema is a 400, streaming or not.
      if (structure.grammar) await prepareGrammar(ctx.engine, structure.grammar);
      const prompt = await chatPrompt(ctx, body.messages, true, lifetime.signal, structure.templateTools);
      const asked = body.max_completion_tokens ?? body.max_tokens;
      const field = body.max_completion_tokens != null ? 'max_completion_tokens' : 'max_tokens';
      const maxTokens = completionBudget(prompt.length, asked, undefined, served, 'messages', field);
      checkMinTokens(body, maxTokens);
      const id = `chatcmpl-${randomUUID()}`;
      const created = Math.floor(Date.now() / 1000);
      const texts = new TokenTexts(ctx.codec);
      const logprobs: ChatLogprobs = (items) => (body.logprobs ? { content: chatLogprobs(items, texts) } : null);
      return runChoices({
        ctx, reply, arrived, lifetime, ticket, n,
        params: withChoices([{
          prompt, maxTokens, ...sampling, stop: stopStrings(body.stop), stopTokenIds, ...(body.logprobs ? { logprobs: body.top_logprobs ?? 0 } : {}),
          ...(structure.grammar ? { grammar: structure.grammar.spec } : {}),
        }], n),
        promptTokens: prompt.length,
        stream: body.stream ?? false,
        includeUsage: body.stream_options?.include_usage ?? false,
        format: chatFormat({ id, object: 'chat.completion.chunk', created, model: served.name }, structure, logprobs),
      });
    });
  });
}
