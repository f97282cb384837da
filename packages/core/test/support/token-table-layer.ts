import {
  defineKernel,
  definePlugin,
  expectShape,
  toF32,
  type CreateLayerContext,
  type DevicePtr,
  type GpuBackend,
  type LayerState,
  type LayerStep,
  type Stream,
  type TransformerLayer,
} from '../../src/index.js';

/**
 * A test layer shaped like Gemma 3n's per-layer embeddings: out = in + table[token], with the
 * table on the host and a small device cache of rows filled by `decodePrestage` under LRU. What
 * a failed capture consumes (the `armed` flag) is restored by `decodePrestageRearm` without
 * touching the LRU again.
 */
export interface TokenTableState extends LayerState {
  armed: boolean;
  staged: Int32Array;
  lastTokens: Int32Array;
}

const addRows = defineKernel({
  name: 'test.token-table.add-rows',
  params: { input: 'ptr', output: 'ptr', cache: 'ptr', index: 'ptr', slots: 'ptr', rowStarts: 'ptr', batch: 'i32', hidden: 'i32', maxK: 'i32' },
  cpu: (a, { mem }) => {
    const rowStarts = mem.i32(a.rowStarts, a.batch + 1);
    const rows = rowStarts[a.batch]!;
    const slots = mem.i32(a.slots, a.batch);
    const input = mem.f32(a.input, rows * a.hidden);
    const output = mem.f32(a.output, rows * a.hidden);
    for (let p = 0; p < a.batch; p++) {
      const slot = slots[p]!;
      if (slot < 0) continue;
      for (let row = rowStarts[p]!; row < rowStarts[p + 1]!; row++) {
        const cacheRow = mem.i32(a.index + BigInt((slot * a.maxK + row - rowStarts[p]!) * 4), 1)[0]!;
        const src = mem.f32(a.cache + BigInt(cacheRow * a.hidden * 4), a.hidden);
        for (let i = 0; i < a.hidden; i++) output[row * a.hidden + i] = input[row * a.hidden + i]! + src[i]!;
      }
    }
  },
});

const addPacked = defineKernel({
  name: 'test.token-table.add-packed',
  params: { input: 'ptr', output: 'ptr', rows: 'ptr', n: 'i32' },
  cpu: (a, { mem }) => {
    const input = mem.f32(a.input, a.n);
    const rows = mem.f32(a.rows, a.n);
    const output = mem.f32(a.output, a.n);
    for (let i = 0; i < a.n; i++) output[i] = input[i]! + rows[i]!;
  },
});

export class TokenTableLayer implements TransformerLayer<TokenTableState> {
  readonly type = 'token-table';
  readonly inputRowBytes: number;
  readonly outputRowBytes: number;
  protected readonly gpu: GpuBackend;
  readonly #hidden: number;
  readonly #maxK: number;
  readonly #table: Float32Array;
  readonly #cache: DevicePtr;
  readonly #index: DevicePtr;
  readonly #prefillRows: DevicePtr;
  readonly #states = new Set<TokenTableState>();
  /** token → cache row, in LRU order (oldest first). */
  readonly #lru = new Map<number, number>();
  readonly #freeRows: number[];
  hits = 0;
  misses = 0;

