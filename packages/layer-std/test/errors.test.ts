import { CpuBackend } from '@metrale/cpu-backend';
import { existsSync } from 'node:fs';
import { MemoryWeightSource, PluginError, WeightsError, defineKernel, defineKernelModule, scopeWeights, tensorOf, type GpuBackend } from '@metrale/core';
import { AttentionLayer, MlpLayer, RmsNormLayer, prepKernel, qwen3NextAttentionOptions, requireKernels, rmsNormKernel } from '@metrale/layer-std';
import { describe, expect, it } from 'vitest';
import { LIMITS } from './setup.js';

describe('std layer errors', () => {
  it('a missing tensor names its full name and the file', () => {
    const source = new MemoryWeightSource('/ckpt/model.safetensors', [tensorOf('model.layers.0.mlp.gate_proj.weight', new Float32Array(8 * 4), [8, 4])]);
    const gpu = new CpuBackend();
    expect(() => new MlpLayer(gpu, scopeWeights(source, 'model.layers.0.mlp.'), LIMITS, { hidden: 4, inter: 8 })).toThrow(
      "/ckpt/model.safetensors: missing tensor 'model.layers.0.mlp.up_proj.weight' (expected shape [8, 4])",
    );
    gpu.dispose();
  });

  it('a misshapen tensor names its shape and the expected one', () => {
    const source = new MemoryWeightSource('/ckpt/x.safetensors', [tensorOf('weight', new Float32Array(5), [5])]);
    const gpu = new CpuBackend();
    expect(() => new RmsNormLayer(gpu, source, LIMITS, { hidden: 4, eps: 1e-6, offset: 1 })).toThrow(WeightsError);
    expect(() => new RmsNormLayer(gpu, source, LIMITS, { hidden: 4, eps: 1e-6, offset: 1 })).toThrow("tensor 'weight' has shape [5], expected [4]");
    gpu.dispose();
  });

  // With nvcc at build time the fatbins exist and the layers accept CUDA; the refusal is then
  // checked on a kernel whose fatbin is missing.
  const built = existsSync(rmsNormKernel.cuda!.module.fatbin) && existsSync(prepKernel.cuda!.module.fatbin);
  it.skipIf(built)('a layer refuses a CUDA backend while its kernels are not built, before allocating', () => {
    const fake = { kind: 'cuda' } as unknown as GpuBackend;
    const source = new MemoryWeightSource('w', [tensorOf('weight', new Float32Array(4), [4])]);
    expect(() => new RmsNormLayer(fake, source, LIMITS, { hidden: 4, eps: 1e-6, offset: 1 })).toThrow(PluginError);
    expect(() => new RmsNormLayer(fake, source, LIMITS, { hidden: 4, eps: 1e-6, offset: 1 })).toThrow(/rms-norm layer has no cuda kernels in this build .*std-rows\.fatbin.*--backend cpu/);
    const config = { hidden_size: 8, num_attention_heads: 2, num_key_value_heads: 1, head_dim: 8 };
    expect(() => new AttentionLayer(fake, source, LIMITS, qwen3NextAttentionOptions(config))).toThrow(/std-attention\.fatbin/);
  });

  it('requireKernels names a missing fatbin and passes built ones and the CPU backend', () => {
    const fake = { kind: 'cuda' } as unknown as GpuBackend;
    const missing = defineKernel({
      name: 'std.test_missing', params: { n: 'i32' },
      cuda: { module: defineKernelModule('std-missing', new URL('./no-such-dir/std-missing.fatbin', import.meta.url)), symbol: 'std_missing' },
      cpu: () => {},
    });
    expect(() => requireKernels(fake, 'test', [missing])).toThrow(PluginError);
    expect(() => requireKernels(fake, 'test', [missing])).toThrow(/test layer has no cuda kernels in this build .*std-missing\.fatbin missing: std\.test_missing.*--backend cpu/);
    const cpu = new CpuBackend();
    expect(() => requireKernels(cpu, 'test', [missing])).not.toThrow();
    cpu.dispose();
    if (built) expect(() => requireKernels(fake, 'rms-norm', [rmsNormKernel, prepKernel])).not.toThrow();
  });
});
