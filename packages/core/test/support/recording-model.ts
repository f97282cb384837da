/**
 * The host model of a stack of recording/kernel layers: what their kernel computes when the
 * driver fills the step tables correctly. Same arithmetic in the same order, so outputs match bit
 * for bit.
 */
export interface ModelRow {
  readonly slot: number;
  /** Committed length of the row's sequence before the step (or chunk). */
  readonly seqLen: number;
  readonly position: number;
  readonly token: number;
}

export class RecordingModel {
  readonly #salts: readonly number[];
  readonly #width: number;
  /** Per layer: slot → state row. */
  readonly #states: Map<number, Float32Array>[];

  constructor(salts: readonly number[], width: number) {
    this.#salts = salts;
    this.#width = width;
    this.#states = salts.map(() => new Map());
  }

  open(slot: number): void {
    for (const m of this.#states) m.set(slot, new Float32Array(this.#width));
  }

  /** Runs real rows through every layer; returns the last layer's output rows. */
  step(rows: readonly ModelRow[], input: Float32Array): Float32Array {
    const w = this.#width;
    let x = input;
    this.#salts.forEach((salt, l) => {
      const y = new Float32Array(rows.length * w);
      rows.forEach((row, r) => {
        const st = this.#states[l]!.get(row.slot);
        if (!st) throw new Error(`model: slot ${row.slot} is not open`);
        for (let j = 0; j < w; j++) {
          st[j] = 0.5 * st[j]! + x[r * w + j]!;
          y[r * w + j] = st[j]! + row.position + 0.25 * row.seqLen + 0.001 * row.token + salt * (j + 1);
        }
      });
      x = y;
    });
    return x;
  }

  /** Rows of a decode/verify step: k rows per sequence at `lengths[i]`, tokens packed. */
  static stepRows(slots: readonly number[], lengths: readonly number[], k: number, tokens: Int32Array): ModelRow[] {
    const rows: ModelRow[] = [];
    slots.forEach((slot, i) => {
      for (let r = 0; r < k; r++) rows.push({ slot, seqLen: lengths[i]!, position: lengths[i]! + r, token: tokens[i * k + r]! });
    });
    return rows;
  }
}
