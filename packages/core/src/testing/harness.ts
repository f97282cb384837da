import type { LayerLimits, SpeculationMode, TransformerLayer } from '../contract/layer.js';
import { fromBf16, toBf16 } from '../device/dtype.js';
import type { GpuBackend } from '../device/gpu-backend.js';
import { StepDriver, type StepPath } from '../driver/step-driver.js';
import type { Sequence } from '../driver/sequence.js';
import type { MetralePlugin } from '../plugin/define-plugin.js';
import type { WeightSource } from '../weights/weight-source.js';
import { faultInjectingBackend, type TransferCounts } from './capture-fault.js';
import type { Script, ScriptOp } from './script.js';

export interface LayerSetup {
  readonly plugin: MetralePlugin;
  readonly layerType: string;
  readonly config: Readonly<Record<string, unknown>>;
  readonly layerIndex: number;
  readonly weights: WeightSource;
  readonly backend: () => GpuBackend;
  readonly limits: LayerLimits;
  readonly rowDtype: 'f32' | 'bf16';
  /** Rows per page of the driver's KV page pool. */
  readonly kvPageSize: number;
}

export interface RunMode {
  readonly graphs: boolean;
  readonly speculation: SpeculationMode;
  readonly failCaptures: boolean;
}

export interface StepRecord {
  readonly index: number;
  readonly op: ScriptOp['op'];
  readonly path?: StepPath;
  /** Output rows of the real sequences, as f32. */
  readonly output?: Float32Array;
  /** inspectState of every open sequence, by script sequence id. */
  readonly snapshot: Record<number, unknown>;
}

/** One layer on one fresh backend and driver, running scripts and recording every step. */
export class Harness {
  readonly gpu: GpuBackend;
  readonly counts: TransferCounts;
  readonly layer: TransformerLayer;
  readonly driver: StepDriver;
  readonly #inner: GpuBackend;
  readonly #seqs = new Map<number, Sequence>();
  readonly #rowDtype: 'f32' | 'bf16';

  constructor(setup: LayerSetup, mode: RunMode) {
    this.#inner = setup.backend();
    const { gpu, counts } = faultInjectingBackend(this.#inner, { failCaptures: mode.failCaptures });
    this.gpu = gpu;
    this.counts = counts;
    this.#rowDtype = setup.rowDtype;
    this.layer = setup.plugin.create({
      gpu, layerType: setup.layerType, config: setup.config, layerIndex: setup.layerIndex, weights: setup.weights, limits: setup.limits,
    });
    this.driver = new StepDriver({
      gpu, layers: [this.layer], limits: setup.limits, graphs: mode.graphs, speculation: mode.speculation, kvCache: { pageSize: setup.kvPageSize },
    });
  }

  seq(id: number): Sequence {
    const s = this.#seqs.get(id);
    if (!s) throw new Error(`script error: sequence ${id} is not open`);
    return s;
  }

  /** Runs a script from its first op, recording each step. */
  run(script: Script): StepRecord[] {
    return script.map((op, index) => this.step(op, index));
  }

  step(op: ScriptOp, index: number): StepRecord {
    const d = this.driver;
    switch (op.op) {
      case 'open':
        this.#seqs.set(op.seq, d.open(op.prefix));
        return { index, op: op.op, snapshot: this.snapshot() };
      case 'close':
        d.close(this.seq(op.seq));
        this.#seqs.delete(op.seq);
        return { index, op: op.op, snapshot: this.snapshot() };
      case 'prefill': {
        const r = d.prefill({ seqs: op.seqs.map((s) => this.seq(s)), lengths: op.lengths, tokens: op.tokens, input: this.#encode(op.input) });
        return { index, op: op.op, path: r.path, output: this.#decode(d.readOutput(r)), snapshot: this.snapshot() };
      }
      case 'decode': {
        const r = d.decode({ seqs: op.seqs.map((s) => this.seq(s)), tokens: op.tokens, input: this.#encode(op.input) });
        return { index, op: op.op, path: r.path, output: this.#decode(d.readOutput(r)), snapshot: this.snapshot() };
      }
      case 'verify': {
        const r = d.verify({ seqs: op.seqs.map((s) => this.seq(s)), k: op.k, tokens: op.tokens, input: this.#encode(op.input) });
        const output = this.#decode(d.readOutput(r));
        d.accept(op.accepted);
        return { index, op: op.op, path: r.path, output, snapshot: this.snapshot() };
      }
    }
  }

  /** inspectState of every open sequence. */
  snapshot(): Record<number, unknown> {
    const out: Record<number, unknown> = {};
    if (!this.layer.inspectState) return out;
    for (const [id, seq] of this.#seqs) out[id] = this.layer.inspectState(this.driver.stateOf(seq, 0));
    return out;
  }

  /** A digest of all device memory (synchronises). */
  digest(): string {
    this.gpu.synchronize();
    return this.gpu.memoryDigest();
  }

  #encode(rows: Float32Array): ArrayBufferView {
    return this.#rowDtype === 'bf16' ? toBf16(rows) : rows;
  }

  #decode(bytes: Uint8Array): Float32Array {
    if (this.#rowDtype === 'bf16') return fromBf16(new Uint16Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 2));
    return new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
  }

  dispose(): void {
    try {
      this.driver.dispose();
      this.layer.dispose();
    } finally {
      this.#inner.dispose();
    }
  }
}

/** Runs `fn` with a harness and always disposes it. */
export function withHarness<T>(setup: LayerSetup, mode: RunMode, fn: (h: Harness) => T): T {
  const h = new Harness(setup, mode);
  try {
    return fn(h);
  } finally {
    h.dispose();
  }
}
