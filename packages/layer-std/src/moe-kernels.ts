import { defineKernel } from '@metrale/core';
import { combineCpu, expertsCpu, routeCpu } from './moe.cpu.js';
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

export const expertsKernel = defineKernel({
  name: 'std.moe_experts',
  params: {
    input: 'ptr', ids: 'ptr', weights: 'ptr', gateUp: 'ptr', down: 'ptr', output: 'ptr',
    rows: 'i32', hidden: 'i32', inter: 'i32', experts: 'i32', topK: 'i32',
  },
  cuda: { module, symbol: 'std_moe_experts' },
  cpu: expertsCpu,
});

export const combineKernel = defineKernel({
  name: 'std.moe_combine',
  params: { routed: 'ptr', shared: 'ptr', gate: 'ptr', output: 'ptr', rows: 'i32', hidden: 'i32' },
  cuda: { module, symbol: 'std_moe_combine' },
  cpu: combineCpu,
});
