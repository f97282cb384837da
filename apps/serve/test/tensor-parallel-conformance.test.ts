// The layer contract under tensor parallelism: every rank's share of a qwen3_next model's mixers
// (its heads: qwen3NextRankConfig; its part of each tensor: the model's shard rule, read through
// shardWeights as a rank reads the checkpoint) passes the conformance kit on the CPU backend —
// Gated DeltaNet by key-head groups, attention by heads, at 2 ranks and at 4 (4 ranks over 2 KV
// heads: each KV head kept by two ranks).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Checkpoint, scopeWeights, shardWeights, type MetralePlugin } from '@metrale/core';
import { runLayerConformance } from '@metrale/core/testing';
import { CpuBackend } from '@metrale/cpu-backend';
import { plugin as gdnPlugin } from '@metrale/layer-gdn';
import { plugin as stdPlugin } from '@metrale/layer-std';
import { afterAll, describe, expect, it } from 'vitest';
import { qwen3NextRankConfig, qwen3NextShardRule } from '../src/models/qwen3-next-sharding.js';
import { writeTinyQwen3Next } from './support/tiny-qwen3-next.js';

const tmp = mkdtempSync(join(tmpdir(), 'metrale-tp-conformance-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe('the conformance kit on each tensor-parallel rank’s layers (CPU)', () => {
  const dir = join(tmp, 'model');
  writeTinyQwen3Next(dir, { dtype: 'f32', config: { num_attention_heads: 8, num_key_value_heads: 2, linear_num_key_heads: 4, linear_num_value_heads: 8 } });
  const checkpoint = Checkpoint.open(dir);
  const rule = qwen3NextShardRule(checkpoint.config);
  const layers: readonly { index: number; plugin: MetralePlugin; layerType: string; prefix: string }[] = [
    { index: 0, plugin: gdnPlugin, layerType: 'gdn', prefix: 'model.layers.0.linear_attn.' },
    { index: 1, plugin: stdPlugin, layerType: 'attention', prefix: 'model.layers.1.self_attn.' },
  ];

  for (const size of [2, 4]) {
    for (const l of layers) {
      it(`${l.layerType} (layer ${l.index}) at ${size} ranks: every rank's share passes every check`, () => {
        const config = qwen3NextRankConfig(checkpoint.config, size);
        for (let rank = 0; rank < size; rank++) {
          const weights = scopeWeights(shardWeights(checkpoint.weights, rule, rank, size), l.prefix);
          const report = runLayerConformance(l.plugin, { backend: () => new CpuBackend(), layerType: l.layerType, config, layerIndex: l.index, weights, k: 3 });
          if (rank === 0) console.log(`${l.layerType} ${size} ranks: ${report.checks.map((c) => `${c.check} ${c.status}`).join(", ")}`);
          const failed = report.checks.filter((c) => c.status === 'fail');
          expect(failed, `rank ${rank} of ${size}`).toEqual([]);
          expect(report.checks.filter((c) => c.status === 'pass').length, `rank ${rank} of ${size}`).toBeGreaterThanOrEqual(6);
        }
      }, 120_000);
    }
  }
});
