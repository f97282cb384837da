import { defineKernel, type GpuBackend, type LayerState, type LayerStep, type TransformerLayer, type DevicePtr } from '../../src/index.js';

const bigramKernel = defineKernel({
  name: 'test.bigram',
  params: { tokens: 'ptr', positions: 'ptr', table: 'ptr', out: 'ptr', rows: 'i32', vocab: 'i32' },
  cpu: (a, { mem }) => {
    const tokens = mem.i32(a.tokens, a.rows);
    const positions = mem.i32(a.positions, a.rows);
    const table = mem.f32(a.table, a.vocab * a.vocab);
    const out = mem.f32(a.out, a.rows * a.vocab);
    for (let r = 0; r < a.rows; r++) {
      const t = tokens[r]!;
      // A little position dependence, so a row computed at the wrong position shows.
      for (let j = 0; j < a.vocab; j++) out[r * a.vocab + j] = table[t * a.vocab + j]! + 1e-3 * positions[r]! * (j % 3);
    }
  },
});

/** Token ids → logits: row = table[token] (+ a small position term). A one-layer model for runner tests. */
export class BigramLayer implements TransformerLayer<LayerState> {
  readonly type = 'bigram';
  readonly inputRowBytes = 0;
  readonly outputRowBytes: number;
  readonly #table: DevicePtr;
  constructor(private readonly gpu: GpuBackend, readonly vocab: number, table: Float32Array) {
    this.outputRowBytes = 4 * vocab;
    this.#table = gpu.alloc(table.byteLength);
    gpu.upload(this.#table, table);
  }
  openState(slot: number): LayerState {
    return { slot };
  }
  closeState(): void {}
  forward(step: LayerStep<LayerState>): void {
    step.gpu.launch(bigramKernel, { grid: 1, block: 1, stream: step.stream }, {
      tokens: step.tables.tokens, positions: step.tables.positions, table: this.#table, out: step.output, rows: step.rows, vocab: this.vocab,
    });
  }
  dispose(): void {
    this.gpu.free(this.#table);
  }
}
