// std-moe-route: both MoE routings (Qwen3-Next softmax top-k with and without norm_topk_prob;
// GLM-5 sigmoid + correction bias + groups + routed scaling), ties and a NaN (padding) row, rows
// whose best experts share a few lanes, more slots than lanes, padded batch positions routed to no
// expert, the few-row forms (std.moe_route_few bit-identical to std.moe_route; std.moe_router_gemv's
// logits, and its last CTA's route and tail bit-identical to std.moe_route, std.moe_shared_slots
// and std.moe_group over them, at 1, 3 and 8 rows), the shared expert's slots, and expert
// parallelism's std.moe_localize.
// The method and bounds: kernel-check.ts. Without a GPU the suite skips and says why.
import { FLOAT_DTYPE_CODE, relativeL2Error } from '@metrale/core';
import { runKernelOn, type KernelPointers as Ptrs } from '@metrale/core/testing';
import {
  flatLaunch, groupKernel, groupLaunch, localizeKernel, moeGroupsLength, routeFewKernel, routeFewLaunch, routeKernel, routerGemvKernel, routerGemvLaunch, rowLaunch, sharedSlotsKernel, sharedSlotsLaunch,
} from '@metrale/layer-std';
import { expect, it } from 'vitest';
import { encodeRows } from '../setup.js';
import { ROW_TYPES, random, poisonF32, poisonI32, typed, f32, i32, sameBits, cudaBackend, onBoth, compare, compareI32, describeKernels, record } from './kernel-check.js';

