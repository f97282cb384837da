// std-sample's std.argmax: the lowest index of each row's maximum at any slicing, at the Qwen3
// vocabulary and widths that are not a multiple of 4 or of the slice.
// The method and bounds: kernel-check.ts. Without a GPU the suite skips and says why.
import {
  argmaxKernel, argmaxLaunch,
} from '@metrale/layer-std';
import { expect, it } from 'vitest';
import { random, poisonI32, i32, cudaBackend, onBoth, compareI32, describeKernels } from './kernel-check.js';

describeKernels('argmax', () => {
  // ---- std-sample: std.argmax over slices of its rows ------------------------------------------------
  // The lowest index of each row's maximum whatever the slicing: one CTA per row, argmaxLaunch's
  // shapes (on a 132-SM GPU and on this device), slices of 4 logits, more slices than the row has
  // logits for, fewer row CTAs than rows; at the Qwen3 vocabulary and at widths that are not a
  // multiple of 4 or of the slice, and rows not 16-byte aligned (the scalar path). Rows by r mod 8:
  // random, the maximum in the last logit, the maximum twice (in the first and last slices), all −∞
  // (0), NaN around the maximum, +∞ twice, every logit equal (0), +0 and −0 as the maximum. Each
  // shape is launched twice into two outputs: the last CTA of a row resets its counter, so the
  // second launch (as a graph replay) finishes too, and the counters are zero after.
  /** Rows of the patterns above and each row's token, as planted. */
  function argmaxRows(rows: number, V: number): { logits: Float32Array; want: (number | undefined)[] } {
    const logits = random.normals(rows * V, 3);
    const want: (number | undefined)[] = [];
    for (let r = 0; r < rows; r++) {
      const row = logits.subarray(r * V, (r + 1) * V);
      const third = Math.floor(V / 3);
      const mid = Math.floor(V / 2) + 1;
      want.push(undefined);
      switch (r % 8) {
        case 1:
          row[V - 1] = 50;
          want[r] = V - 1;
          break;
        case 2:
          row[V - 2] = row[3] = 50;
          want[r] = 3;
          break;
        case 3:
          row.fill(-Infinity);
          want[r] = 0;
          break;
        case 4:
          for (let i = 0; i < V; i += 97) row[i] = Number.NaN;
          row[V - 1] = Number.NaN;
          row[mid] = 40;
          want[r] = mid;
          break;
        case 5:
          row[V - 3] = row[third] = Infinity;
          want[r] = third;
          break;
        case 6:
          row.fill(1.5);
          want[r] = 0;
          break;
        case 7:
          row.fill(-1);
          row[V - 2] = 0;
          row[2] = -0;
          want[r] = 2;
          break;
      }
    }
    return { logits, want };
  }
  /** std.argmax at each grid, twice, against the twin, the planted tokens and the counters' reset. */
  function argmaxCase(label: string, rows: number, V: number, grids: readonly (readonly [number, number])[], offset = 0): void {
    const { logits, want } = argmaxRows(rows, V);
    const maxSlices = Math.max(...grids.map((g) => g[0]));
    const data = new Float32Array(offset + rows * V);
    data.set(logits, offset);
    for (const [slices, rowCtas] of grids) {
      const bufs = { logits: data, out: poisonI32(rows), out2: poisonI32(rows), counters: new Uint32Array(rows), partials: poisonI32(2 * rows * maxSlices) };
      const r = onBoth(bufs, (gpu, p) => {
        for (const out of [p.out!, p.out2!]) {
          gpu.launch(argmaxKernel, { grid: [slices, rowCtas], block: 256, stream: gpu.defaultStream }, {
            logits: p.logits! + BigInt(4 * offset), out, counters: p.counters!, partials: p.partials!, rows, vocab: V,
          });
        }
      }, ['out', 'out2', 'counters']);
      const shape = `${label} grid [${slices}, ${rowCtas}]`;
      compareI32(`argmax ${shape}`, r.cpu.out!, r.cuda.out!);
      compareI32(`argmax ${shape}, launched again`, r.cpu.out!, r.cuda.out2!);
      const got = Array.from(i32(r.cuda.out!));
      want.forEach((w, row) => w !== undefined && expect(got[row], `${shape} row ${row}`).toBe(w));
      expect(Array.from(i32(r.cuda.counters!)), `${shape}: the counters are back at zero`).toEqual(new Array(rows).fill(0));
    }
  }
  const launchShape = (rows: number, V: number, sms: number): [number, number] => {
    const grid = argmaxLaunch(rows, V, sms, cudaBackend().defaultStream).grid as readonly number[];
    return [grid[0]!, grid[1]!];
  };

  it('std.argmax at the Qwen3 vocabulary (151 936): argmaxLaunch\'s shapes at 1 and 64 rows, one CTA per row', () => {
    const V = 151_936;
    const sms = cudaBackend().device.multiprocessors;
    argmaxCase('V 151936 rows 1', 1, V, [launchShape(1, V, 132), launchShape(1, V, sms), [7, 1]]);
    argmaxCase('V 151936 rows 8', 8, V, [launchShape(8, V, 132), [1, 8]]);
    argmaxCase('V 151936 rows 64', 64, V, [launchShape(64, V, 132), launchShape(64, V, sms)]);
  });

  it('std.argmax: the same tokens at any slicing, widths not a multiple of 4 or of the slice, rows not 16-byte aligned', () => {
    const grids = [[1, 8], [2, 8], [3, 8], [7, 8], [64, 2], [5, 1]] as const;
    argmaxCase('V 1001', 8, 1001, grids);
    argmaxCase('V 4099', 8, 4099, grids);
    argmaxCase('V 1000 (aligned)', 8, 1000, grids);
    argmaxCase('V 1000 unaligned', 8, 1000, grids, 1);
    argmaxCase('V 5', 8, 5, [[1, 8], [2, 8], [9, 3]]);
  });
});
