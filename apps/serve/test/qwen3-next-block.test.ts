import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CpuBackend } from '@metrale/cpu-backend';
import { BlockScratch, Checkpoint, DecoderBlock, definePlugin, scopeWeights } from '@metrale/core';
import { runLayerConformance } from '@metrale/core/testing';
import { plugin as gdn } from '@metrale/layer-gdn';
import { MoeLayer, RmsNormLayer, qwen3NextMoeOptions, residualAdd } from '@metrale/layer-std';
import { afterAll, describe, expect, it } from 'vitest';
import { writeTinyQwen3Next } from './support/tiny-qwen3-next.js';

// A real decoder block (RMSNorm + Gated DeltaNet, RMSNorm + MoE) through the conformance kit: the
// block must forward write-on-accept and carried verify of its GDN part as the bare layer does.
const dir = mkdtempSync(join(tmpdir(), 'metrale-block-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
writeTinyQwen3Next(dir, { dtype: 'f32' });
const checkpoint = Checkpoint.open(dir);

const blockPlugin = definePlugin({
  name: 'qwen3-next-block', version: '0.0.0', specificationVersion: '1.0.0', layerTypes: ['block'],
  create: ({ gpu, config, limits }) => {
    const w = (p: string) => scopeWeights(checkpoint.weights, `model.layers.0.${p}`);
    const hidden = config.hidden_size as number;
    const norm = (p: string) => new RmsNormLayer(gpu, w(p), limits, { hidden, eps: 1e-6, offset: 1 });
    const mixer = gdn.create({ gpu, layerType: 'gdn', config, layerIndex: 0, weights: w('linear_attn.'), limits });
    const moe = new MoeLayer(gpu, w('mlp.'), limits, qwen3NextMoeOptions(config));
    const scratch = new BlockScratch(gpu, 4 * hidden, limits.maxRows);
    return new DecoderBlock({ gpu, branches: [[norm('input_layernorm.'), mixer], [norm('post_attention_layernorm.'), moe]], add: residualAdd, scratch });
  },
});

describe('a qwen3_next decoder block (GDN + MoE) as one layer', () => {
  it('passes the conformance kit on the CPU backend, carried state included', () => {
    const report = runLayerConformance(blockPlugin, { backend: () => new CpuBackend(), config: checkpoint.config, weights: checkpoint.weights, k: 3 });
    const status = Object.fromEntries(report.checks.map((c) => [c.check, c.status]));
    expect(report.passed).toBe(true);
    for (const check of ['replay-equals-eager', 'verify-accept-equals-decode', 'rejected-rows-leave-no-trace', 'carried-equals-write-on-accept', 'slot-reuse-starts-clean']) {
      expect(status[check], check).toBe('pass');
    }
  });
});
