import {
  InvalidArgumentError, defineKernel, type DevicePtr, type GpuBackend, type KvPageBinding, type LayerState, type LayerStep, type Stream, type TransformerLayer,
} from '../../src/index.js';

/** A mixing of the whole context into a number in [0, 1): any wrong or missing cached row changes it. */
function contextNoise(c: number, j: number): number {
  const x = Math.sin(c * 0.013 + (j + 1) * 12.9898) * 43758.5453;
  return x - Math.floor(x);
}

const pagedContextKernel = defineKernel({
  name: 'test.paged_context',
  params: {
    tokens: 'ptr', positions: 'ptr', slots: 'ptr', rowStarts: 'ptr', blockTable: 'ptr', cache: 'ptr', table: 'ptr', out: 'ptr',
    batch: 'i32', vocab: 'i32', pageSize: 'i32', pagesPerSeq: 'i32', pages: 'i32', state: 'ptr', stateWidth: 'i32',
  },
  cpu: (a, { mem }) => {
    const rowStarts = mem.i32(a.rowStarts, a.batch + 1);
    const rows = rowStarts[a.batch]!;
    const tokens = mem.i32(a.tokens, rows);
    const positions = mem.i32(a.positions, rows);
    const slots = mem.i32(a.slots, a.batch);
    const cache = mem.f32(a.cache, a.pages * a.pageSize);
    const table = mem.f32(a.table, a.vocab * a.vocab);
    const out = mem.f32(a.out, rows * a.vocab);
    for (let p = 0; p < a.batch; p++) {
      const slot = slots[p]!;
      if (slot < 0) continue;
      const bt = mem.i32(a.blockTable + BigInt(4 * slot * a.pagesPerSeq), a.pagesPerSeq);
      const at = (pos: number) => bt[Math.floor(pos / a.pageSize)]! * a.pageSize + (pos % a.pageSize);
      // A recurrent part (state per slot) when the layer keeps one: s ← 0.5·s + token.
      const state = a.stateWidth ? mem.f32(a.state + BigInt(4 * slot * a.stateWidth), a.stateWidth) : undefined;
      for (let r = rowStarts[p]!; r < rowStarts[p + 1]!; r++) {
        const pos = positions[r]!;
        const t = tokens[r]!;
        cache[at(pos)] = t + 1;
        let c = 0;
        for (let j = 0; j <= pos; j++) c += (j + 1) * cache[at(j)]!;
        if (state) {
          state[0] = 0.5 * state[0]! + t;
          c += 7 * state[0]!;
        }
        for (let j = 0; j < a.vocab; j++) out[r * a.vocab + j] = table[t * a.vocab + j]! + 4 * contextNoise(c, j);
      }
    }
  },
});

/**
 * Token ids → logits that depend on every earlier token through a paged cache (one f32 per row,
 * in the driver's shared page pool), and, with `recurrent`, on a per-slot recurrent state that
 * can be saved and restored (as GDN's). Outputs are exact (no rounding that depends on the
 * batch), so a sequence that starts on cached pages, or is recomputed after a preemption, gives
 * the same tokens as one that never did. Decode and prefill only (no verify).
 */
export class PagedContextLayer implements TransformerLayer<LayerState> {
  readonly type = 'paged-context';
  readonly inputRowBytes = 0;
  readonly outputRowBytes: number;
  readonly #table: DevicePtr;
  readonly #state: DevicePtr;
  #cache: { binding: KvPageBinding; ptr: DevicePtr } | undefined;
  #snapshots: DevicePtr = 0n;
  declare stateSnapshotBytes?: () => number;
  declare stateSnapshotBind?: (count: number) => void;
  declare saveStateSnapshot?: (state: LayerState, index: number, stream: Stream) => void;

  constructor(
    private readonly gpu: GpuBackend,
    readonly vocab: number,
    table: Float32Array,
    private readonly maxSeqs: number,
    readonly recurrent = false,
  ) {
    this.outputRowBytes = 4 * vocab;
    this.#table = gpu.alloc(table.byteLength);
    gpu.upload(this.#table, table);
    this.#state = gpu.alloc(4 * maxSeqs);
    if (recurrent) {
      this.stateSnapshotBytes = () => 4;
      this.stateSnapshotBind = (count: number) => {
        if (this.#snapshots) gpu.free(this.#snapshots);
        this.#snapshots = count > 0 ? gpu.alloc(4 * count) : 0n;
      };
      this.saveStateSnapshot = (state: LayerState, index: number, stream: Stream) => {
        this.gpu.copyDeviceAsync(this.#snapshots + BigInt(4 * index), this.#state + BigInt(4 * state.slot), 4, stream);
      };
    }
  }

  kvPageBytes(pageSize: number): number {
    return 4 * pageSize;
  }

  kvBind(binding: KvPageBinding): void {
    this.kvUnbind();
    this.#cache = { binding, ptr: this.gpu.alloc(4 * binding.pages * binding.pageSize) };
  }

  kvUnbind(): void {
    if (this.#cache) this.gpu.free(this.#cache.ptr);
    this.#cache = undefined;
  }

  openState(slot: number): LayerState {
    this.gpu.memsetAsync(this.#state + BigInt(4 * slot), 0, 4, this.gpu.defaultStream);
    this.gpu.synchronize(this.gpu.defaultStream);
    return { slot };
  }

  closeState(): void {}

  resumeAt(state: LayerState, _length: number, snapshot: number | undefined, stream: Stream): void {
    if (!this.recurrent) return;
    if (snapshot === undefined) throw new InvalidArgumentError('paged-context: a recurrent layer resumes from a snapshot');
    this.gpu.copyDeviceAsync(this.#state + BigInt(4 * state.slot), this.#snapshots + BigInt(4 * snapshot), 4, stream);
  }

  forward(step: LayerStep<LayerState>): void {
    const c = this.#cache;
    if (!c) throw new InvalidArgumentError('paged-context: forward before kvBind');
    if (step.phase === 'verify') throw new InvalidArgumentError('paged-context: no verify');
    const { binding } = c;
    step.gpu.launch(pagedContextKernel, { grid: 1, block: 1, stream: step.stream }, {
      tokens: step.tables.tokens, positions: step.tables.positions, slots: step.tables.slots, rowStarts: step.tables.rowStarts,
      blockTable: binding.blockTable, cache: c.ptr, table: this.#table, out: step.output,
      batch: step.batch, vocab: this.vocab, pageSize: binding.pageSize, pagesPerSeq: binding.pagesPerSeq, pages: binding.pages,
      state: this.#state, stateWidth: this.recurrent ? 1 : 0,
    });
  }

  dispose(): void {
    this.gpu.free(this.#table);
    this.gpu.free(this.#state);
    this.kvUnbind();
    if (this.#snapshots) this.gpu.free(this.#snapshots);
    this.#snapshots = 0n;
  }
}
