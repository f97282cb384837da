import { defineKernel, type LaunchConfig, type Stream } from '@metrale/core';
import { combineCpu, expertsCpu, expertsUpCpu, routeCpu } from './moe.cpu.js';
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

/** Intermediate rows per CTA of `std.moe_experts_up` and output values per CTA of `std.moe_experts` (kernels/std-moe.cu). */
const UP_ROWS = 32;
const DOWN_ROWS = 16;

/** `std.moe_experts_up`: one CTA per (row, expert slot) and 32 intermediate rows, a warp per row. */
export function expertsUpLaunch(rows: number, topK: number, inter: number, stream: Stream): LaunchConfig {
  return { grid: [Math.max(1, rows * topK), Math.ceil(inter / UP_ROWS)], block: 256, stream };
}

/** `std.moe_experts`: one CTA per row and 16 output values, a warp per value. */
export function expertsLaunch(rows: number, hidden: number, stream: Stream): LaunchConfig {
  return { grid: [Math.max(1, rows), Math.ceil(hidden / DOWN_ROWS)], block: 256, stream };
}

export const expertsUpKernel = defineKernel({
  name: 'std.moe_experts_up',
  params: { input: 'ptr', ids: 'ptr', gateUp: 'ptr', h: 'ptr', rows: 'i32', hidden: 'i32', inter: 'i32', experts: 'i32', topK: 'i32' },
  cuda: { module, symbol: 'std_moe_experts_up' },
  cpu: expertsUpCpu,
});

export const expertsKernel = defineKernel({
  name: 'std.moe_experts',
  params: { h: 'ptr', ids: 'ptr', weights: 'ptr', down: 'ptr', output: 'ptr', rows: 'i32', hidden: 'i32', inter: 'i32', experts: 'i32', topK: 'i32' },
  cuda: { module, symbol: 'std_moe_experts' },
  cpu: expertsCpu,
});

export const combineKernel = defineKernel({
  name: 'std.moe_combine',
  params: { routed: 'ptr', shared: 'ptr', gate: 'ptr', output: 'ptr', rows: 'i32', hidden: 'i32' },
  cuda: { module, symbol: 'std_moe_combine' },
  cpu: combineCpu,
});
