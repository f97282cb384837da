import { UsageError } from '../errors/cli-errors.js';
import { parseNgramSpec } from '@metrale/core';
import { FP8_TENSOR_CORE_MIN_BATCH } from '@metrale/layer-std';
import { Presets, SingleBar } from 'cli-progress';
import type { DtypeChoice } from '@metrale/core';
import { Command, InvalidArgumentError, Option } from 'commander';
import { BACKEND_CHOICES, type BackendChoice } from '../backends/select-backend.js';
import type { CliContext } from '../cli-context.js';
import { EngineClient } from '../engine/engine-client.js';
import type { EngineSetup, ModelInfo } from '../engine/build-engine.js';
import { apiKeysFrom } from '../server/api-key.js';
import { createServer } from '../server/create-server.js';
import { ServerContext } from '../server/server-context.js';
import { ServerMetrics } from '../server/server-metrics.js';
import type { PluginsLoaded } from '../engine/protocol.js';
import { byteSize, collect, dtypeOption, nonNegative, positiveInt, probability, registrySetup, speculationSpec, withPluginOptions, type PluginOptions } from './options.js';

interface ServeOptions extends PluginOptions {
  readonly model?: string;
  readonly port: number;
  readonly host: string;
  readonly backend: BackendChoice;
  readonly dtype: DtypeChoice;
  readonly spec?: string;
  readonly maxBatch: number;
  readonly maxQueue: number;
  readonly maxModelLen?: number;
  readonly gpuMemoryUtilization?: number;
  readonly kvCacheMemory?: number;
  readonly blockSize: number;
  readonly prefixCaching: boolean;
  readonly prefillChunk: number;
  readonly servedModelName?: string;
  readonly cacheDir?: string;
  readonly graphs: boolean;
  readonly asyncScheduling: boolean;
  readonly logLevel: string;
  readonly shutdownTimeout: number;
  readonly loadDelayMs: number;
  readonly progress: 'auto' | 'always' | 'never';
  readonly apiKey?: string[];
  readonly requestTimeout: number;
  readonly keepAliveTimeout: number;
  readonly generationTimeout: number;
  readonly tokenizerWorkers: number;
  readonly generationConfig: string;
  readonly faultAfterSteps?: number;
  readonly tensorParallelSize: number;
  readonly enableExpertParallel?: boolean;
}

const positiveNumber = (value: string): number => {
  const n = nonNegative(value);
  if (n === 0) throw new InvalidArgumentError(`expected a number > 0, got '${value}'`);
  return n;
};

const port = (value: string): number => {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new InvalidArgumentError(`expected a port between 0 and 65535, got '${value}'`);
  return n;
};

