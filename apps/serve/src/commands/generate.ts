import { writeFileSync } from 'node:fs';
import {
  Checkpoint, EngineLoop, NgramProposer, StepDriver, checkModelFits, describePrecision, generateAll, encodeSafetensors, gib, loadModel, parseNgramSpec, resolvePrecision, tensorOf,
  type DtypeChoice, type GenerateStats, type GpuBackend, type ModelStack, type Precision, type SamplingParams, type StepRunner, type WeightBytes,
} from '@metrale/core';
import { DeviceSampler } from '@metrale/layer-std';
import { Command, InvalidArgumentError, Option } from 'commander';
import { BACKEND_CHOICES, selectBackend, type BackendChoice } from '../backends/select-backend.js';
import type { CliContext } from '../cli-context.js';
import { UsageError } from '../errors/cli-errors.js';
import { dtypeOption, integer, logprobCount, nonNegative, positiveInt, probability, registrySetup, speculationSpec, withPluginOptions, type PluginOptions } from './options.js';
import { generateLimits } from '../generate/generate-limits.js';
import { textOnlyNotice } from '../models/text-config.js';
import { TextCodec } from '../generate/text-codec.js';
import { PrefillLastRowsHead } from '../engine/prefill-head.js';
import { loadRegistry } from '../plugins/load-registry.js';
import { startTensorParallel } from '../parallel/tensor-parallel-group.js';

interface GenerateOptions extends PluginOptions {
  readonly model: string;
  readonly prompt?: string;
  readonly promptIds?: number[];
  readonly chat?: boolean;
  readonly maxTokens: number;
  readonly greedy?: boolean;
  readonly temperature?: number;
  readonly topP?: number;
  readonly topK?: number;
  readonly minP?: number;
  readonly seed?: number;
  readonly spec?: string;
  readonly backend: BackendChoice;
  readonly json?: boolean;
  readonly ignoreEos?: boolean;
  readonly graphs: boolean;
  readonly promptLogits?: string;
  readonly dtype: DtypeChoice;
  readonly logprobs?: number;
  readonly tensorParallelSize: number;
  readonly enableExpertParallel?: boolean;
}

export function generateCommand(ctx: CliContext): Command {
  return withPluginOptions(new Command('generate')
    .description('generate tokens from a Hugging Face checkpoint directory (greedy or sampled, optionally with n-gram speculation)')
    .requiredOption('--model <dir>', 'checkpoint directory: config.json, model.safetensors (or shards), tokenizer.json'))
    .option('--prompt <text>', 'prompt text (needs tokenizer.json)')
    .option('--prompt-ids <ids>', 'prompt as comma-separated token ids', parseIds)
    .option('--chat', 'wrap --prompt as one user message in the chat template')
    .requiredOption('--max-tokens <n>', 'tokens to generate at most', positiveInt)
    .option('--greedy', 'pick the most likely token (the default without --temperature)')
    .option('--temperature <t>', 'sample at this temperature', nonNegative)
    .option('--top-p <p>', 'nucleus sampling: keep the most likely tokens up to probability p', probability)
    .option('--top-k <k>', 'keep the k most likely tokens', positiveInt)
    .option('--min-p <p>', 'keep tokens at least p times as likely as the best', probability)
    .option('--seed <s>', 'seed of the sampler (default: a random one)', integer)
    .option('--spec <proposer>', 'speculative decoding: ngram, or ngram:k=K[,min=N,max=N,adaptive=0|1] (K draft tokens per step; adaptive=0 verifies whenever there are drafts, 1, the default, only where measured faster than plain decode)', speculationSpec)
    .addOption(new Option('--backend <name>', 'device to run on').choices(BACKEND_CHOICES).default('auto'))
    .addOption(dtypeOption())
    .option('--logprobs <n>', 'with --json: the n most likely tokens and their log-probabilities for every generated token (0..20)', logprobCount)
    .option('--json', 'print one JSON line {"tokens", "text", "stats"} last')
    .option('--ignore-eos', "keep generating past the model's end-of-sequence token")
    .option('--no-graphs', 'run decode and verify eagerly instead of capturing graphs')
    .option('--prompt-logits <file>', 'write the prompt rows\' logits (f32 [prompt, vocab], tensor "logits") to a safetensors file')
    .option('--tensor-parallel-size <n>', 'split the model over n devices (rank r on device r; on the cpu backend, n simulated ranks on threads)', positiveInt, 1)
    .option('--enable-expert-parallel', 'with --tensor-parallel-size: whole experts per rank instead of every expert split')
    .addHelpText('after', [
      '',
      'With --json the last line is {"tokens": [...], "text": "..." | null, "stats": {...}}; stats carry',
      'tokens_per_s, steps, the dtype and the weights\' device bytes and, with --spec, the speculative acceptance.',
      'With --logprobs N it also has "logprobs": one list per generated token of {"token", "logprob"}, best first.',
      'For a multimodal checkpoint (Qwen3.5 as published) it has "notice": the model is served as text only.',
    ].join('\n'))
    .action(async (options: GenerateOptions) => {
      ctx.exitCode = await generate(options, ctx);
    });
}

