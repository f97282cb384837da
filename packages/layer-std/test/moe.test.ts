import { CpuBackend } from '@metrale/cpu-backend';
import { FLOAT_DTYPE_CODE, SeededRandom, StepDriver, tensorOf, MemoryWeightSource, shardWeights, type ShardRule, relativeL2Error } from '@metrale/core';
import {
  FEW_ROUTE_MAX_TOP_K, FEW_ROUTE_ROWS, MoeLayer, fusedRouteTail, checkMoe, expertParallelMoe, glmMoeOptions, qwen3NextMoeOptions, routeFewKernel, routeFewLaunch, routeForm, routeKernel,
  routerGemvKernel, routerGemvLaunch, rowLaunch, type MoeOptions,
} from '@metrale/layer-std';
import { describe, expect, it } from 'vitest';
import { encodeRows, LIMITS, matvec, runRows, sigmoid, silu, Weights } from './setup.js';

const D = 16;
const E = 8;
const I = 12;

/** Shared expert widths as multiples of I: 1 (the published checkpoints: stacked as a slot of the routed kernels) and 2 (run apart). */
const SHARED_WIDTHS = [1, 2] as const;

function expertWeights(w: Weights, shared: 'gated' | 'plain' | 'none', router = 3, sharedWidth = 2) {
  const gate = w.add('gate.weight', [E, D], router / Math.sqrt(D));
  const experts = Array.from({ length: E }, (_, e) => ({
    g: w.add(`experts.${e}.gate_proj.weight`, [I, D], 1 / Math.sqrt(D)),
    u: w.add(`experts.${e}.up_proj.weight`, [I, D], 1 / Math.sqrt(D)),
    d: w.add(`experts.${e}.down_proj.weight`, [D, I], 1 / Math.sqrt(I)),
  }));
  const prefix = shared === 'gated' ? 'shared_expert.' : 'shared_experts.';
  const sh = shared === 'none' ? undefined : {
    g: w.add(`${prefix}gate_proj.weight`, [sharedWidth * I, D], 1 / Math.sqrt(D)),
    u: w.add(`${prefix}up_proj.weight`, [sharedWidth * I, D], 1 / Math.sqrt(D)),
    d: w.add(`${prefix}down_proj.weight`, [D, sharedWidth * I], 1 / Math.sqrt(sharedWidth * I)),
    gate: shared === 'gated' ? w.add('shared_expert_gate.weight', [1, D], 1) : undefined,
  };
  return { gate, experts, sh };
}

function swiglu(p: { g: Float64Array; u: Float64Array; d: Float64Array }, x: Float32Array, off: number, inter: number): Float64Array {
  const g = matvec(p.g, x, inter, D, off);
  const u = matvec(p.u, x, inter, D, off);
  return matvec(p.d, g.map((v, i) => silu(v) * u[i]!), D, inter);
}

/** Indices of the k largest, by an independent selection (repeated argmax). */
function topk(v: ArrayLike<number>, k: number, allowed: (i: number) => boolean = () => true): number[] {
  const taken = new Set<number>();
  for (let j = 0; j < k; j++) {
    let best = -1;
    for (let i = 0; i < v.length; i++) if (allowed(i) && !taken.has(i) && (best < 0 || v[i]! > v[best]!)) best = i;
    taken.add(best);
  }
  return [...taken];
}

