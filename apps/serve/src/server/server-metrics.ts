import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { StepStats } from '../engine/protocol.js';

const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2.5, 5, 10, 20, 40, 80];

/**
 * What `/metrics` exposes (Prometheus text format), in its own registry so two servers in one
 * process (tests) never share counts. Names follow Prometheus conventions: `_total` counters,
 * `_seconds` histograms.
 */
export class ServerMetrics {
  readonly registry = new Registry();
  readonly httpRequests: Counter<'route' | 'code'>;
  readonly requestsFinished: Counter<'finish_reason'>;
  readonly promptTokens: Counter;
  readonly generationTokens: Counter;
  readonly running: Gauge;
  readonly waiting: Gauge;
  readonly inFlight: Gauge;
  readonly timeToFirstToken: Histogram;
  readonly interTokenLatency: Histogram;
  readonly requestDuration: Histogram;
  readonly steps: Counter<'kind'>;
  readonly specDrafted: Counter;
  readonly specAccepted: Counter;
  readonly specAcceptance: Gauge;
  readonly modelLoaded: Gauge;

  constructor(options: { processMetrics?: boolean } = {}) {
    const registers = [this.registry];
    if (options.processMetrics ?? true) collectDefaultMetrics({ register: this.registry, prefix: 'metrale_process_' });
    this.httpRequests = new Counter({ name: 'metrale_http_requests_total', help: 'HTTP requests answered, by route and status code', labelNames: ['route', 'code'], registers });
    this.requestsFinished = new Counter({ name: 'metrale_requests_finished_total', help: 'Generation requests finished, by finish reason (stop, length, abort, error)', labelNames: ['finish_reason'], registers });
    this.promptTokens = new Counter({ name: 'metrale_prompt_tokens_total', help: 'Prompt tokens of accepted generation requests', registers });
    this.generationTokens = new Counter({ name: 'metrale_generation_tokens_total', help: 'Tokens generated for clients: usage.completion_tokens summed, plus what aborted requests received', registers });
    this.running = new Gauge({ name: 'metrale_requests_running', help: 'Sequences holding a cache slot in the engine', registers });
    this.waiting = new Gauge({ name: 'metrale_requests_waiting', help: 'Requests queued in the engine for a slot', registers });
    this.inFlight = new Gauge({ name: 'metrale_requests_in_flight', help: 'Generation requests accepted and not yet answered', registers });
    this.timeToFirstToken = new Histogram({ name: 'metrale_time_to_first_token_seconds', help: 'From a request arriving to its first generated token', buckets: LATENCY_BUCKETS, registers });
    this.interTokenLatency = new Histogram({ name: 'metrale_inter_token_latency_seconds', help: 'Between consecutive generated tokens of a request (a step that yields several tokens counts its time once, spread over them)', buckets: LATENCY_BUCKETS, registers });
    this.requestDuration = new Histogram({ name: 'metrale_request_duration_seconds', help: 'From a generation request arriving to its last token', buckets: LATENCY_BUCKETS, registers });
    this.steps = new Counter({ name: 'metrale_engine_steps_total', help: 'Engine steps, by kind (prefill, decode, verify)', labelNames: ['kind'], registers });
    this.specDrafted = new Counter({ name: 'metrale_spec_draft_tokens_total', help: 'Draft tokens proposed by speculative decoding', registers });
    this.specAccepted = new Counter({ name: 'metrale_spec_accepted_tokens_total', help: 'Draft tokens accepted by verification', registers });
    this.specAcceptance = new Gauge({ name: 'metrale_spec_acceptance_rate', help: 'Accepted over drafted tokens since start', registers });
    this.modelLoaded = new Gauge({ name: 'metrale_model_loaded', help: '1 when the model is ready to serve', registers });
  }

  /** One engine step's report. */
  recordStep(stats: StepStats | undefined, running: number, waiting: number): void {
    this.running.set(running);
    this.waiting.set(waiting);
    if (!stats) return;
    if (stats.prefillSeqs > 0) this.steps.inc({ kind: 'prefill' });
    if (stats.decodeSeqs > 0) this.steps.inc({ kind: stats.k > 1 ? 'verify' : 'decode' });
    if (stats.drafted > 0) {
      this.specDrafted.inc(stats.drafted);
      this.specAccepted.inc(stats.accepted);
    }
  }

  async text(): Promise<string> {
    const drafted = (await this.specDrafted.get()).values[0]?.value ?? 0;
    const accepted = (await this.specAccepted.get()).values[0]?.value ?? 0;
    this.specAcceptance.set(drafted > 0 ? accepted / drafted : 0);
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}