export function serveCommand(ctx: CliContext): Command {
  return withPluginOptions(new Command('serve')
    .description('serve a checkpoint (default: the embedded model) over an OpenAI-compatible HTTP API')
    .option('--model <dir>', 'checkpoint directory (config.json, safetensors, tokenizer.json); default: the embedded model, made on first start'))
    .option('--port <n>', 'TCP port (0: any free one)', port, 8000)
    .option('--host <addr>', 'address to listen on', '127.0.0.1')
    .addOption(new Option('--backend <name>', 'device to run on').choices(BACKEND_CHOICES).default('auto'))
    .addOption(dtypeOption())
    .option('--spec <proposer>', 'speculative decoding: ngram, or ngram:k=K[,min=N,max=N,adaptive=0|1] (adaptive=0 verifies whenever there are drafts; 1, the default, only where measured faster than plain decode)', speculationSpec)
    .option('--max-batch <n>', `sequences decoded together at most (each holds a cache slot; from ${FP8_TENSOR_CORE_MIN_BATCH}, block-FP8 experts decode on tensor cores: faster for many sequences, slower for one)`, positiveInt, 32)
    .option('--max-queue <n>', 'requests waiting for a slot at most; more get 429', (v) => Math.floor(nonNegative(v)), 256)
    .option('--max-model-len <n>', "prompt + completion tokens per request (default: the model's max_position_embeddings)", positiveInt)
    .option('--gpu-memory-utilization <u>', 'share of the device memory the server may take, in (0, 1]; the KV cache gets what the weights and buffers leave of it (default 0.9; on the CPU backend, given only to size by host memory)', probability)
    .option('--kv-cache-memory <size>', 'KV cache size (e.g. 8GiB), instead of sizing it from --gpu-memory-utilization (default on the CPU backend: 256MiB)', byteSize)
    .option('--block-size <n>', 'tokens per KV-cache page: the unit of allocation and of prefix sharing', positiveInt, 16)
    .option('--no-prefix-caching', 'prefill every prompt in full instead of starting on the cached blocks a repeated prefix left')
    // The default by measurement (docs/benchmarks.md, 80B-shaped prefill): long prompts near their
    // best rate, while a decode beside one waits a single step of this many rows.
    .option('--prefill-chunk <n>', 'prompt tokens a sequence prefills per step (long prompts take several, so decodes keep flowing)', positiveInt, 1024)
    .option('--served-model-name <name>', 'the name clients pass as "model"')
    .option('--cache-dir <dir>', 'where the embedded model is written (default: $METRALE_CACHE_DIR, ~/.cache/metrale, or the temp dir)')
    .option('--no-graphs', 'run decode and verify eagerly instead of capturing graphs')
    .option('--no-async-scheduling', "wait for each greedy decode step's tokens before launching the next (default: launch the next first, its input the tokens still on the device)")
    .option('--tensor-parallel-size <n>', 'split the model over n devices (rank r on device r; on the cpu backend, n simulated ranks on threads)', positiveInt, 1)
    .option('--enable-expert-parallel', 'with --tensor-parallel-size: whole experts per rank instead of every expert split')
    .addOption(new Option('--log-level <level>', 'log level').choices(['fatal', 'error', 'warn', 'info', 'debug', 'trace']).default('info'))
    .option('--shutdown-timeout <s>', 'on SIGINT/SIGTERM, seconds in-flight requests get to finish before they are cancelled', nonNegative, 30)
    .addOption(new Option('--progress <when>', 'progress bar on stderr while the weights load (auto: on a terminal, for checkpoints over 256 MiB)').choices(['auto', 'always', 'never']).default('auto'))
    .option('--api-key <key>', 'require "Authorization: Bearer <key>" on every path but /health and /metrics (repeatable; default: $METRALE_API_KEY, else $VLLM_API_KEY)', collect)
    .option('--request-timeout <s>', 'seconds a client has to send a request (headers and body); slower ones get 408', positiveNumber, 30)
    .option('--keep-alive-timeout <s>', 'seconds an idle keep-alive connection stays open', positiveNumber, 5)
    .option('--generation-timeout <s>', 'seconds a generation request may take from arrival to its last byte, streaming included (0: no limit)', nonNegative, 600)
    .option('--tokenizer-workers <n>', 'threads that tokenize prompts and render chat templates, off the HTTP thread', positiveInt, 1)
    .option('--generation-config <auto|vllm|dir>', "sampling defaults requests override: 'auto' (the model's generation_config.json), 'vllm' (none: OpenAI's), or a folder holding a generation_config.json", 'auto')
    .addOption(new Option('--load-delay-ms <ms>', 'wait before loading the weights (testing)').argParser(Number).default(0).hideHelp())
    .addOption(new Option('--fault-after-steps <n>', 'make the device unusable after N engine steps, as a device fault would (testing)').argParser(Number).hideHelp())
    .addHelpText('after', [
      '',
      'Endpoints: GET /v1/models, POST /v1/completions, POST /v1/chat/completions (stream: true for SSE),',
      'GET /health (503 while loading), GET /metrics (Prometheus), POST /tokenize, POST /detokenize.',
      'Logs are JSON lines on stdout.',
    ].join('\n'))
    .action(async (options: ServeOptions) => {
      ctx.exitCode = await serve(options, ctx);
    });
}