describe('MoE against float64 references', () => {
  it.each(SHARED_WIDTHS)("Qwen3-Next: softmax top-k, norm_topk_prob, shared expert gated by sigmoid (shared width %i · I)", (width) => {
    for (const normTopK of [true, false]) {
      const w = new Weights(new SeededRandom(normTopK ? 1 : 2));
      const { gate, experts, sh } = expertWeights(w, 'gated', 3, width);
      const options = qwen3NextMoeOptions({ hidden_size: D, num_experts: E, num_experts_per_tok: 3, moe_intermediate_size: I, shared_expert_intermediate_size: width * I, norm_topk_prob: normTopK });
      const x = new SeededRandom(9).normals(5 * D);
      const out = runRows((gpu) => {
        const layer = new MoeLayer(gpu, w.source(), LIMITS, options);
        expect(layer.sharedExpert).toBe(width === 1 ? 'slot' : 'apart');
        return layer;
      }, x);
      for (let r = 0; r < 5; r++) {
        const logits = matvec(gate, x, E, D, r * D);
        const m = Math.max(...logits);
        const p = logits.map((l) => Math.exp(l - m));
        const s = p.reduce((a, b) => a + b, 0);
        const probs = p.map((v) => v / s);
        const ids = topk(probs, 3);
        const sum = ids.reduce((a, e) => a + probs[e]!, 0);
        const want = new Float64Array(D);
        for (const e of ids) {
          const y = swiglu(experts[e]!, x, r * D, I);
          const wt = normTopK ? probs[e]! / sum : probs[e]!;
          y.forEach((v, i) => (want[i]! += wt * v));
        }
        const shared = swiglu(sh!, x, r * D, width * I);
        const g = sigmoid(matvec(sh!.gate!, x, 1, D, r * D)[0]!);
        shared.forEach((v, i) => (want[i]! += g * v));
        expect(relativeL2Error(out.subarray(r * D, (r + 1) * D), want)).toBeLessThan(1e-5);
      }
    }
  });

  it.each(SHARED_WIDTHS)('GLM-5: sigmoid scores + e_score_correction_bias, groups, routed_scaling_factor, ungated shared experts (n_shared_experts %i)', (width) => {
    const w = new Weights(new SeededRandom(4));
    const { gate, experts, sh } = expertWeights(w, 'plain', 3, width);
    const bias = w.add('gate.e_score_correction_bias', [E], 0.3);
    const options = glmMoeOptions({
      hidden_size: D, n_routed_experts: E, num_experts_per_tok: 2, moe_intermediate_size: I, n_shared_experts: width,
      n_group: 4, topk_group: 2, routed_scaling_factor: 2.5, norm_topk_prob: true,
    });
    expect(options.shared).toMatchObject({ prefix: 'shared_experts.', inter: width * I });
    const x = new SeededRandom(11).normals(6 * D);
    const out = runRows((gpu) => {
      const layer = new MoeLayer(gpu, w.source(), LIMITS, options);
      expect(layer.sharedExpert).toBe(width === 1 ? 'slot' : 'apart');
      return layer;
    }, x);
    for (let r = 0; r < 6; r++) {
      const s = matvec(gate, x, E, D, r * D).map(sigmoid);
      const choice = s.map((v, e) => v + bias[e]!);
      const size = E / 4;
      const groupScore = Array.from({ length: 4 }, (_, g) => {
        const members = Array.from(choice.subarray(g * size, (g + 1) * size));
        return topk(members, 2).reduce((a, i) => a + members[i]!, 0);
      });
      const groups = new Set(topk(groupScore, 2));
      const ids = topk(choice, 2, (e) => groups.has(Math.floor(e / size)));
      const denom = ids.reduce((a, e) => a + s[e]!, 0) + 1e-20;
      const want = new Float64Array(D);
      for (const e of ids) swiglu(experts[e]!, x, r * D, I).forEach((v, i) => (want[i]! += (2.5 * s[e]!) / denom * v));
      swiglu(sh!, x, r * D, width * I).forEach((v, i) => (want[i]! += v));
      expect(relativeL2Error(out.subarray(r * D, (r + 1) * D), want)).toBeLessThan(1e-5);
    }
  });

  it('reads fused experts (gate_up_proj [E, 2I, D], down_proj [E, D, I]) as the per-expert layout', () => {
    const w = new Weights(new SeededRandom(6));
    const { experts } = expertWeights(w, 'none');
    const options: MoeOptions = checkMoe({ hidden: D, experts: E, topK: 2, inter: I, routing: { scoring: 'softmax', normTopK: true, nGroup: 1, topkGroup: 1, scaling: 1, scoreBias: false } });
    const gateUp = new Float32Array(E * 2 * I * D);
    const down = new Float32Array(E * D * I);
    experts.forEach((p, e) => {
      gateUp.set(p.g, e * 2 * I * D);
      gateUp.set(p.u, (2 * e + 1) * I * D);
      down.set(p.d, e * D * I);
    });
    const fused = new MemoryWeightSource('fused', [
      w.tensors.find((t) => t.name === 'gate.weight')!,
      tensorOf('experts.gate_up_proj', gateUp, [E, 2 * I, D]),
      tensorOf('experts.down_proj', down, [E, D, I]),
    ]);
    const x = new SeededRandom(2).normals(4 * D);
    const a = runRows((gpu) => new MoeLayer(gpu, w.source(), LIMITS, options), x);
    const b = runRows((gpu) => new MoeLayer(gpu, fused, LIMITS, options), x);
    expect(Array.from(b)).toEqual(Array.from(a));
  });

  it('refuses configs whose routing cannot work, naming the fields', () => {
    expect(() => qwen3NextMoeOptions({ hidden_size: D, num_experts: 2, num_experts_per_tok: 3, moe_intermediate_size: I })).toThrow(/num_experts_per_tok \(3\) exceeds the 2 experts/);
    expect(() => glmMoeOptions({ hidden_size: D, n_routed_experts: 8, num_experts_per_tok: 2, moe_intermediate_size: I, n_group: 3 })).toThrow(/n_group = 3/);
    expect(() => qwen3NextMoeOptions({ hidden_size: D, num_experts: 8, num_experts_per_tok: 2, moe_intermediate_size: I, hidden_act: 'gelu' })).toThrow(/hidden_act/);
  });
});

