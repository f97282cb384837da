import { defineKernel } from '@metrale/core';
import { addCpu, addRmsNormCpu, embedCpu, geluMulCpu, layerNormCpu, rmsNormCpu, siluMulCpu, softcapCpu } from './rows.cpu.js';
import { rowsModule as module } from './std-modules.js';

// Launched with core's rowLaunch (one CTA per row) or flatLaunch (elementwise). Every row kernel takes the row type as `dtype` (FLOAT_DTYPE_CODE: 0 f32, 1 bf16, 2 f16); norm
// weights and biases are f32. `earlyStart: 'wait-first'`: the kernel begins with early_start() (std-common.cuh), and
// every launch of it starts early.

export const embedKernel = defineKernel({
  name: 'std.embed',
  params: { tokens: 'ptr', table: 'ptr', out: 'ptr', rows: 'i32', hidden: 'i32', vocab: 'i32', scale: 'f32', dtype: 'i32' },
  cuda: { module, symbol: 'std_embed' },
  cpu: embedCpu,
});

/** RMSNorm `y = x̂ · (offset + w)`; `roundNormalized` 1 rounds x̂ to the row type before the weight (Llama, GLM), 0 rounds once (Qwen3-Next, Gemma 3n). */
export const rmsNormKernel = defineKernel({
  name: 'std.rms_norm',
  params: { input: 'ptr', output: 'ptr', weight: 'ptr', rows: 'i32', hidden: 'i32', eps: 'f32', offset: 'f32', roundNormalized: 'i32', dtype: 'i32' },
  cuda: { module, symbol: 'std_rms_norm' },
  cpu: rmsNormCpu,
  earlyStart: 'wait-first',
});

/** `sum = a + b` as `std.add`, then `output = std.rms_norm(sum)`: the residual add and the norm after it in one launch (any output may alias an input). */
export const addRmsNormKernel = defineKernel({
  name: 'std.add_rms_norm',
  params: {
    a: 'ptr', b: 'ptr', sum: 'ptr', output: 'ptr', weight: 'ptr', rows: 'i32', hidden: 'i32', eps: 'f32', offset: 'f32', roundNormalized: 'i32', dtype: 'i32',
  },
  cuda: { module, symbol: 'std_add_rms_norm' },
  cpu: addRmsNormCpu,
  earlyStart: 'wait-first',
});

export const layerNormKernel = defineKernel({
  name: 'std.layer_norm',
  params: { input: 'ptr', output: 'ptr', weight: 'ptr', bias: 'ptr', rows: 'i32', hidden: 'i32', eps: 'f32', dtype: 'i32' },
  cuda: { module, symbol: 'std_layer_norm' },
  cpu: layerNormCpu,
});

export const addKernel = defineKernel({
  name: 'std.add',
  params: { a: 'ptr', b: 'ptr', out: 'ptr', count: 'i32', dtype: 'i32' },
  cuda: { module, symbol: 'std_add' },
  cpu: addCpu,
  earlyStart: 'wait-first',
});

export const siluMulKernel = defineKernel({
  name: 'std.silu_mul',
  params: { gateUp: 'ptr', out: 'ptr', rows: 'i32', inter: 'i32', dtype: 'i32' },
  cuda: { module, symbol: 'std_silu_mul' },
  cpu: siluMulCpu,
});

/** `out = gelu_tanh(g') · up`, g' the gate after Gemma 3n's activation sparsity when `sparse` (cutoff: Φ⁻¹(sparsity) in f32; the kernel rounds it to the row type). */
export const geluMulKernel = defineKernel({
  name: 'std.gelu_mul',
  params: { gateUp: 'ptr', out: 'ptr', rows: 'i32', inter: 'i32', cutoff: 'f32', sparse: 'i32', dtype: 'i32' },
  cuda: { module, symbol: 'std_gelu_mul' },
  cpu: geluMulCpu,
});

/** f32 logits `x = cap · tanh(x / cap)`, in place (flatLaunch). */
export const softcapKernel = defineKernel({
  name: 'std.softcap',
  params: { x: 'ptr', count: 'i32', cap: 'f32' },
  cuda: { module, symbol: 'std_softcap' },
  cpu: softcapCpu,
});