async function generate(o: GenerateOptions, ctx: CliContext): Promise<number> {
  if ((o.prompt === undefined) === (o.promptIds === undefined)) throw new UsageError('give exactly one of --prompt TEXT and --prompt-ids 1,2,3');
  if (o.greedy && o.temperature !== undefined && o.temperature > 0) throw new UsageError('--greedy and --temperature > 0 contradict each other');
  const sampling: SamplingParams = o.greedy || !o.temperature
    ? {}
    : { temperature: o.temperature, ...(o.topP !== undefined ? { topP: o.topP } : {}), ...(o.topK !== undefined ? { topK: o.topK } : {}), ...(o.minP !== undefined ? { minP: o.minP } : {}), ...(o.seed !== undefined ? { seed: o.seed } : {}) };
  const spec = o.spec === undefined ? undefined : parseNgramSpec(o.spec);
  if (o.logprobs !== undefined && !o.json) throw new UsageError('--logprobs needs --json (the logprobs are part of the JSON line)');

  // Everything that can be wrong with the directory is reported before a device is touched.
  const checkpoint = Checkpoint.open(o.model);
  const registry = await loadRegistry(registrySetup(o, ctx));
  // A discovered plugin that failed is skipped: generate runs without it.
  for (const w of registry.warnings) ctx.err(`warning: ${w.plugin}: ${w.message}`);
  const { architectures, layers: plugins } = registry;
  architectures.forConfig(checkpoint.config, `${checkpoint.dir}/config.json`);
  const codec = TextCodec.fromCheckpoint(checkpoint);
  let prompt: number[];
  if (o.prompt !== undefined) {
    if (!codec) throw new UsageError(`--prompt needs ${checkpoint.dir}/tokenizer.json; give --prompt-ids instead`);
    prompt = o.chat ? codec.encode(codec.chat(o.prompt), false) : codec.encode(o.prompt);
  } else {
    if (o.chat) throw new UsageError('--chat needs --prompt TEXT');
    prompt = o.promptIds!;
  }
  if (prompt.length === 0) throw new UsageError('the prompt has no tokens');
  const precision = resolvePrecision(o.dtype, checkpoint.config, `${checkpoint.dir}/config.json`);

  if (o.enableExpertParallel && o.tensorParallelSize === 1) throw new UsageError('--enable-expert-parallel needs --tensor-parallel-size > 1');

  const gpu: GpuBackend = await selectBackend(o.backend);
  try {
    const limits = generateLimits(prompt.length, o.maxTokens, spec?.k ?? 0);
    // Every prompt row's logits when asked for; else the head computes only the rows sampled from.
    const prefillLastRows = o.promptLogits === undefined;
    let stack: ModelStack;
    let driver: StepRunner;
    let weightBytes: WeightBytes;
    let release: () => Promise<void>;
    let picker: DeviceSampler | undefined;
    if (o.tensorParallelSize > 1) {
      const adapter = architectures.forConfig(checkpoint.config, `${checkpoint.dir}/config.json`);
      weightBytes = checkModelFits(
        checkpoint, gpu, precision, { size: o.tensorParallelSize, ...(adapter.shardRule ? { rule: adapter.shardRule(checkpoint.config) } : {}) },
        adapter.unreadTensors?.(checkpoint.config),
      );
      const group = await startTensorParallel(o.tensorParallelSize, {
        modelDir: checkpoint.dir, backend: gpu.kind === 'cuda' ? 'cuda' : 'cpu', precision, limits, graphs: o.graphs, prefillLastRows,
        expertParallel: o.enableExpertParallel === true, plugins: registrySetup(o, ctx),
        // Pages for every slot at its longest, as the single-device driver sizes them.
        kvCache: {},
      }, registry, checkpoint, gpu);
      ({ stack, driver } = group);
      release = () => group.dispose();
    } else {
      const loaded = loadModel(checkpoint, { gpu, limits, architectures, plugins, precision });
      stack = loaded.stack;
      weightBytes = loaded.weightBytes;
      const single = new StepDriver({ gpu, layers: prefillLastRows ? PrefillLastRowsHead.wrapLast(stack.layers) : stack.layers, limits, graphs: o.graphs });
      driver = single;
      // Decode picks greedy and sampled tokens on the device, as the server does.
      const sampler = (picker = new DeviceSampler(gpu, limits.maxBatch * limits.maxK, { vocab: stack.vocabSize }));
      const s = stack;
      release = async () => {
        single.dispose();
        sampler.dispose();
        s.dispose();
      };
    }
    // A multimodal checkpoint is served as text only: said on stderr, or in the JSON line.
    const notice = textOnlyNotice(checkpoint.config);
    if (!o.json) {
      if (notice) ctx.err(`note: ${notice}`);
      ctx.err(weightsLine(weightBytes, precision, gpu.kind, o.tensorParallelSize));
    }
    try {
      // The loop that serves, with one request: prompt chunks of the driver's rows, then decode.
      const loop = new EngineLoop({
        driver, vocabSize: stack.vocabSize, prefillChunk: limits.maxRows, ...(picker ? { picker } : {}),
        ...(spec ? { speculation: { proposer: new NgramProposer(spec), k: spec.k, adaptive: spec.adaptive } } : {}),
      });
      const { outputs, stats } = generateAll(loop, [{
        prompt, maxTokens: o.maxTokens, sampling, stopTokenIds: o.ignoreEos ? [] : stack.eosTokenIds,
        ...(o.logprobs ? { logprobs: o.logprobs } : {}), ...(o.promptLogits !== undefined ? { promptLogits: true } : {}),
      }], spec?.k);
      const out = outputs[0]!;
      if (out.finishReason === 'error') throw new Error(`generation failed: ${out.error ?? 'unknown error'}`);
      if (o.promptLogits) {
        writeFileSync(o.promptLogits, encodeSafetensors([tensorOf('logits', out.promptLogits!, [prompt.length, stack.vocabSize])]));
      }
      const text = codec ? codec.decode(out.tokens) : null;
      const line = {
        tokens: out.tokens, text,
        stats: {
          ...statsLine(stats, out.finishReason, gpu.kind, prompt.length), dtype: describePrecision(precision), weight_bytes: weightBytes.total,
          tensor_parallel_size: o.tensorParallelSize,
        },
        ...(o.logprobs !== undefined ? { logprobs: out.logprobs?.map((e) => e.top) ?? out.tokens.map(() => []) } : {}),
        ...(notice ? { notice } : {}),
      };
      if (o.json) ctx.out(JSON.stringify(line));
      else {
        ctx.out(text ?? out.tokens.join(' '));
        ctx.err(humanStats(line.stats));
      }
      return 0;
    } finally {
      await release();
    }
  } finally {
    gpu.dispose();
  }
}