describe('MoE under expert parallelism', () => {
  // Each rank holds whole experts [r·E/n, (r+1)·E/n) and its share of the shared expert; the ranks'
  // outputs sum (as the all-reduce after the layer sums them) to the layer that holds everything.
  it.each([2, 4])('the outputs of %i expert-parallel ranks sum to the whole layer’s, for both routings and both expert paths', (size) => {
    for (const shared of ['gated', 'plain'] as const) {
      const w = new Weights(new SeededRandom(size * 10 + (shared === 'gated' ? 1 : 2)));
      expertWeights(w, shared);
      if (shared === 'plain') w.add('gate.e_score_correction_bias', [E], 0.3);
      const options = shared === 'gated'
        ? qwen3NextMoeOptions({ hidden_size: D, num_experts: E, num_experts_per_tok: 3, moe_intermediate_size: I, shared_expert_intermediate_size: 2 * I })
        : glmMoeOptions({ hidden_size: D, n_routed_experts: E, num_experts_per_tok: 2, moe_intermediate_size: I, n_shared_experts: 2, n_group: 4, topk_group: 2, routed_scaling_factor: 2.5 });
      // 40 rows take the grouped expert kernels (≥ 8 entries per expert), 3 rows the row-wise ones.
      for (const rows of [3, 40]) {
        const x = new SeededRandom(rows).normals(rows * D);
        const whole = runRows((gpu) => new MoeLayer(gpu, w.source(), LIMITS, options), x, undefined, rows);
        const sum = new Float64Array(rows * D);
        for (let rank = 0; rank < size; rank++) {
          const split: ShardRule = (name) => (/shared_experts?\.(gate|up)_proj/.test(name) ? { axis: 0 } : /shared_experts?\.down_proj/.test(name) ? { axis: 1 } : undefined);
          const part = runRows((gpu) => new MoeLayer(gpu, shardWeights(w.source(), split, rank, size), LIMITS, expertParallelMoe(options, rank, size, 'num_experts')), x, undefined, rows);
          part.forEach((v, i) => (sum[i]! += v));
        }
        expect(relativeL2Error(sum, whole), `${shared}, ${rows} rows`).toBeLessThan(1e-5);
      }
    }
  });

  it('refuses an expert count the group does not divide, and a range outside the experts, by name', () => {
    const options = qwen3NextMoeOptions({ hidden_size: D, num_experts: E, num_experts_per_tok: 2, moe_intermediate_size: I });
    expect(() => expertParallelMoe(options, 0, 3, 'num_experts')).toThrow(/--tensor-parallel-size 3 does not divide config\.num_experts \(8\)/);
    expect(() => checkMoe({ ...options, localExperts: { first: 6, count: 4 } })).toThrow(/localExperts \[6, 10\) must be a non-empty range of the 8 experts/);
  });

  it('the MoE layers of a model share one scratch buffer; a model built after the first ran gets its own', () => {
    const w = new Weights(new SeededRandom(5));
    expertWeights(w, 'gated');
    const options = qwen3NextMoeOptions({ hidden_size: D, num_experts: E, num_experts_per_tok: 3, moe_intermediate_size: I, shared_expert_intermediate_size: 2 * I, norm_topk_prob: true });
    const gpu = new CpuBackend();
    const used = () => gpu.memoryInfo().total - gpu.memoryInfo().free;
    const x = new SeededRandom(3).normals(5 * D);
    const run = (layers: MoeLayer[]) => {
      const driver = new StepDriver({ gpu, layers, limits: LIMITS });
      try {
        const seq = driver.open();
        return driver.readOutput(driver.prefill({ seqs: [seq], lengths: [5], input: x }));
      } finally {
        driver.dispose();
      }
    };
    const first = new MoeLayer(gpu, w.source(), LIMITS, options);
    const one = used();
    const second = new MoeLayer(gpu, w.source(), LIMITS, options);
    const two = used();
    const third = new MoeLayer(gpu, w.source(), LIMITS, options);
    // Each later layer adds its weights, not another scratch.
    expect(used() - two).toBe(two - one);
    const together = run([first, second, third]);
    const alone = new Float32Array(x);
    let rows: Uint8Array = new Uint8Array(0);
    for (const layer of [first, second, third]) {
      rows = run([layer]);
      alone.set(new Float32Array(rows.buffer, rows.byteOffset, rows.byteLength / 4));
      x.set(alone);
    }
    expect(Array.from(together)).toEqual(Array.from(rows));
    // Built after the others ran: a buffer of its own (their graphs may hold the shared pointer).
    const before = used();
    const late = new MoeLayer(gpu, w.source(), LIMITS, options);
    expect(used() - before).toBeGreaterThan(two - one);
    for (const layer of [first, second, third, late]) layer.dispose();
    expect(used()).toBe(0);
    gpu.dispose();
  });
});

