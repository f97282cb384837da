import { InvalidArgumentError } from '../errors.js';
import type { PositionLogprobs } from '../model/logprobs.js';
import type { EngineLoop } from './engine-loop.js';
import type { EngineRequest, FinishReason } from './engine-request.js';

/** A request of `generateAll`: an `EngineRequest` without an id (its index is its id). */
export type GenerateRequest = Omit<EngineRequest, 'id'>;

export interface GenerateOutput {
  readonly tokens: number[];
  readonly finishReason: FinishReason;
  /** f32 [prompt length × vocab], when the request asked for its prompt logits. */
  readonly promptLogits?: Float32Array;
  /** One entry per generated token when the request asked for logprobs (see EngineRequest.logprobs). */
  readonly logprobs?: PositionLogprobs[];
  /** One entry per prompt token (null for the first) when the request asked for them. */
  readonly promptLogprobs?: (PositionLogprobs | null)[];
  readonly error?: string;
}

export interface SpeculationStats {
  /** Draft tokens per step, at most. */
  readonly k: number;
  readonly verifySteps: number;
  /** Draft tokens proposed (padding of short proposals not counted) and accepted. */
  readonly drafted: number;
  readonly accepted: number;
  readonly acceptanceRate: number;
}

export interface GenerateStats {
  readonly promptTokens: number;
  readonly generatedTokens: number;
  /** Time of the steps that prefilled prompt rows, and of the others. */
  readonly prefillMs: number;
  readonly decodeMs: number;
  /**
   * Tokens the steps of `decodeMs` generated, per second of it: a token decoded in a step that also
   * prefilled is in neither (its time is in `prefillMs`).
   */
  readonly tokensPerSecond: number;
  /** The steps of `decodeMs` that generated tokens: `decodeMs` over it is the time of a decode (or verify) step. */
  readonly decodeMsSteps: number;
  /** Steps that prefilled, that decoded (one row per sequence) and that verified drafts. */
  readonly steps: { readonly prefill: number; readonly decode: number; readonly verify: number };
  readonly speculation?: SpeculationStats;
}

/**
 * Runs `requests` through the engine loop until each has finished (the loop must be idle first),
 * as `metrale generate` and the benchmarks do: the same loop that serves, admitting as many as the
 * driver has slots and the rest as slots free up.
 */
export function generateAll(loop: EngineLoop, requests: readonly GenerateRequest[], speculationK?: number): { outputs: GenerateOutput[]; stats: GenerateStats } {
  if (requests.length === 0) throw new InvalidArgumentError('generate: give at least one request');
  if (!loop.idle) throw new InvalidArgumentError('generate: the engine loop is busy with other requests');
  const outputs: { tokens: number[]; logprobs?: PositionLogprobs[]; promptLogprobs?: (PositionLogprobs | null)[]; finish?: FinishReason; error?: string }[] = requests.map((r) => ({
    tokens: [], ...(r.logprobs !== undefined ? { logprobs: [] } : {}),
  }));
  const added: number[] = [];
  try {
    requests.forEach((r, id) => {
      loop.add({ ...r, id });
      added.push(id);
    });
  } catch (error) {
    for (const id of added) loop.cancel(id);
    throw error;
  }
  let prefillMs = 0, decodeMs = 0, decodeTokens = 0, decodeMsSteps = 0, drafted = 0, accepted = 0;
  const steps = { prefill: 0, decode: 0, verify: 0 };
  while (!loop.idle) {
    const report = loop.step();
    if (report.prefillRows > 0) {
      steps.prefill++;
      prefillMs += report.ms;
    } else decodeMs += report.ms;
    if (report.decodeSeqs > 0) {
      if (report.k > 1) steps.verify++;
      else steps.decode++;
    }
    drafted += report.drafted;
    accepted += report.accepted;
    if (report.prefillRows === 0 && report.events.some((ev) => ev.tokens.length > 0)) decodeMsSteps++;
    for (const ev of report.events) {
      const out = outputs[ev.id]!;
      out.tokens.push(...ev.tokens);
      if (out.logprobs && ev.logprobs) out.logprobs.push(...ev.logprobs);
      if (ev.promptLogprobs) out.promptLogprobs = ev.promptLogprobs;
      if (report.prefillRows === 0) decodeTokens += ev.tokens.length;
      if (ev.finish) {
        out.finish = ev.finish;
        if (ev.error !== undefined) out.error = ev.error;
      }
    }
  }
  const generated = outputs.reduce((a, o) => a + o.tokens.length, 0);
  return {
    outputs: outputs.map((o, id) => {
      const logits = loop.takePromptLogits(id);
      return {
        tokens: o.tokens, finishReason: o.finish ?? 'error',
        ...(logits ? { promptLogits: logits } : {}), ...(o.logprobs ? { logprobs: o.logprobs } : {}),
        ...(o.promptLogprobs ? { promptLogprobs: o.promptLogprobs } : {}), ...(o.error !== undefined ? { error: o.error } : {}),
      };
    }),
    stats: {
      promptTokens: requests.reduce((a, r) => a + r.prompt.length, 0),
      generatedTokens: generated,
      prefillMs,
      decodeMs,
      tokensPerSecond: decodeMs > 0 ? (decodeTokens * 1000) / decodeMs : 0,
      decodeMsSteps,
      steps,
      ...(speculationK !== undefined ? { speculation: { k: speculationK, verifySteps: steps.verify, drafted, accepted, acceptanceRate: drafted ? accepted / drafted : 0 } } : {}),
    },
  };
}
