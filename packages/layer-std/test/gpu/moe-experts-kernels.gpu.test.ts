// std-moe: std.moe_group at a prefill's size, and the CUDA-core expert kernels in every weight format
// (f32, bf16, f16, block-FP8 over bf16 and f16 rows): ids outside the experts, expert shapes whose D
// and I are not multiples of 128 (FP8 blocks cut short), the row-wise kernels bit-identical to the
// grouped ones; std.moe_combine. The tensor-core GEMMs and batch invariance: moe-gemm-kernels.
// The method and bounds: kernel-check.ts. Without a GPU the suite skips and says why.
import { FLOAT_DTYPE_CODE } from '@metrale/core';
import { runKernelOn } from '@metrale/core/testing';
import {
  EXPERT_FORMATS, combineKernel, groupKernel, groupLaunch, moeGroupsLength, rowLaunch,
} from '@metrale/layer-std';
import { expect, it } from 'vitest';
import { formatOf, groupedExperts, rowwiseExperts, expertBufs, routedIds } from './expert-passes.js';
import { ROW_TYPES, random, poisonI32, poison, typed, sameBits, cudaBackend, onBoth, compare, compareI32, describeKernels, record } from './kernel-check.js';

describeKernels('MoE expert', () => {
  // std.moe_group alone at a prefill's size: 4 096 rows of top-10 over 64, 512 and 2 048 experts (its
  // warps take 32, 16 and 4 segments of the entries), ids outside the experts scattered through.
  for (const E of [64, 512, 2048]) {
    it(`std.moe_group: 4 096 rows, top-10 of ${E} experts, ids outside the experts: the twin's buffer exactly`, () => {
      const rows = 4096, topK = 10;
      const ids = new Int32Array(rows * topK);
      for (let r = 0; r < rows; r++) {
        const taken = new Set<number>();
        for (let j = 0; j < topK; j++) {
          let e: number;
          do e = Math.floor(random.float() * E); while (taken.has(e));
          taken.add(e);
          ids[r * topK + j] = e;
        }
      }
      for (let i = 7; i < ids.length; i += 997) ids[i] = i % 2 ? -3 : E + 5;
      const r = onBoth({ ids, groups: poisonI32(moeGroupsLength(rows, topK, E)) }, (gpu, p) =>
        gpu.launch(groupKernel, groupLaunch(rows, topK, gpu.defaultStream), { ids: p.ids!, groups: p.groups!, rows, experts: E, topK }), ['groups']);
      compareI32(`moe_group ${rows} rows top-${topK} of ${E}`, r.cpu.groups!, r.cuda.groups!);
    });
  }


  // Shapes: 3 rows at the 80B expert shape; one row at Qwen3-Next's top-10 (the row-wise kernels'
  // one-row path: two warps a value in the down pass, each 4 experts at a time over its 5 slots),
  // and one tiny
  // unaligned (scalar paths); 40 rows over 8 experts (~30 entries per expert: two passes of 16
  // through each weight tile); D and I past 128 but not multiples of it (FP8 blocks cut short on
  // both axes); one row of 14 slots (7 a warp of the down pass: a round of 4 experts and one of 3)
  // over I 1 024 (two chunks a lane), and one of 9 slots over I 256 (half the lanes without a
  // chunk).
  const SHAPES = [
    [2048, 512, 8, 6, 3], [2048, 512, 16, 10, 1], [30, 7, 5, 2, 4], [30, 7, 5, 3, 1], [2048, 512, 8, 6, 40], [1000, 136, 6, 4, 24], [256, 1024, 20, 14, 1], [384, 256, 12, 9, 1],
  ] as const;
  for (const format of EXPERT_FORMATS) {
    for (const [D, I, E, topK, rows] of SHAPES) {
      it(`${format}: std.moe_group + std.moe_experts_up + std.moe_experts_down + std.moe_experts, D ${D}, I ${I}, ${E} experts, top-${topK}, ${rows} rows (an id outside the experts), and the row-wise kernels' bits`, () => {
        const { dtype } = formatOf(format);
        const ids = routedIds(rows, topK, E);
        const bufs = expertBufs(format, rows, D, I, E, topK, ids);
        const label = `${format} D=${D} I=${I} E=${E} k=${topK} rows=${rows}`;
        const r = onBoth(bufs, (gpu, p) => groupedExperts(gpu, p, format, rows, D, I, E, topK), ['groups', 'h', 'y', 'out']);
        compareI32(`moe_group ${label}`, r.cpu.groups!, r.cuda.groups!);
        compare(`moe_experts_up ${label}`, dtype, r.cpu.h!, r.cuda.h!);
        compare(`moe_experts_down ${label}`, dtype, r.cpu.y!, r.cuda.y!);
        compare(`moe_experts ${label}`, dtype, r.cpu.out!, r.cuda.out!);
        // The row-wise kernels (each row re-reads its experts) on CUDA: the grouped ones give the same bits.
        const rw = runKernelOn(cudaBackend(), bufs, (gpu, p) => rowwiseExperts(gpu, p, format, rows, D, I, E, topK), ['h', 'out']);
        record(`${`moe grouped ≡ row-wise ${label}`.padEnd(84)} h ${sameBits(rw.h!, r.cuda.h!) ? 'bit-identical' : 'DIFFERS'}, out ${sameBits(rw.out!, r.cuda.out!) ? 'bit-identical' : 'DIFFERS'}`);
        expect(sameBits(rw.h!, r.cuda.h!), 'h: grouped vs row-wise bits').toBe(true);
        expect(sameBits(rw.out!, r.cuda.out!), 'out: grouped vs row-wise bits').toBe(true);
      });
    }
  }

  for (const dtype of ROW_TYPES) {
    it(`${dtype}: std.moe_combine, gated (sigmoid) and ungated`, () => {
      for (const D of [2048, 30]) {
        const rows = 5;
        for (const gated of [true, false]) {
          const r = onBoth({ routed: typed(rows * D, dtype), shared: typed(rows * D, dtype), gate: random.normals(rows, 2), out: poison(rows * D, dtype) }, (gpu, p) =>
            gpu.launch(combineKernel, rowLaunch(rows, D, gpu.defaultStream), {
              routed: p.routed!, shared: p.shared!, gate: gated ? p.gate! : 0n, output: p.out!, rows, hidden: D, dtype: FLOAT_DTYPE_CODE[dtype],
            }), ['out']);
          compare(`${dtype} moe_combine D=${D} gated=${gated}`, dtype, r.cpu.out!, r.cuda.out!);
        }
      }
    });
  }
});