async function serve(o: ServeOptions, ctx: CliContext): Promise<number> {
  if (o.enableExpertParallel && o.tensorParallelSize === 1) throw new UsageError('--enable-expert-parallel needs --tensor-parallel-size > 1');
  const setup: EngineSetup = {
    ...(o.model !== undefined ? { modelDir: o.model } : {}),
    ...(o.cacheDir !== undefined ? { cacheDir: o.cacheDir } : {}),
    ...(o.maxModelLen !== undefined ? { maxModelLen: o.maxModelLen } : {}),
    ...(o.gpuMemoryUtilization !== undefined ? { gpuMemoryUtilization: o.gpuMemoryUtilization } : {}),
    ...(o.kvCacheMemory !== undefined ? { kvCacheMemory: o.kvCacheMemory } : {}),
    blockSize: o.blockSize,
    prefixCaching: o.prefixCaching,
    ...(o.spec !== undefined ? { spec: parseNgramSpec(o.spec) } : {}),
    backend: o.backend,
    dtype: o.dtype,
    maxBatch: o.maxBatch,
    prefillChunk: o.prefillChunk,
    graphs: o.graphs,
    asyncScheduling: o.asyncScheduling,
    plugins: registrySetup(o, ctx),
    generationConfig: o.generationConfig,
    tensorParallelSize: o.tensorParallelSize,
    ...(o.enableExpertParallel ? { expertParallel: true } : {}),
  };
  const engine = new EngineClient(setup, { loadDelayMs: o.loadDelayMs, ...(o.faultAfterSteps !== undefined ? { faultAfterSteps: o.faultAfterSteps } : {}) });
  const metrics = new ServerMetrics();
  const limits = { maxQueue: o.maxQueue, generationTimeoutMs: o.generationTimeout * 1000, tokenizerThreads: o.tokenizerWorkers };
  const server = new ServerContext(engine, metrics, limits, o.servedModelName);
  const apiKeys = apiKeysFrom(o.apiKey, process.env);
  const app = createServer(server, {
    logger: { level: o.logLevel }, apiKeys, requestTimeoutMs: o.requestTimeout * 1000, keepAliveTimeoutMs: o.keepAliveTimeout * 1000,
  });
  const log = app.log;

  let bar: SingleBar | undefined;
  let lastLogged = -1;
  engine.on('plugins', (loaded: PluginsLoaded) => {
    // A discovered plugin that failed is skipped, not fatal: the server starts without it.
    for (const w of loaded.warnings) log.warn({ plugin: w.plugin }, w.message);
    const providers = (list: PluginsLoaded['modelTypes']) => Object.fromEntries(list.map((p) => [p.name, p.provider]));
    log.info({ architectures: providers(loaded.modelTypes), layer_types: providers(loaded.layerTypes) }, 'plugins loaded');
  });
  engine.on('model', (info: ModelInfo) => {
    try {
      server.openTokenizer(info.dir);
    } catch (error) {
      log.warn({ err: (error as Error).message }, 'the tokenizer cannot be loaded: only token-id prompts will be served');
    }
    log.info({ model: server.model?.name, dir: info.dir, model_type: info.modelType, architecture_provider: info.provider, embedded: info.embedded, created: info.created, create_ms: Math.round(info.createMs), max_model_len: info.maxModelLen, weight_bytes: info.weightBytes, dtype: info.dtype, tokenizer: server.tokenizer !== undefined, sampling_defaults: info.samplingDefaults }, 'model opened');
    if (info.notice) log.info({ model_type: info.modelType }, info.notice);
    if (Object.keys(info.samplingDefaults).length > 0) {
      log.info({ sampling_defaults: info.samplingDefaults }, "the model's generation_config.json sets the sampling defaults requests override; start with --generation-config vllm to use OpenAI's");
    }
    // A bar for checkpoints that take a while to load, on a terminal only (logs stay JSON).
    const wanted = o.progress === 'always' || (o.progress === 'auto' && process.stderr.isTTY && info.weightBytes > 256 * 1024 * 1024);
    if (wanted) {
      bar = new SingleBar({
        format: 'loading weights [{bar}] {percentage}% | {value}/{total} MiB | {eta_formatted} left', stream: process.stderr,
        // Off a terminal (--progress always), the bar is written as it changes instead of redrawn.
        noTTYOutput: !process.stderr.isTTY, notTTYSchedule: 200,
        // Signals are the server's to handle (graceful shutdown), not the bar's.
        gracefulExit: false,
      }, Presets.shades_classic);
      bar.start(Math.ceil(info.weightBytes / 2 ** 20), 0);
    }
  });
  engine.on('progress', (loaded: number, total: number) => {
    bar?.update(Math.floor(loaded / 2 ** 20));
    const quarter = Math.floor((4 * loaded) / Math.max(1, total));
    if (!bar && quarter > lastLogged) {
      lastLogged = quarter;
      log.info({ loaded_bytes: loaded, total_bytes: total }, 'loading weights');
    }
  });
  engine.on('step', (stats, running: number, waiting: number) => metrics.recordStep(stats, running, waiting));

  let finish!: (code: number) => void;
  const finished = new Promise<number>((resolve) => (finish = resolve));
  let stopping = false;

  const stop = async (why: string, code: number) => {
    if (stopping) return;
    stopping = true;
    server.draining = true;
    bar?.stop();
    log.info({ reason: why, in_flight: engine.inFlight, deadline_s: o.shutdownTimeout }, 'shutting down');
    const deadline = setTimeout(() => {
      log.warn({ in_flight: engine.inFlight }, 'shutdown deadline reached: cancelling the requests still in flight');
      engine.cancelAll('the server is shutting down');
    }, o.shutdownTimeout * 1000);
    try {
      await app.close();
    } finally {
      clearTimeout(deadline);
    }
    await server.close();
    await engine.shutdown();
    log.info({ exit_code: code }, 'stopped');
    finish(code);
  };

  engine.on('ready', (r) => {
    if (server.tokenizer) {
      try {
        server.loadDecoder();
      } catch (error) {
        log.warn({ err: (error as Error).message }, 'the tokenizer cannot be loaded: only token-id prompts will be served');
      }
    }
    bar?.update(bar.getTotal());
    bar?.stop();
    bar = undefined;
    if (r.kv) {
      const kv = r.kv;
      const maxModelLen = engine.info?.maxModelLen;
      log.info({
        kv_cache_tokens: kv.tokens, kv_cache_pages: kv.pages, block_size: kv.pageSize, kv_cache_bytes: kv.bytes, state_snapshots: kv.snapshots,
        prefix_caching: kv.prefixCaching, max_model_len: maxModelLen, max_concurrency_at_max_model_len: maxModelLen ? Number((kv.tokens / maxModelLen).toFixed(2)) : undefined,
      }, `KV cache: ${kv.tokens} tokens fit (${kv.pages} pages of ${kv.pageSize})`);
      if (maxModelLen && kv.tokens < maxModelLen) {
        log.warn({ kv_cache_tokens: kv.tokens, max_model_len: maxModelLen }, 'the KV cache holds fewer tokens than --max-model-len: longer requests will be refused; give the cache more memory or lower --max-model-len');
      }
    }
    log.info({
      backend: r.backend, device: r.device, load_ms: Math.round(r.loadMs), ...(r.captureMs !== undefined ? { graph_capture_ms: Math.round(r.captureMs) } : {}), max_batch: r.maxBatch,
      device_weight_bytes: r.deviceWeightBytes,
    }, 'ready');
  });
  engine.on('failed', (error: Error) => {
    log.error({ err: error.message }, engine.ready ? 'the engine failed' : 'the model failed to load');
    void stop('engine failure', 1);
  });

  const onSignal = (signal: NodeJS.Signals) => {
    if (stopping) {
      log.warn({ signal }, 'second signal: exiting now');
      process.exit(130);
    }
    void stop(signal, 0);
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    const url = await app.listen({ port: o.port, host: o.host });
    log.info({ url, pid: process.pid, api_key_required: apiKeys.length > 0 }, 'listening');
  } catch (error) {
    await engine.shutdown();
    throw error;
  }
  const code = await finished;
  process.off('SIGINT', onSignal);
  process.off('SIGTERM', onSignal);
  return code;
}
