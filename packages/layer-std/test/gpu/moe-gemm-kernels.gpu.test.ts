// std-moe-gemm and batch invariance: each of 48 rows sharing 8 experts bit-identical to its result
// alone through the route and the grouped CUDA-core kernels or the tensor-core GEMMs, in every
// weight format; the tensor-core expert GEMMs and their few-row pair against the CPU twin at the
// 80B expert widths and widths that cut tiles, k steps and FP8 blocks short.
// The method and bounds: kernel-check.ts. Without a GPU the suite skips and says why.
import { floatBytes } from '@metrale/core';
import { runKernelOn, type KernelPointers as Ptrs } from '@metrale/core/testing';
import {
  EXPERT_FORMATS, expertsGemm, routeKernel, rowLaunch,
} from '@metrale/layer-std';
import { expect, it } from 'vitest';
import { encodeRows } from '../setup.js';
import { formatOf, groupedExperts, expertBufs, routedIds } from './expert-passes.js';
import { random, i32, sameBits, cudaBackend, onBoth, compare, describeKernels, record } from './kernel-check.js';

describeKernels('MoE expert GEMM', () => {
  for (const format of EXPERT_FORMATS) {
    // The CUDA-core grouped kernels (f32 rows, widths off 16) and the tensor-core GEMMs (every step of bf16 / f16 rows).
    for (const tensorCores of format === 'f32' ? [false] : [false, true]) it(`${format}: batch invariance: route + ${tensorCores ? 'tensor-core' : 'grouped'} experts give each of 48 rows sharing 8 experts exactly its result alone`, () => {
      const [D, I, E, topK, rows] = [2048, 512, 8, 4, 48];
      const { dtype } = formatOf(format);
      const bytes = floatBytes(dtype);
      const gpu = cudaBackend();
      const logits = random.normals(rows * E, 2);
      logits.set(logits.subarray(0, E), 5 * E); // two rows routed alike
      const x = random.normals(rows * D);
      const p: Ptrs = {};
      for (const [name, data] of Object.entries(expertBufs(format, rows, D, I, E, topK, new Int32Array(rows * topK)))) {
        p[name] = gpu.alloc(Math.max(4, data.byteLength));
        gpu.upload(p[name]!, data);
      }
      p.logits = gpu.alloc(logits.byteLength);
      const step = (n: number, xs: Float32Array, ls: Float32Array): { ids: Int32Array; out: Uint8Array; h: Uint8Array } => {
        gpu.upload(p.x!, encodeRows(xs, dtype));
        gpu.upload(p.logits!, ls);
        gpu.launch(routeKernel, rowLaunch(n, E, gpu.defaultStream), {
          logits: p.logits!, bias: 0n, ids: p.ids!, weights: p.weights!, rows: n, experts: E, topK, scoring: 0, normTopK: 1, nGroup: 1, topkGroup: 1, scaling: 1,
          padSlots: 0n, padK: 0,
        });
        groupedExperts(gpu, p, format, n, D, I, E, topK, tensorCores);
        gpu.synchronize();
        return { ids: i32(gpu.download(p.ids!, 4 * n * topK)).slice(), out: gpu.download(p.out!, bytes * n * D), h: gpu.download(p.h!, bytes * n * topK * I) };
      };
      try {
        const all = step(rows, x, logits);
        const shared = new Set(Array.from(all.ids)).size;
        let same = 0;
        for (let r = 0; r < rows; r++) {
          const one = step(1, x.slice(r * D, (r + 1) * D), logits.slice(r * E, (r + 1) * E));
          expect(Array.from(one.ids), `row ${r} ids`).toEqual(Array.from(all.ids.subarray(r * topK, (r + 1) * topK)));
          const rowOut = all.out.subarray(bytes * r * D, bytes * (r + 1) * D);
          const rowH = all.h.subarray(bytes * r * topK * I, bytes * (r + 1) * topK * I);
          if (sameBits(one.out, rowOut) && sameBits(one.h, rowH)) same++;
        }
        record(`${`${format}${tensorCores ? ' gemm' : ''} batch invariance: ${rows} rows over ${shared} experts, top-${topK}, vs each row alone`.padEnd(84)} ${same}/${rows} bit-identical`);
        expect(same).toBe(rows);
      } finally {
        for (const ptr of Object.values(p)) gpu.free(ptr);
      }
    });
  }

  // The tensor-core expert GEMMs (every step of bf16 / f16 rows): the 80B expert widths with 80 entries per expert
  // (tiles cut short), 300 entries per expert (several tiles each), widths not multiples of 64 or
  // 128 (output columns, 32-wide k steps and FP8 blocks cut short), a few rows; each against the CPU
  // twin (kept small: the twin is most of the time), each row's bits alone and batched, and the
  // few-row pair's bits against the large pair's (64 rows: the most the layer gives the few-row pair).
  const GEMM_SHAPES = [[2048, 512, 4, 2, 160], [512, 256, 2, 2, 300], [1040, 272, 12, 4, 120], [2048, 512, 8, 6, 3], [512, 256, 6, 3, 64]] as const;
  for (const format of EXPERT_FORMATS.filter((f) => f !== 'f32')) {
    for (const [D, I, E, topK, rows] of GEMM_SHAPES) {
      it(`${format}: std.moe_gemm_up + std.moe_gemm_down (tensor cores), D ${D}, I ${I}, ${E} experts, top-${topK}, ${rows} rows (ids outside the experts)`, () => {
        const { dtype } = formatOf(format);
        const ids = routedIds(rows, topK, E);
        const bufs = expertBufs(format, rows, D, I, E, topK, ids);
        const label = `${format} D=${D} I=${I} E=${E} k=${topK} rows=${rows}`;
        const r = onBoth(bufs, (gpu, p) => groupedExperts(gpu, p, format, rows, D, I, E, topK, true), ['h', 'y', 'out']);
        compare(`moe_gemm_up ${label}`, dtype, r.cpu.h!, r.cuda.h!);
        compare(`moe_gemm_down ${label}`, dtype, r.cpu.y!, r.cuda.y!);
        compare(`moe_experts after the gemms ${label}`, dtype, r.cpu.out!, r.cuda.out!);
        // Each row alone (as a decode step runs it) gives the bits it gets in the batch (no split of k, its order fixed).
        const bytes = floatBytes(dtype);
        const weights = bufs.weights as Float32Array;
        for (const row of [0, 1, rows - 1]) {
          const one = expertBufs(format, 1, D, I, E, topK, ids.slice(row * topK, (row + 1) * topK), bufs);
          const xs = new Uint8Array(bufs.x!.buffer, bufs.x!.byteOffset + bytes * row * D, bytes * D);
          const alone = runKernelOn(cudaBackend(), { ...one, x: xs, weights: weights.slice(row * topK, (row + 1) * topK) }, (gpu, p) => groupedExperts(gpu, p, format, 1, D, I, E, topK, true), ['h', 'y', 'out']);
          expect(sameBits(alone.h!, r.cuda.h!.subarray(bytes * row * topK * I, bytes * (row + 1) * topK * I)), `row ${row}: h alone vs batched`).toBe(true);
          expect(sameBits(alone.y!, r.cuda.y!.subarray(bytes * row * topK * D, bytes * (row + 1) * topK * D)), `row ${row}: y alone vs batched`).toBe(true);
          expect(sameBits(alone.out!, r.cuda.out!.subarray(bytes * row * D, bytes * (row + 1) * D)), `row ${row}: out alone vs batched`).toBe(true);
        }
        record(`${`moe gemm rows alone ≡ batched ${label}`.padEnd(84)} h, y, out bit-identical`);
        // The other pair on the whole batch (the few-row one past FEW_GEMM_ROWS, the large one below): the same bits.
        const few = formatOf(format).k.gemm!.few;
        if (few) {
          const other = expertsGemm(formatOf(format).k, rows) === few ? formatOf(format).k.gemm! : few;
          const o = runKernelOn(cudaBackend(), bufs, (gpu, p) => groupedExperts(gpu, p, format, rows, D, I, E, topK, other), ['h', 'y', 'out']);
          expect(sameBits(o.h!, r.cuda.h!), 'h: the two GEMM pairs differ').toBe(true);
          expect(sameBits(o.y!, r.cuda.y!), 'y: the two GEMM pairs differ').toBe(true);
          record(`${`moe gemm few-row pair ≡ large pair ${label}`.padEnd(84)} h, y bit-identical`);
        }
      });
    }
  }
});
