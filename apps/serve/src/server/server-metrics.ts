import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { StepStats } from '../engine/protocol.js';

// vLLM's metric names, labels and buckets (vllm/v1/metrics/loggers.py), so that its Grafana
// dashboards and alerts read metrale unchanged: `vllm:` names labelled with model_name and engine.
// Only what metrale measures is exposed.

const TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560];
const TOKEN_LATENCY_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80];
const REQUEST_LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680];
const ITERATION_TOKEN_BUCKETS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384];
/** Handlers the HTTP counter leaves out, as vLLM's instrumentator does. */
const UNCOUNTED_HANDLERS = new Set(['/metrics', '/health']);

/** 1, 2, 5, 10, 20, 50, … up to `max` (vLLM's build_1_2_5_buckets, for token counts). */
export function buckets125(max: number): number[] {
  const out: number[] = [];
  for (let scale = 1; ; scale *= 10) {
    for (const m of [1, 2, 5]) {
      if (m * scale > max) return out;
      out.push(m * scale);
    }
  }
}

export type FinishedReason = 'stop' | 'length' | 'abort' | 'error';

/** One generation (a choice) at its end, as the request histograms need it. */
export interface FinishedGeneration {
  readonly reason: FinishedReason;
  readonly promptTokens: number;
  readonly generationTokens: number;
  readonly maxTokens: number;
  /** Seconds from arrival to the last token (or the end). */
  readonly e2e: number;
  /** Seconds from the first token to the last, when there was one. */
  readonly decode?: number;
}

type Labels = { model_name: string; engine: string };

/** The vLLM-named series, made once the model (its name and context length) is known. */
class ModelSeries {
  constructor(
    readonly labels: Labels,
    readonly running: Gauge<keyof Labels>,
    readonly waiting: Gauge<keyof Labels>,
    readonly promptTokens: Counter<keyof Labels>,
    readonly generationTokens: Counter<keyof Labels>,
    readonly requestSuccess: Counter<keyof Labels | 'finished_reason'>,
    readonly requestPromptTokens: Histogram<keyof Labels>,
    readonly requestGenerationTokens: Histogram<keyof Labels>,
    readonly requestParamsN: Histogram<keyof Labels>,
    readonly requestParamsMaxTokens: Histogram<keyof Labels>,
    readonly iterationTokens: Histogram<keyof Labels>,
    readonly timeToFirstToken: Histogram<keyof Labels>,
    readonly interTokenLatency: Histogram<keyof Labels>,
    readonly timePerOutputToken: Histogram<keyof Labels>,
    readonly e2eLatency: Histogram<keyof Labels>,
    readonly decodeTime: Histogram<keyof Labels>,
    readonly kvUsage: Gauge<keyof Labels>,
    readonly prefixQueries: Counter<keyof Labels>,
    readonly prefixHits: Counter<keyof Labels>,
    readonly preemptions: Counter<keyof Labels>,
  ) {}
}

/**
 * What `/metrics` exposes (Prometheus text format), in its own registry so two servers in one
 * process (tests) never share counts: vLLM's `vllm:` series, `http_requests_total` as vLLM's
 * instrumentator counts it, and the process's standard metrics (`process_*`, `nodejs_*`, event
 * loop lag included).
 */
export class ServerMetrics {
  readonly registry = new Registry();
  readonly #http: Counter<'handler' | 'method' | 'status'>;
  #series: ModelSeries | undefined;
  #spec: { drafted: Counter<keyof Labels>; accepted: Counter<keyof Labels> } | undefined;

  constructor(options: { processMetrics?: boolean } = {}) {
    if (options.processMetrics ?? true) collectDefaultMetrics({ register: this.registry });
    this.#http = new Counter({ name: 'http_requests_total', help: 'Total number of requests by method, status and handler.', labelNames: ['handler', 'method', 'status'], registers: [this.registry] });
  }

