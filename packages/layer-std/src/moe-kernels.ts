import { defineKernel, type LaunchConfig, type Stream } from '@metrale/core';
import { combineCpu, expertsDownCpu, expertsRowwiseCpu, expertsSumCpu, expertsUpCpu, groupCpu, routeCpu } from './moe.cpu.js';
import { moeModule as module } from './std-modules.js';

export const routeKernel = defineKernel({
  name: 'std.moe_route',
  params: {
    logits: 'ptr', bias: 'ptr', ids: 'ptr', weights: 'ptr',
    rows: 'i32', experts: 'i32', topK: 'i32', scoring: 'i32', normTopK: 'i32', nGroup: 'i32', topkGroup: 'i32', scaling: 'f32',
  },
  cuda: { module, symbol: 'std_moe_route' },
  cpu: routeCpu,
});

/** Ints of the `groups` buffer of `std.moe_group` (header 3, experts chosen E, starts E + 1, entries rows·topK; KERNELS.md). */
export function moeGroupsLength(rows: number, topK: number, experts: number): number {
  return 4 + 2 * experts + rows * topK;
}

/** `std.moe_group`: one CTA, a thread per expert (at most 1024). */
export function groupLaunch(experts: number, stream: Stream): LaunchConfig {
  return { grid: 1, block: Math.min(1024, 32 * Math.ceil(Math.max(1, experts) / 32)), stream };
}

/**
 * Entries (row, slot) per expert from which the layer takes the grouped kernels. On the H200
 * (docs/benchmarks.md, layer-std MoE) they beat the row-wise ones at 10 entries per expert (64
 * experts, batch 64) and lose at one or two: their CTAs (168 / 128 registers) keep 12–16 warps per
 * SM against the row-wise kernels' 64, too few bytes in flight when an expert's tile is streamed
 * for one or two rows. Both give the same bits for every row, so the switch keeps each row's
 * result batch-independent.
 */
export const GROUPED_MIN_ENTRIES_PER_EXPERT = 8;

/** Whether a step of `rows` rows runs the grouped expert kernels (else the row-wise ones). */
export function moeGrouped(rows: number, topK: number, experts: number): boolean {
  return rows * topK >= GROUPED_MIN_ENTRIES_PER_EXPERT * experts;
}

/** Weight rows per CTA of the grouped expert kernels: 2 per warp (kernels/std-moe.cu) × 4 warps. */
const GROUPED_BLOCK = 128;
const GROUPED_ROWS = 2 * (GROUPED_BLOCK / 32);

/** Expert slots of the grouped kernels: at most one CTA column per expert, per (row, slot) entry. */
const slots = (rows: number, topK: number, experts: number): number => Math.max(1, Math.min(experts, rows * topK));

/** `std.moe_experts_up`: CTAs (expert slot, 8 intermediate rows), a warp per 2 rows. */
export function expertsUpLaunch(rows: number, topK: number, inter: number, experts: number, stream: Stream): LaunchConfig {
  return { grid: [slots(rows, topK, experts), Math.ceil(inter / GROUPED_ROWS)], block: GROUPED_BLOCK, stream };
}

/** `std.moe_experts_down`: CTAs (expert slot, 8 output values), a warp per 2 values. */
export function expertsDownLaunch(rows: number, topK: number, hidden: number, experts: number, stream: Stream): LaunchConfig {
  return { grid: [slots(rows, topK, experts), Math.ceil(hidden / GROUPED_ROWS)], block: GROUPED_BLOCK, stream };
}

/** `std.moe_experts` (the weighted sum): CTAs (row, 512 values), a thread per 4 values. */
export function expertsLaunch(rows: number, hidden: number, stream: Stream): LaunchConfig {
  return { grid: [Math.max(1, rows), Math.ceil(hidden / 512)], block: 128, stream };
}

export const groupKernel = defineKernel({
  name: 'std.moe_group',
  params: { ids: 'ptr', groups: 'ptr', rows: 'i32', experts: 'i32', topK: 'i32' },
  cuda: { module, symbol: 'std_moe_group' },
  cpu: groupCpu,
});

export const expertsUpKernel = defineKernel({
  name: 'std.moe_experts_up',
  params: { input: 'ptr', ids: 'ptr', groups: 'ptr', gateUp: 'ptr', h: 'ptr', rows: 'i32', hidden: 'i32', inter: 'i32', experts: 'i32', topK: 'i32' },
  cuda: { module, symbol: 'std_moe_experts_up' },
  cpu: expertsUpCpu,
});

export const expertsDownKernel = defineKernel({
  name: 'std.moe_experts_down',
  params: { h: 'ptr', ids: 'ptr', groups: 'ptr', down: 'ptr', y: 'ptr', rows: 'i32', hidden: 'i32', inter: 'i32', experts: 'i32', topK: 'i32' },
  cuda: { module, symbol: 'std_moe_experts_down' },
  cpu: expertsDownCpu,
});

export const expertsKernel = defineKernel({
  name: 'std.moe_experts',
  params: { y: 'ptr', ids: 'ptr', weights: 'ptr', output: 'ptr', rows: 'i32', hidden: 'i32', experts: 'i32', topK: 'i32' },
  cuda: { module, symbol: 'std_moe_experts' },
  cpu: expertsSumCpu,
});

// The per-(row, expert) kernels: each row re-reads its experts' weights. The layer's path below
// GROUPED_MIN_ENTRIES_PER_EXPERT; the grouped kernels give the same bits (test/gpu).

/** `std.moe_experts_up_rowwise`: one CTA per (row, expert slot) and 32 intermediate rows, a warp per row. */
export function expertsUpRowwiseLaunch(rows: number, topK: number, inter: number, stream: Stream): LaunchConfig {
  return { grid: [Math.max(1, rows * topK), Math.ceil(inter / 32)], block: 256, stream };
}

/** `std.moe_experts_rowwise`: one CTA per row and 16 output values, a warp per value. */
export function expertsRowwiseLaunch(rows: number, hidden: number, stream: Stream): LaunchConfig {
  return { grid: [Math.max(1, rows), Math.ceil(hidden / 16)], block: 256, stream };
}

export const expertsUpRowwiseKernel = defineKernel({
  name: 'std.moe_experts_up_rowwise',
  params: { input: 'ptr', ids: 'ptr', gateUp: 'ptr', h: 'ptr', rows: 'i32', hidden: 'i32', inter: 'i32', experts: 'i32', topK: 'i32' },
  cuda: { module, symbol: 'std_moe_experts_up_rowwise' },
  cpu: expertsUpCpu,
});

export const expertsRowwiseKernel = defineKernel({
  name: 'std.moe_experts_rowwise',
  params: { h: 'ptr', ids: 'ptr', weights: 'ptr', down: 'ptr', output: 'ptr', rows: 'i32', hidden: 'i32', inter: 'i32', experts: 'i32', topK: 'i32' },
  cuda: { module, symbol: 'std_moe_experts_rowwise' },
  cpu: expertsRowwiseCpu,
});

export const combineKernel = defineKernel({
  name: 'std.moe_combine',
  params: { routed: 'ptr', shared: 'ptr', gate: 'ptr', output: 'ptr', rows: 'i32', hidden: 'i32' },
  cuda: { module, symbol: 'std_moe_combine' },
  cpu: combineCpu,
});