describe('MoE router forms (routeForm)', () => {
  it('few rows take the fused router GEMV (an FP8 router the GEMM then the few-row route), more rows or slots the block route', () => {
    expect(routeForm(1, 10, 512, 'bf16')).toBe('fused');
    expect(routeForm(FEW_ROUTE_ROWS, 10, 64, 'f32')).toBe('fused');
    expect(routeForm(FEW_ROUTE_ROWS + 1, 10, 64, 'bf16')).toBe('block');
    expect(routeForm(1, 10, 512, 'f8e4m3')).toBe('few');
    expect(routeForm(1, FEW_ROUTE_MAX_TOP_K + 1, 64, 'bf16')).toBe('block');
    // 8 rows of 512 experts: a CTA per row is faster than the one CTA of the few-row route.
    expect(routeForm(8, 10, 512, 'bf16')).toBe('block');
    expect(routeForm(2, 10, 512, 'bf16')).toBe('fused');
  });

  it("the fused route's last CTA makes the shared slots and groups at one row only (std.moe_shared_slots and std.moe_group after it from two)", () => {
    expect([1, 2, 8].map(fusedRouteTail)).toEqual([true, false, false]);
  });

  it('the fused router GEMV takes a CTA per expert up to 128 experts, two up to 256, four above, and one more for a gated shared slot (the kernel traps on another grid)', () => {
    const grid = (experts: number, gateCta?: boolean) => routerGemvLaunch(experts, { backend: 'cpu', id: 0 }, gateCta).grid;
    expect([12, 64, 128, 200, 256, 512, 513].map((e) => grid(e))).toEqual([12, 64, 128, 100, 128, 128, 129]);
    expect([12, 64, 512].map((e) => grid(e, true))).toEqual([13, 65, 129]);
  });

  // On the CPU backend the GEMV's twin sums as the backend's GEMM does, so a layer's few-row steps
  // keep the bits they had through runLinear and std.moe_route.
  const routings = [
    { scoring: 0, normTopK: 1, nGroup: 1, topkGroup: 1, scaling: 1, bias: false },
    { scoring: 1, normTopK: 1, nGroup: 8, topkGroup: 4, scaling: 2.5, bias: true },
  ];
  for (const dtype of ['f32', 'bf16', 'f16'] as const) {
    it(`${dtype}: on the CPU backend std.moe_router_gemv and the GEMM + std.moe_route_few give the bits of the GEMM + std.moe_route, padded rows routed to no expert`, () => {
      const [rows, experts, hidden, topK] = [5, 64, 96, 6];
      const rnd = new SeededRandom(11);
      const gpu = new CpuBackend();
      try {
        const put = (data: ArrayBufferView) => {
          const p = gpu.alloc(data.byteLength);
          gpu.upload(p, data);
          return p;
        };
        const x = put(encodeRows(rnd.normals(rows * hidden), dtype));
        const w = put(encodeRows(rnd.normals(experts * hidden, 2 / Math.sqrt(hidden)), dtype));
        const bias = put(rnd.normals(experts, 0.1));
        const counter = put(new Uint32Array(1));
        const out = () => ({ logits: gpu.alloc(4 * rows * experts), ids: gpu.alloc(4 * rows * topK), weights: gpu.alloc(4 * rows * topK) });
        const read = (o: ReturnType<typeof out>) => [o.logits, o.ids, o.weights].map((p, i) => Array.from(gpu.download(p, 4 * rows * (i === 0 ? experts : topK))));
        for (const r of routings) {
          const args = (o: ReturnType<typeof out>, padSlots = 0n) => ({
            logits: o.logits, bias: r.bias ? bias : 0n, ids: o.ids, weights: o.weights, rows, experts, topK,
            scoring: r.scoring, normTopK: r.normTopK, nGroup: r.nGroup, topkGroup: r.topkGroup, scaling: r.scaling, padSlots, padK: padSlots ? 1 : 0,
          });
          const [block, few, fused] = [out(), out(), out()];
          for (const o of [block, few]) gpu.gemm({ m: rows, n: experts, k: hidden, a: x, b: w, c: o.logits, transB: true, dtype, outDtype: 'f32' });
          gpu.launch(routeKernel, rowLaunch(rows, experts, gpu.defaultStream), args(block));
          gpu.launch(routeFewKernel, routeFewLaunch(gpu.defaultStream), args(few));
          gpu.launch(routerGemvKernel, routerGemvLaunch(experts, gpu.defaultStream), {
            ...args(fused), x, w, counter, hidden, dtype: FLOAT_DTYPE_CODE[dtype], sharedGate: 0n, slotIds: 0n, slotWeights: 0n, sharedId: -1, groups: 0n, groupExperts: experts,
          });
          gpu.synchronize();
          expect(read(few)).toEqual(read(block));
          expect(read(fused)).toEqual(read(block));
          expect(Array.from(gpu.download(counter, 4))).toEqual([0, 0, 0, 0]);
          // A bucket's padded rows (slot −1): routed to no expert in every form, the others as above.
          const slotTable = put(Int32Array.from({ length: rows }, (_, i) => (i % 3 === 1 ? -1 : i)));
          const [pBlock, pFew, pFused] = [out(), out(), out()];
          for (const o of [pBlock, pFew]) gpu.gemm({ m: rows, n: experts, k: hidden, a: x, b: w, c: o.logits, transB: true, dtype, outDtype: 'f32' });
          gpu.launch(routeKernel, rowLaunch(rows, experts, gpu.defaultStream), args(pBlock, slotTable));
          gpu.launch(routeFewKernel, routeFewLaunch(gpu.defaultStream), args(pFew, slotTable));
          gpu.launch(routerGemvKernel, routerGemvLaunch(experts, gpu.defaultStream), {
            ...args(pFused, slotTable), x, w, counter, hidden, dtype: FLOAT_DTYPE_CODE[dtype], sharedGate: 0n, slotIds: 0n, slotWeights: 0n, sharedId: -1, groups: 0n, groupExperts: experts,
          });
          gpu.synchronize();
          const values = (o: ReturnType<typeof out>) => {
            const bytes = (p: bigint) => gpu.download(p, 4 * rows * topK);
            return [Array.from(new Int32Array(bytes(o.ids).slice().buffer)), Array.from(new Float32Array(bytes(o.weights).slice().buffer))];
          };
          const [ids, weights] = values(block);
          const [pIds, pWeights] = values(pBlock);
          for (let i = 0; i < rows; i++) {
            const at = (v: number[]) => v.slice(i * topK, (i + 1) * topK);
            if (i % 3 === 1) {
              expect(at(pIds!), `padded row ${i} ids`).toEqual(new Array(topK).fill(-1));
              expect(at(pWeights!), `padded row ${i} weights`).toEqual(new Array(topK).fill(0));
            } else {
              expect(at(pIds!), `row ${i} ids`).toEqual(at(ids!));
              expect(at(pWeights!), `row ${i} weights`).toEqual(at(weights!));
            }
          }
          expect(read(pFew)).toEqual(read(pBlock));
          expect(read(pFused)).toEqual(read(pBlock));
        }
      } finally {
        gpu.dispose();
      }
    });
  }
});