  /** Names the model the `vllm:` series are labelled with; token histograms go up to `maxModelLen`. */
  setModel(name: string, maxModelLen: number): void {
    if (this.#series) return;
    const registers = [this.registry];
    const labelNames = ['model_name', 'engine'] as const;
    const tokens = buckets125(maxModelLen);
    const gauge = (n: string, help: string) => new Gauge({ name: n, help, labelNames, registers });
    const counter = (n: string, help: string) => new Counter({ name: n, help, labelNames, registers });
    const histogram = (n: string, help: string, buckets: number[]) => new Histogram({ name: n, help, labelNames, buckets, registers });
    this.#series = new ModelSeries(
      { model_name: name, engine: '0' },
      gauge('vllm:num_requests_running', 'Number of requests in model execution batches.'),
      gauge('vllm:num_requests_waiting', 'Number of requests waiting to be processed.'),
      counter('vllm:prompt_tokens_total', 'Number of prefill tokens processed.'),
      counter('vllm:generation_tokens_total', 'Number of generation tokens processed.'),
      new Counter({ name: 'vllm:request_success_total', help: 'Count of successfully processed requests.', labelNames: [...labelNames, 'finished_reason'], registers }),
      histogram('vllm:request_prompt_tokens', 'Number of prefill tokens processed.', tokens),
      histogram('vllm:request_generation_tokens', 'Number of generation tokens processed.', tokens),
      histogram('vllm:request_params_n', 'Histogram of the n request parameter.', [1, 2, 5, 10, 20]),
      histogram('vllm:request_params_max_tokens', 'Histogram of the max_tokens request parameter.', tokens),
      histogram('vllm:iteration_tokens_total', 'Histogram of number of tokens per engine_step.', ITERATION_TOKEN_BUCKETS),
      histogram('vllm:time_to_first_token_seconds', 'Histogram of time to first token in seconds.', TTFT_BUCKETS),
      histogram('vllm:inter_token_latency_seconds', 'Histogram of inter-token latency in seconds.', TOKEN_LATENCY_BUCKETS),
      histogram('vllm:request_time_per_output_token_seconds', 'Histogram of time_per_output_token_seconds per request.', TOKEN_LATENCY_BUCKETS),
      histogram('vllm:e2e_request_latency_seconds', 'Histogram of e2e request latency in seconds.', REQUEST_LATENCY_BUCKETS),
      histogram('vllm:request_decode_time_seconds', 'Histogram of time spent in DECODE phase for request.', REQUEST_LATENCY_BUCKETS),
      gauge('vllm:kv_cache_usage_perc', 'KV-cache usage. 1 means 100 percent usage.'),
      counter('vllm:prefix_cache_queries_total', 'Prefix cache queries, in terms of number of queried tokens.'),
      counter('vllm:prefix_cache_hits_total', 'Prefix cache hits, in terms of number of cached tokens.'),
      counter('vllm:num_preemptions_total', 'Cumulative number of preemption from the engine.'),
    );
  }

  /** An answered HTTP request; the status grouped as vLLM's instrumentator groups it (2xx, 4xx, …). */
  httpRequest(handler: string, method: string, status: number): void {
    if (!UNCOUNTED_HANDLERS.has(handler)) this.#http.inc({ handler, method, status: `${Math.floor(status / 100)}xx` });
  }

  /** A request's `n`, once per prompt. */
  requestParams(n: number): void {
    const s = this.#series;
    s?.requestParamsN.observe(s.labels, n);
  }

  /** A generation handed to the engine with `tokens` prompt tokens. */
  promptTokens(tokens: number): void {
    const s = this.#series;
    s?.promptTokens.inc(s.labels, tokens);
  }

  firstToken(seconds: number): void {
    const s = this.#series;
    s?.timeToFirstToken.observe(s.labels, seconds);
  }

  interToken(seconds: number): void {
    const s = this.#series;
    s?.interTokenLatency.observe(s.labels, seconds);
  }

  generationTokens(tokens: number): void {
    const s = this.#series;
    s?.generationTokens.inc(s.labels, tokens);
  }

  finished(g: FinishedGeneration): void {
    const s = this.#series;
    if (!s) return;
    s.requestSuccess.inc({ ...s.labels, finished_reason: g.reason });
    s.requestPromptTokens.observe(s.labels, g.promptTokens);
    s.requestGenerationTokens.observe(s.labels, g.generationTokens);
    s.requestParamsMaxTokens.observe(s.labels, g.maxTokens);
    s.e2eLatency.observe(s.labels, g.e2e);
    if (g.decode !== undefined) {
      s.decodeTime.observe(s.labels, g.decode);
      if (g.generationTokens > 1) s.timePerOutputToken.observe(s.labels, g.decode / (g.generationTokens - 1));
    }
  }

  /** One engine step's report. */
  recordStep(stats: StepStats | undefined, running: number, waiting: number): void {
    const s = this.#series;
    if (!s) return;
    s.running.set(s.labels, running);
    s.waiting.set(s.labels, waiting);
    if (!stats) return;
    s.kvUsage.set(s.labels, stats.kvUsage);
    if (stats.prefixQueries > 0) s.prefixQueries.inc(s.labels, stats.prefixQueries);
    if (stats.prefixHits > 0) s.prefixHits.inc(s.labels, stats.prefixHits);
    if (stats.preemptions > 0) s.preemptions.inc(s.labels, stats.preemptions);
    // The rows the step ran through the model: prompt rows, plus k per decoding sequence.
    const rows = stats.prefillRows + stats.decodeSeqs * Math.max(1, stats.k);
    if (rows > 0) s.iterationTokens.observe(s.labels, rows);
    if (stats.drafted > 0) {
      // Made on the first speculative step, as vLLM has these only with speculation on.
      this.#spec ??= {
        drafted: new Counter({ name: 'vllm:spec_decode_num_draft_tokens_total', help: 'Number of draft tokens.', labelNames: ['model_name', 'engine'], registers: [this.registry] }),
        accepted: new Counter({ name: 'vllm:spec_decode_num_accepted_tokens_total', help: 'Number of accepted tokens.', labelNames: ['model_name', 'engine'], registers: [this.registry] }),
      };
      this.#spec.drafted.inc(s.labels, stats.drafted);
      this.#spec.accepted.inc(s.labels, stats.accepted);
    }
  }

  async text(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}