  constructor(context: CreateLayerContext) {
    this.gpu = context.gpu;
    this.#hidden = context.config.hidden_size as number;
    const vocab = context.config.vocab_size as number;
    const table = context.weights.get('table');
    expectShape(table, [vocab, this.#hidden]);
    this.#table = toF32(table);
    this.#maxK = context.limits.maxK;
    const cacheRows = context.limits.maxBatch * context.limits.maxK + 2;
    this.#freeRows = Array.from({ length: cacheRows }, (_, i) => i);
    this.inputRowBytes = this.outputRowBytes = this.#hidden * 4;
    this.#cache = this.gpu.alloc(cacheRows * this.#hidden * 4);
    this.#index = this.gpu.alloc(context.limits.maxSeqs * this.#maxK * 4);
    this.#prefillRows = this.gpu.alloc(context.limits.maxRows * this.#hidden * 4);
  }

  openState(slot: number): TokenTableState {
    const s = { slot, armed: false, staged: new Int32Array(this.#maxK), lastTokens: new Int32Array(0) };
    this.#states.add(s);
    return s;
  }

  closeState(state: TokenTableState): void {
    this.#states.delete(state);
  }

  inspectState(state: TokenTableState): unknown {
    // Not the LRU order nor hit counts: rejected rows' tokens touch the LRU without changing any
    // result. Prestage work done twice shows in the host→device bytes the kit counts.
    return { armed: state.armed };
  }

  decodePrestage(tokens: Int32Array, state: TokenTableState, _gpu: GpuBackend, _stream: Stream): void {
    state.lastTokens = tokens.slice();
    this.stage(tokens, state);
  }

  /** The prestage work: LRU lookups, uploads of missed rows, slot indices for the graph. */
  protected stage(tokens: Int32Array, state: TokenTableState): void {
    tokens.forEach((token, r) => (state.staged[r] = this.#lookup(token)));
    this.gpu.upload(this.#index + BigInt(state.slot * this.#maxK * 4), state.staged.subarray(0, tokens.length));
    state.armed = true;
  }

  decodePrestageRearm(state: TokenTableState): void {
    state.armed = true;
  }

  /** A replay consumed the prestaged rows just as an eager forward does. */
  syncReplayedStep(state: TokenTableState, _seqLen: number, _k: number): void {
    state.armed = false;
  }

  #lookup(token: number): number {
    const row = this.#lru.get(token);
    if (row !== undefined) {
      this.hits++;
      this.#lru.delete(token);
      this.#lru.set(token, row);
      return row;
    }
    this.misses++;
    const inFlight = new Set<number>();
    for (const s of this.#states) if (s.armed) for (const r of s.staged) inFlight.add(r);
    let free = this.#freeRows.pop();
    if (free === undefined) {
      for (const [t, r] of this.#lru) {
        if (inFlight.has(r)) continue;
        this.#lru.delete(t);
        free = r;
        break;
      }
    }
    if (free === undefined) throw new Error('token-table: every cache row is in flight');
    this.gpu.upload(this.#cache + BigInt(free * this.#hidden * 4), this.#table.subarray(token * this.#hidden, (token + 1) * this.#hidden));
    this.#lru.set(token, free);
    return free;
  }

  forward(step: LayerStep<TokenTableState>): void {
    const h = this.#hidden;
    if (step.phase === 'prefill') {
      const rows = new Float32Array(step.rows * h);
      step.host.tokens.forEach((t, i) => rows.set(this.#table.subarray(t * h, (t + 1) * h), i * h));
      this.gpu.upload(this.#prefillRows, rows);
      this.gpu.launch(addPacked, { grid: 1, block: 1, stream: step.stream }, { input: step.input, output: step.output, rows: this.#prefillRows, n: step.rows * h });
      return;
    }
    for (const s of step.host.states) {
      if (s && !s.armed) throw new Error(`token-table: slot ${s.slot} ran a step without its prestage`);
      if (s) s.armed = false;
    }
    const t = step.tables;
    this.gpu.launch(
      addRows,
      { grid: step.rows, block: 1, stream: step.stream },
      { input: step.input, output: step.output, cache: this.#cache, index: this.#index, slots: t.slots, rowStarts: t.rowStarts, batch: step.batch, hidden: h, maxK: this.#maxK },
    );
  }

  dispose(): void {
    for (const p of [this.#cache, this.#index, this.#prefillRows]) this.gpu.free(p);
  }
}

/** Broken on purpose: re-arming redoes the prestage (a second LRU touch, maybe a second upload). */
export class RearmRedoesPrestageLayer extends TokenTableLayer {
  override decodePrestageRearm(state: TokenTableState): void {
    this.stage(state.lastTokens, state);
  }
}

export const tokenTablePlugin = (Layer: typeof TokenTableLayer = TokenTableLayer) =>
  definePlugin({
    name: Layer === TokenTableLayer ? 'token-table' : 'token-table-broken',
    version: '0.0.0',
    specificationVersion: '1.0.0',
    layerTypes: ['token-table'],
    create: (context) => new Layer(context),
  });