function statsLine(s: GenerateStats, finish: string, backend: string, promptTokens: number): Record<string, unknown> {
  const sp = s.speculation;
  return {
    backend,
    prompt_tokens: promptTokens,
    generated_tokens: s.generatedTokens,
    finish_reason: finish,
    tokens_per_s: round(s.tokensPerSecond),
    prefill_ms: round(s.prefillMs),
    decode_ms: round(s.decodeMs),
    steps: s.steps,
    speculative: sp ? { k: sp.k, verify_steps: sp.verifySteps, drafted: sp.drafted, accepted: sp.accepted, acceptance_rate: round(sp.acceptanceRate, 4) } : null,
  };
}

/** The weights' device bytes (per device under tensor parallelism), as `generate` and `serve` print them before the upload. */
export function weightsLine(bytes: WeightBytes, precision: Precision, backend: string, ranks = 1): string {
  const parts = bytes.fp8 ? ` (${gib(bytes.float)} float + ${gib(bytes.fp8)} FP8)` : '';
  return `weights: ${gib(bytes.total)} on ${ranks > 1 ? `each of ${ranks} ${backend} ranks` : backend}${parts}, ${describePrecision(precision)}`;
}

function humanStats(s: Record<string, unknown>): string {
  const sp = s.speculative as { acceptance_rate: number; accepted: number; drafted: number } | null;
  return `${s.generated_tokens} tokens, ${s.tokens_per_s} tokens/s on ${s.backend} (${s.finish_reason})` +
    (sp ? `, speculative acceptance ${(100 * sp.acceptance_rate).toFixed(1)}% (${sp.accepted}/${sp.drafted} drafts)` : '');
}

const round = (x: number, digits = 2): number => Number(x.toFixed(digits));

function parseIds(value: string): number[] {
  const parts = value.split(',').map((p) => p.trim()).filter(Boolean);
  const ids = parts.map(Number);
  if (ids.length === 0 || ids.some((n) => !Number.isInteger(n) || n < 0)) throw new InvalidArgumentError(`expected comma-separated token ids such as 1,2,3, got '${value}'`);
  return ids;
}
