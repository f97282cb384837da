// std-rows: std.embed, the norms (std.rms_norm, std.add_rms_norm, std.layer_norm), std.add, std.silu_mul, std.gelu_mul
// (Gemma 3n's activation sparsity) and std.softcap, in every row type, the vector and scalar
// paths (hidden 2 048 and 30).
// The method and bounds: kernel-check.ts. Without a GPU the suite skips and says why.
import { FLOAT_DTYPE_CODE } from '@metrale/core';
import {
  geluMulKernel, softcapKernel, addKernel, addRmsNormKernel, embedKernel, flatLaunch, layerNormKernel, rmsNormKernel, rowLaunch, siluMulKernel,
} from '@metrale/layer-std';
import { expect, it } from 'vitest';
import { encodeRows } from '../setup.js';
import { ROW_TYPES, random, poison, typed, sameBits, onBoth, compare, describeKernels } from './kernel-check.js';

describeKernels('row', () => {
  for (const dtype of ROW_TYPES) {
    const code = FLOAT_DTYPE_CODE[dtype];
    for (const D of [2048, 30]) {
      it(`${dtype}: std.embed, hidden ${D} (tokens outside the table give zeros), scale 1 and sqrt(D)`, () => {
        const V = 300;
        const rows = 9;
        const tokens = Int32Array.from({ length: rows }, (_, i) => (i === 2 ? V : i === 5 ? -1 : random.int(0, V - 1)));
        for (const scale of [1, Math.fround(Math.sqrt(D))]) {
          const r = onBoth({ tokens, table: typed(V * D, dtype), out: poison(rows * D, dtype) }, (gpu, p) =>
            gpu.launch(embedKernel, rowLaunch(rows, D, gpu.defaultStream), { tokens: p.tokens!, table: p.table!, out: p.out!, rows, hidden: D, vocab: V, scale, dtype: code }), ['out']);
          compare(`${dtype} embed D=${D} scale=${scale.toFixed(3)}`, dtype, r.cpu.out!, r.cuda.out!, 0);
        }
      });

      it(`${dtype}: std.rms_norm (offset 0 and 1, x̂ rounded first or not, in place), std.add_rms_norm and std.layer_norm (with and without bias), hidden ${D}`, () => {
        const rows = 7;
        const x = random.normals(rows * D, 3);
        // GLM (w · x̂.to(dtype)), Qwen3-Next ((1 + w) · x̂ once), Gemma 3n (w · x̂ once).
        for (const [offset, roundNormalized] of [[0, 1], [1, 0], [0, 0]] as const) {
          const w = random.normals(D, 0.3);
          const r = onBoth({ x: encodeRows(x, dtype), y: poison(rows * D, dtype), w }, (gpu, p) => {
            const args = { weight: p.w!, rows, hidden: D, eps: 1e-6, offset, roundNormalized, dtype: code };
            gpu.launch(rmsNormKernel, rowLaunch(rows, D, gpu.defaultStream), { ...args, input: p.x!, output: p.y! });
            gpu.launch(rmsNormKernel, rowLaunch(rows, D, gpu.defaultStream), { ...args, input: p.x!, output: p.x! });
          }, ['y', 'x']);
          compare(`${dtype} rms_norm D=${D} offset=${offset} roundNormalized=${roundNormalized}`, dtype, r.cpu.y!, r.cuda.y!);
          compare(`${dtype} rms_norm D=${D} offset=${offset} roundNormalized=${roundNormalized} in place`, dtype, r.cpu.x!, r.cuda.x!);
        }
        // The residual add and the norm in one launch: the bits of std.add then std.rms_norm, with the sum apart and over its first addend.
        for (const [offset, roundNormalized] of [[0, 1], [1, 0]] as const) {
          const n = rows * D;
          const a = typed(n, dtype, 3);
          const r = onBoth(
            { a, b: typed(n, dtype, 3), w: random.normals(D, 0.3), ...Object.fromEntries(['sum', 'y', 'sum2', 'y2', 'y3'].map((k) => [k, poison(n, dtype)])), a2: a },
            (gpu, p) => {
              const args = { weight: p.w!, rows, hidden: D, eps: 1e-6, offset, roundNormalized, dtype: code };
              gpu.launch(addKernel, flatLaunch(n, gpu.defaultStream), { a: p.a!, b: p.b!, out: p.sum2!, count: n, dtype: code });
              gpu.launch(rmsNormKernel, rowLaunch(rows, D, gpu.defaultStream), { ...args, input: p.sum2!, output: p.y2! });
              gpu.launch(addRmsNormKernel, rowLaunch(rows, D, gpu.defaultStream), { ...args, a: p.a!, b: p.b!, sum: p.sum!, output: p.y! });
              gpu.launch(addRmsNormKernel, rowLaunch(rows, D, gpu.defaultStream), { ...args, a: p.a2!, b: p.b!, sum: p.a2!, output: p.y3! });
            },
            ['sum', 'y', 'sum2', 'y2', 'a2', 'y3'],
          );
          const label = `${dtype} add_rms_norm D=${D} offset=${offset} roundNormalized=${roundNormalized}`;
          compare(label, dtype, r.cpu.y!, r.cuda.y!);
          for (const [fused, plain] of [['sum', 'sum2'], ['y', 'y2'], ['a2', 'sum2'], ['y3', 'y2']] as const) {
            expect(sameBits(r.cuda[fused]!, r.cuda[plain]!), `${label}: CUDA ${fused} is not bit for bit ${plain} (std.add, std.rms_norm)`).toBe(true);
          }
        }
        const shifted = encodeRows(x.map((v) => v + 5), dtype);
        for (const bias of [true, false]) {
          const r = onBoth({ x: shifted, y: poison(rows * D, dtype), w: random.normals(D, 1), b: random.normals(D, 0.5) }, (gpu, p) =>
            gpu.launch(layerNormKernel, rowLaunch(rows, D, gpu.defaultStream), {
              input: p.x!, output: p.y!, weight: p.w!, bias: bias ? p.b! : 0n, rows, hidden: D, eps: 1e-5, dtype: code,
            }), ['y']);
          compare(`${dtype} layer_norm D=${D} bias=${bias}`, dtype, r.cpu.y!, r.cuda.y!);
        }
      });
    }

    it(`${dtype}: std.add (out aliasing a) and std.silu_mul (inter 512 and 13)`, () => {
      const count = 10_001;
      const r = onBoth({ a: typed(count, dtype), b: typed(count, dtype), out: poison(count, dtype) }, (gpu, p) => {
        gpu.launch(addKernel, flatLaunch(count, gpu.defaultStream), { a: p.a!, b: p.b!, out: p.out!, count, dtype: code });
        gpu.launch(addKernel, flatLaunch(count, gpu.defaultStream), { a: p.a!, b: p.b!, out: p.a!, count, dtype: code });
      }, ['out', 'a']);
      compare(`${dtype} add`, dtype, r.cpu.out!, r.cuda.out!, 0);
      compare(`${dtype} add in place`, dtype, r.cpu.a!, r.cuda.a!, 0);
      for (const I of [512, 13]) {
        const rows = 5;
        const s = onBoth({ gu: typed(rows * 2 * I, dtype, 4), out: poison(rows * I, dtype) }, (gpu, p) =>
          gpu.launch(siluMulKernel, rowLaunch(rows, I, gpu.defaultStream), { gateUp: p.gu!, out: p.out!, rows, inter: I, dtype: code }), ['out']);
        compare(`${dtype} silu_mul I=${I}`, dtype, s.cpu.out!, s.cuda.out!);
      }
    });

    it(`${dtype}: std.gelu_mul with and without Gemma 3n's activation sparsity (inter 512 and 13), std.softcap`, () => {
      for (const I of [512, 13]) {
        const rows = 5;
        for (const sparse of [0, 1]) {
          const s = onBoth({ gu: typed(rows * 2 * I, dtype, 4), out: poison(rows * I, dtype) }, (gpu, p) =>
            gpu.launch(geluMulKernel, rowLaunch(rows, I, gpu.defaultStream), {
              gateUp: p.gu!, out: p.out!, rows, inter: I, cutoff: 1.6448535919189453, sparse, dtype: code,
            }), ['out']);
          compare(`${dtype} gelu_mul I=${I} sparse=${sparse}`, dtype, s.cpu.out!, s.cuda.out!);
        }
      }
      const count = 3001;
      const c = onBoth({ x: random.normals(count, 40) }, (gpu, p) =>
        gpu.launch(softcapKernel, flatLaunch(count, gpu.defaultStream), { x: p.x!, count, cap: 30 }), ['x']);
      compare(`${dtype} softcap`, 'f32', c.cpu.x!, c.cuda.x!);
    });
  }
});