describeKernels('MoE route', () => {
  // ---- std-moe ---------------------------------------------------------------------------------------
  const routings = [
    { label: 'softmax top-10 of 512, norm_topk_prob', E: 512, topK: 10, scoring: 0, normTopK: 1, nGroup: 1, topkGroup: 1, scaling: 1, bias: false },
    { label: 'softmax top-10 of 512, no norm', E: 512, topK: 10, scoring: 0, normTopK: 0, nGroup: 1, topkGroup: 1, scaling: 1, bias: false },
    { label: 'sigmoid + bias, 8 groups keep 4, top-8 of 256, scaling 2.5', E: 256, topK: 8, scoring: 1, normTopK: 1, nGroup: 8, topkGroup: 4, scaling: 2.5, bias: true },
    { label: 'sigmoid + bias, no groups, top-3 of 12, no norm', E: 12, topK: 3, scoring: 1, normTopK: 0, nGroup: 1, topkGroup: 1, scaling: 1, bias: true },
    { label: 'softmax top-10 of 64, norm_topk_prob', E: 64, topK: 10, scoring: 0, normTopK: 1, nGroup: 1, topkGroup: 1, scaling: 1, bias: false },
    { label: 'sigmoid + bias, no groups, top-8 of 256, scaling 2.5', E: 256, topK: 8, scoring: 1, normTopK: 1, nGroup: 1, topkGroup: 1, scaling: 2.5, bias: true },
    { label: 'sigmoid + bias, 8 groups keep 2, top-10 of 64', E: 64, topK: 10, scoring: 1, normTopK: 1, nGroup: 8, topkGroup: 2, scaling: 1, bias: true },
  ];
  /** std.moe_router_gemv's arguments for no tail (neither the shared expert's slots nor the groups). */
  const NO_ROUTE_TAIL = { sharedGate: 0n, slotIds: 0n, slotWeights: 0n, sharedId: -1, groups: 0n, groupExperts: 1 } as const;
  /** The step's padding: the buffer `padSlots` where the case has one (rows `padK` a batch position), else none. */
  const padArgs = (p: Ptrs, padK = 1) => ({ padSlots: p.padSlots ?? 0n, padK: p.padSlots ? padK : 0 });
  /** The route arguments of a routing case. */
  const routeArgs = (o: (typeof routings)[number], rows: number, p: Ptrs, padK = 1) => ({
    bias: o.bias ? p.bias! : 0n, ids: p.ids!, weights: p.weights!, rows, experts: o.E, topK: o.topK,
    scoring: o.scoring, normTopK: o.normTopK, nGroup: o.nGroup, topkGroup: o.topkGroup, scaling: o.scaling, ...padArgs(p, padK),
  });
  for (const o of routings) {
    it(`std.moe_route and std.moe_route_few: ${o.label} (a tied row, a NaN padding row, rows whose best experts share lanes)`, () => {
      const rows = 9;
      const logits = random.normals(rows * o.E, 2);
      // Rows 1 and 2: the best experts in a few lanes (expert e in lane e mod 32), so the ranked
      // top-k has many candidates (row 1: picked one at a time where they exceed its list) or
      // fewer lanes holding any than slots (row 2 with groups 0 and 4 of 64 kept).
      for (let e = 0; e < o.E; e++) {
        if (e % 32 < 10) logits[o.E + e] = 10 - 0.05 * (e % 32) - 0.001 * Math.floor(e / 32);
        if (e % 32 < 8) logits[2 * o.E + e]! += 4;
      }
      logits.fill(0.25, 3 * o.E, 4 * o.E); // every expert tied: ids by index
      for (let e = 0; e < o.E; e += 3) logits[5 * o.E + e] = 1.5; // partial ties
      logits.fill(Number.NaN, 7 * o.E, 8 * o.E); // a padding row holding garbage
      const bufs = { logits, bias: random.normals(o.E, 0.1), ids: poisonI32(rows * o.topK), weights: poisonF32(rows * o.topK) };
      const r = onBoth(bufs, (gpu, p) =>
        gpu.launch(routeKernel, rowLaunch(rows, o.E, gpu.defaultStream), { logits: p.logits!, ...routeArgs(o, rows, p) }), ['ids', 'weights']);
      compareI32(`moe_route ${o.label} ids`, r.cpu.ids!, r.cuda.ids!);
      const w = (b: Uint8Array) => f32(b).map((v) => (Number.isNaN(v) ? 0 : v));
      const pad = (b: Uint8Array) => f32(b).subarray(7 * o.topK, 8 * o.topK);
      // The padding row's weights are NaN on both (NaN scores), as they are on the CPU.
      expect(Array.from(pad(r.cuda.weights!)).map(Number.isNaN)).toEqual(Array.from(pad(r.cpu.weights!)).map(Number.isNaN));
      const rel = relativeL2Error(w(r.cuda.weights!), w(r.cpu.weights!));
      record(`${`moe_route ${o.label} weights`.padEnd(84)} rel ${rel.toExponential(2)}`);
      expect(rel).toBeLessThanOrEqual(1e-6);
      // The few-row form (here 9 rows: several passes of its one CTA) gives the same bits.
      const few = runKernelOn(cudaBackend(), bufs, (gpu, p) =>
        gpu.launch(routeFewKernel, routeFewLaunch(gpu.defaultStream), { logits: p.logits!, ...routeArgs(o, rows, p) }), ['ids', 'weights']);
      const same = sameBits(few.ids!, r.cuda.ids!) && sameBits(few.weights!, r.cuda.weights!);
      record(`${`moe_route_few ≡ moe_route ${o.label}`.padEnd(84)} ${same ? 'bit-identical' : 'DIFFERS'}`);
      expect(Array.from(i32(few.ids!)), 'route_few ids').toEqual(Array.from(i32(r.cuda.ids!)));
      expect(sameBits(few.weights!, r.cuda.weights!), 'route_few weights: bits of std.moe_route').toBe(true);
      // A verify bucket's padding (3 rows a position, the middle position's slot −1): its rows
      // routed to no expert (ids −1, weights 0) on both and in both forms, every other row's bits
      // those of the route without padding.
      const padBufs = { ...bufs, padSlots: Int32Array.of(5, -1, 2) };
      const padded = onBoth(padBufs, (gpu, p) =>
        gpu.launch(routeKernel, rowLaunch(rows, o.E, gpu.defaultStream), { logits: p.logits!, ...routeArgs(o, rows, p, 3) }), ['ids', 'weights']);
      const padFew = runKernelOn(cudaBackend(), padBufs, (gpu, p) =>
        gpu.launch(routeFewKernel, routeFewLaunch(gpu.defaultStream), { logits: p.logits!, ...routeArgs(o, rows, p, 3) }), ['ids', 'weights']);
      const K = o.topK;
      const expected = { ids: i32(r.cuda.ids!).slice(), weights: f32(r.cuda.weights!).slice() };
      expected.ids.fill(-1, 3 * K, 6 * K);
      expected.weights.fill(0, 3 * K, 6 * K);
      for (const [label, got] of [['cpu', padded.cpu], ['cuda', padded.cuda], ['cuda, few rows', padFew]] as const) {
        expect(Array.from(i32(got.ids!)), `padded route ids (${label})`).toEqual(Array.from(expected.ids));
        if (label !== 'cpu') expect(sameBits(got.weights!, new Uint8Array(expected.weights.buffer)), `padded route weights (${label})`).toBe(true);
      }
      expect(Array.from(f32(padded.cpu.weights!).subarray(3 * K, 6 * K)), 'padded rows weights (cpu)').toEqual(new Array(3 * K).fill(0));
      record(`${`moe_route ${o.label} padded rows`.padEnd(84)} routed to no expert, the rest bit-identical`);
    });
  }
  it('std.moe_route and std.moe_route_few: padded positions past the first 32 (40 rows of 1 a position, 70 of 2)', () => {
    // The few-row kernels hold the first 32 positions' padding in a mask and read later ones from
    // the table: a decode-shaped step padded only past that line (the mask empty), a verify-shaped
    // one on each side of it.
    const o = routings[4]!; // softmax top-10 of 64
    for (const [rows, padK, padded] of [[40, 1, [35]], [70, 2, [0, 33]]] as const) {
      const padSlots = Int32Array.from({ length: Math.ceil(rows / padK) }, (_, i) => ((padded as readonly number[]).includes(i) ? -1 : i));
      const bufs = { logits: random.normals(rows * o.E, 2), padSlots, ids: poisonI32(rows * o.topK), weights: poisonF32(rows * o.topK) };
      const label = `moe_route ${o.label}, ${rows} rows of ${padK} a position, padded positions ${padded.join(', ')}`;
      const r = onBoth(bufs, (gpu, p) =>
        gpu.launch(routeKernel, rowLaunch(rows, o.E, gpu.defaultStream), { logits: p.logits!, ...routeArgs(o, rows, p, padK) }), ['ids', 'weights']);
      const few = runKernelOn(cudaBackend(), bufs, (gpu, p) =>
        gpu.launch(routeFewKernel, routeFewLaunch(gpu.defaultStream), { logits: p.logits!, ...routeArgs(o, rows, p, padK) }), ['ids', 'weights']);
      compareI32(`${label} ids`, r.cpu.ids!, r.cuda.ids!);
      expect(Array.from(i32(few.ids!)), `${label}: route_few ids`).toEqual(Array.from(i32(r.cuda.ids!)));
      expect(sameBits(few.weights!, r.cuda.weights!), `${label}: route_few weights, bits of std.moe_route`).toBe(true);
      for (const pos of padded) {
        const at = pos * padK * o.topK, end = (pos + 1) * padK * o.topK;
        expect(Array.from(i32(few.ids!).subarray(at, end)), `${label}: position ${pos}'s ids`).toEqual(new Array(end - at).fill(-1));
        expect(Array.from(f32(few.weights!).subarray(at, end)), `${label}: position ${pos}'s weights`).toEqual(new Array(end - at).fill(0));
      }
      record(`${label.padEnd(84)} routed to no expert in both forms`);
    }
  });

  it('std.moe_route: softmax top-40 of 64 (more slots than a warp has lanes: picked one at a time), a tied row', () => {
    const o = { label: 'softmax top-40 of 64', E: 64, topK: 40, scoring: 0, normTopK: 1, nGroup: 1, topkGroup: 1, scaling: 1, bias: false };
    const rows = 3;
    const logits = random.normals(rows * o.E, 2);
    logits.fill(0.25, o.E, 2 * o.E);
    const bufs = { logits, bias: random.normals(o.E, 0.1), ids: poisonI32(rows * o.topK), weights: poisonF32(rows * o.topK) };
    const r = onBoth(bufs, (gpu, p) =>
      gpu.launch(routeKernel, rowLaunch(rows, o.E, gpu.defaultStream), { logits: p.logits!, ...routeArgs(o, rows, p) }), ['ids', 'weights']);
    compareI32(`moe_route ${o.label} ids`, r.cpu.ids!, r.cuda.ids!);
    const rel = relativeL2Error(f32(r.cuda.weights!), f32(r.cpu.weights!));
    record(`${`moe_route ${o.label} weights`.padEnd(84)} rel ${rel.toExponential(2)}`);
    expect(rel).toBeLessThanOrEqual(1e-6);
  });

  // The fused router of few rows: the GEMV's logits against the twin's (f32 sums against f64), and
  // the ids and weights of its last CTA bit-identical to std.moe_route's over those same logits,
  // whose ids the twin gives (the route tests above). Launched twice: the last CTA resets the
  // counter, so the second launch (as a graph replay) routes again. Rows 1 and 3 are the first
  // rows of the 8-row case: a row's logits do not depend on the other rows.
  const gemvCases = [
    { ...routings[0]!, label: 'softmax top-10 of 512, norm_topk_prob, hidden 2048', D: 2048 },
    { ...routings[1]!, label: 'softmax top-8 of 64, no norm, hidden 100 (the scalar path)', E: 64, topK: 8, D: 100 },
    { ...routings[2]!, label: 'sigmoid + bias, 8 groups keep 4, top-8 of 64, scaling 2.5, hidden 512', E: 64, D: 512 },
    { ...routings[2]!, label: 'sigmoid + bias, 8 groups keep 4, top-10 of 512, scaling 2.5, hidden 2048', E: 512, topK: 10, D: 2048 },
    { ...routings[0]!, label: 'softmax top-10 of 64, norm_topk_prob, hidden 2048 (a CTA an expert)', E: 64, D: 2048 },
    { ...routings[5]!, label: 'sigmoid + bias, no groups, top-8 of 256, scaling 2.5, hidden 2048 (two experts a CTA)', D: 2048 },
  ];
  for (const o of gemvCases) {
    for (const dtype of ROW_TYPES) {
      it(`${dtype}: std.moe_router_gemv (router GEMV + route in its last CTA): ${o.label}, rows 1, 3, 8`, () => {
        const { E, D, topK } = o;
        const x8 = random.normals(8 * D, 1);
        const w = typed(E * D, dtype, 2 / Math.sqrt(D));
        const bias = random.normals(E, 0.1);
        let logits8: Uint8Array | undefined;
        for (const rows of [8, 3, 1]) {
          const label = `${dtype} moe_router_gemv ${o.label} rows ${rows}`;
          const bufs = {
            x: encodeRows(x8.subarray(0, rows * D), dtype), w, logits: poisonF32(rows * E), counter: new Uint32Array(1), bias,
            ids: poisonI32(rows * topK), weights: poisonF32(rows * topK),
          };
          const r = onBoth(bufs, (gpu, p) => {
            for (let i = 0; i < 2; i++) {
              gpu.launch(routerGemvKernel, routerGemvLaunch(E, gpu.defaultStream), {
                x: p.x!, w: p.w!, logits: p.logits!, counter: p.counter!, ...routeArgs(o, rows, p), hidden: D, dtype: FLOAT_DTYPE_CODE[dtype], ...NO_ROUTE_TAIL,
              });
            }
          }, ['logits', 'ids', 'weights', 'counter']);
          compare(`${label} logits`, 'f32', r.cpu.logits!, r.cuda.logits!);
          expect(Array.from(i32(r.cuda.counter!)), 'the counter is back at zero').toEqual([0]);
          if (logits8) {
            const alone = sameBits(r.cuda.logits!, logits8.subarray(0, 4 * rows * E));
            expect(alone, `${label}: logits bit-identical to the same rows of 8`).toBe(true);
          } else logits8 = r.cuda.logits!;
          // The route over CUDA's own logits: std.moe_route on CUDA (bits) and the twin (ids).
          const ref = onBoth({ logits: r.cuda.logits!, bias, ids: poisonI32(rows * topK), weights: poisonF32(rows * topK) }, (gpu, p) =>
            gpu.launch(routeKernel, rowLaunch(rows, E, gpu.defaultStream), { logits: p.logits!, ...routeArgs(o, rows, p) }), ['ids', 'weights']);
          compareI32(`${label} ids vs the twin over its logits`, ref.cpu.ids!, r.cuda.ids!);
          const rel = relativeL2Error(f32(r.cuda.weights!), f32(ref.cpu.weights!));
          const same = sameBits(r.cuda.ids!, ref.cuda.ids!) && sameBits(r.cuda.weights!, ref.cuda.weights!);
          record(`${`${label} weights`.padEnd(84)} rel ${rel.toExponential(2)} vs the twin, ${same ? 'bit-identical to' : 'DIFFER from'} std.moe_route`);
          expect(rel).toBeLessThanOrEqual(1e-6);
          expect(Array.from(i32(r.cuda.ids!)), `${label}: ids of std.moe_route`).toEqual(Array.from(i32(ref.cuda.ids!)));
          expect(sameBits(r.cuda.weights!, ref.cuda.weights!), `${label}: weights, bits of std.moe_route`).toBe(true);
        }
      });
    }
  }

  // The router GEMV's tail (what the layer takes instead of launching std.moe_shared_slots and
  // std.moe_group after it in few-row steps): the slots and the groups buffer bit for bit those of
  // the two kernels over the same route, and the twin's; the shared expert gated and not, 64 and 512
  // routed experts plus the shared one (the 80B's), groups alone (GLM-5's routing), 1, 3 and 8 rows.
  const tailCases = [
    { ...routings[4]!, label: 'softmax top-10 of 64 + a gated shared expert', D: 2048, shared: 'gated' },
    { ...routings[0]!, label: 'softmax top-10 of 512 + an ungated shared expert', D: 2048, shared: 'ungated' },
    { ...routings[5]!, label: 'sigmoid + bias top-8 of 256, groups only', D: 512, shared: 'none' },
  ] as const;
  for (const o of tailCases) {
    it(`bf16: std.moe_router_gemv's tail (shared-expert slots, groups): ${o.label}, rows 1, 3, 8, as std.moe_shared_slots + std.moe_group`, () => {
      const { E, D, topK } = o;
      const withShared = o.shared !== 'none';
      const held = withShared ? E + 1 : E;
      const slots = withShared ? topK + 1 : topK;
      const dtype = 'bf16';
      for (const rows of [1, 3, 8]) {
        const label = `moe_router_gemv tail ${o.label} rows ${rows}`;
        const bufs = {
          x: typed(rows * D, dtype), w: typed(E * D, dtype, 2 / Math.sqrt(D)), bias: random.normals(E, 0.1), gate: random.normals(D, 1 / Math.sqrt(D)),
          logits: poisonF32(rows * E), counter: new Uint32Array(1), ids: poisonI32(rows * topK), weights: poisonF32(rows * topK),
          slotIds: poisonI32(rows * slots), slotWeights: poisonF32(rows * slots), groups: poisonI32(moeGroupsLength(rows, slots, held)),
          refSlotIds: poisonI32(rows * slots), refSlotWeights: poisonF32(rows * slots), refGroups: poisonI32(moeGroupsLength(rows, slots, held)),
          lastSlotIds: poisonI32(rows * slots), lastSlotWeights: poisonF32(rows * slots),
          // At 8 rows a bucket's padding: positions 2, 4 and 5 (slot −1) routed to no expert.
          ...(rows === 8 ? { padSlots: Int32Array.of(0, 1, -1, 3, -1, -1, 6, 7) } : {}),
        };
        const r = onBoth(bufs, (gpu, p) => {
          const s = gpu.defaultStream;
          const gate = o.shared === 'gated' ? p.gate! : 0n;
          const common = { x: p.x!, w: p.w!, logits: p.logits!, counter: p.counter!, ...routeArgs(o, rows, p), hidden: D, dtype: FLOAT_DTYPE_CODE[dtype] };
          // A gated shared expert as the layer launches it: one CTA more makes the slot weights.
          gpu.launch(routerGemvKernel, routerGemvLaunch(E, s, o.shared === 'gated'), {
            ...common, sharedGate: gate, slotIds: p.slotIds!, slotWeights: p.slotWeights!, sharedId: withShared ? E : -1, groups: p.groups!, groupExperts: held,
          });
          // Without that CTA the last one makes them after the route.
          if (withShared) {
            gpu.launch(routerGemvKernel, routerGemvLaunch(E, s), {
              ...common, sharedGate: gate, slotIds: p.lastSlotIds!, slotWeights: p.lastSlotWeights!, sharedId: E, groups: 0n, groupExperts: held,
            });
          }
          // The same route again, then the two kernels the tail replaces.
          gpu.launch(routerGemvKernel, routerGemvLaunch(E, s), { ...common, ...NO_ROUTE_TAIL });
          if (withShared) {
            gpu.launch(sharedSlotsKernel, sharedSlotsLaunch(rows, s), {
              x: p.x!, gate, ids: p.ids!, weights: p.weights!, slotIds: p.refSlotIds!, slotWeights: p.refSlotWeights!, rows, hidden: D, topK, sharedId: E, dtype: FLOAT_DTYPE_CODE[dtype],
              ...padArgs(p),
            });
          }
          gpu.launch(groupKernel, groupLaunch(rows, slots, s), { ids: withShared ? p.refSlotIds! : p.ids!, groups: p.refGroups!, rows, experts: held, topK: slots });
        }, ['slotIds', 'slotWeights', 'groups', 'refSlotIds', 'refSlotWeights', 'refGroups', 'lastSlotIds', 'lastSlotWeights', 'ids']);
        const length = moeGroupsLength(rows, slots, held);
        expect(Array.from(i32(r.cuda.groups!)).slice(0, length), `${label}: groups as std.moe_group's`).toEqual(Array.from(i32(r.cuda.refGroups!)).slice(0, length));
        compareI32(`${label} groups vs the twin`, r.cpu.groups!, r.cuda.groups!);
        if (withShared) {
          expect(sameBits(r.cuda.slotIds!, r.cuda.refSlotIds!), `${label}: slot ids as std.moe_shared_slots'`).toBe(true);
          expect(sameBits(r.cuda.slotWeights!, r.cuda.refSlotWeights!), `${label}: slot weights, bits of std.moe_shared_slots`).toBe(true);
          expect(sameBits(r.cuda.lastSlotIds!, r.cuda.refSlotIds!), `${label}: slot ids made by the last CTA`).toBe(true);
          expect(sameBits(r.cuda.lastSlotWeights!, r.cuda.refSlotWeights!), `${label}: slot weights made by the last CTA`).toBe(true);
          compareI32(`${label} slot ids vs the twin`, r.cpu.slotIds!, r.cuda.slotIds!);
        }
        if (rows === 8) {
          const ids = i32(withShared ? r.cuda.slotIds! : r.cuda.ids!);
          for (const pos of [2, 4, 5]) expect(Array.from(ids.subarray(pos * slots, (pos + 1) * slots)), `${label}: padded row ${pos}`).toEqual(new Array(slots).fill(-1));
          expect(i32(r.cuda.groups!)[1], `${label}: the padded rows' entries outside the experts`).toBe(3 * slots);
        }
        record(`${label.padEnd(84)} slots and groups bit-identical to the kernels'`);
      }
    });
  }

  // The shared expert as the last slot of each row: the route's slots copied, its weight
  // sigmoid(x · gate) (f32 sums) or 1; rows 1, 5 and 64 (a row's slots the same in each), hidden
  // 2 048 (Qwen3-Next) and 30 (not a multiple of the CTA).
  for (const dtype of ROW_TYPES) {
    it(`${dtype}: std.moe_shared_slots, gated and ungated, hidden 2048 and 30, each row's slots alone and batched`, () => {
      const topK = 10, sharedId = 64;
      for (const D of [2048, 30]) {
        const x64 = random.normals(64 * D);
        const gate = random.normals(D, 1 / Math.sqrt(D));
        const ids64 = Int32Array.from({ length: 64 * topK }, () => random.int(0, sharedId - 1));
        const weights64 = Float32Array.from({ length: 64 * topK }, () => random.float());
        let batched: { ids: Uint8Array; weights: Uint8Array } | undefined;
        for (const rows of [64, 5, 1]) {
          for (const gated of [true, false]) {
            const bufs = {
              x: encodeRows(x64.subarray(0, rows * D), dtype), gate, ids: ids64.slice(0, rows * topK), weights: weights64.slice(0, rows * topK),
              slotIds: poisonI32(rows * (topK + 1)), slotWeights: poisonF32(rows * (topK + 1)),
            };
            const r = onBoth(bufs, (gpu, p) =>
              gpu.launch(sharedSlotsKernel, sharedSlotsLaunch(rows, gpu.defaultStream), {
                x: p.x!, gate: gated ? p.gate! : 0n, ids: p.ids!, weights: p.weights!, slotIds: p.slotIds!, slotWeights: p.slotWeights!, rows, hidden: D, topK, sharedId,
                dtype: FLOAT_DTYPE_CODE[dtype], padSlots: 0n, padK: 0,
              }), ['slotIds', 'slotWeights']);
            const label = `${dtype} moe_shared_slots D=${D} rows=${rows} ${gated ? 'gated' : 'ungated'}`;
            compareI32(`${label} ids`, r.cpu.slotIds!, r.cuda.slotIds!);
            const rel = relativeL2Error(f32(r.cuda.slotWeights!), f32(r.cpu.slotWeights!));
            record(`${`${label} weights`.padEnd(84)} rel ${rel.toExponential(2)}`);
            expect(rel).toBeLessThanOrEqual(1e-6);
            if (!gated) {
              expect(Array.from(f32(r.cuda.slotWeights!)).filter((_, i) => i % (topK + 1) === topK).every((v) => v === 1), `${label}: weight 1`).toBe(true);
              continue;
            }
            if (!batched) batched = { ids: r.cuda.slotIds!, weights: r.cuda.slotWeights! };
            else {
              expect(sameBits(r.cuda.slotIds!, batched.ids.subarray(0, 4 * rows * (topK + 1))), `${label}: ids as batched`).toBe(true);
              expect(sameBits(r.cuda.slotWeights!, batched.weights.subarray(0, 4 * rows * (topK + 1))), `${label}: weights as batched`).toBe(true);
            }
          }
        }
      }
    });
  }

  it('std.moe_localize: an expert-parallel rank\'s entries get local ids, the others the zero expert and weight 0', () => {
    const entries = 1000, experts = 512;
    const ids = Int32Array.from({ length: entries }, () => random.int(0, experts - 1));
    for (const [first, count] of [[0, 128], [256, 128], [384, 128]] as const) {
      const r = onBoth({ ids, weights: random.normals(entries) }, (gpu, p) =>
        gpu.launch(localizeKernel, flatLaunch(entries, gpu.defaultStream), { ids: p.ids!, weights: p.weights!, entries, first, count }), ['ids', 'weights']);
      compareI32(`moe_localize experts [${first}, ${first + count}) ids`, r.cpu.ids!, r.cuda.ids!);
      expect(Array.from(f32(r.cuda.weights!)), 'weights').toEqual(Array.from(f32(r.cpu.weights!)));
    }
  });
});
