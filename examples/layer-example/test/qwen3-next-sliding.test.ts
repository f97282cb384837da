import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  ArchitectureRegistry, Checkpoint, EngineLoop, InvalidArgumentError, NgramProposer, PluginRegistry, StepDriver, generateAll, loadModel,
} from '@metrale/core';
import { CpuBackend } from '@metrale/cpu-backend';
import plugin, { TINY_CONFIG, qwen3NextSlidingAdapter, writeTinyCheckpoint } from '@metrale/layer-example';
import { afterAll, describe, expect, it } from 'vitest';

const tmp = mkdtempSync(join(tmpdir(), 'layer-example-arch-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

function checkpointAt(name: string, seed = 0): string {
  const dir = join(tmp, name);
  writeTinyCheckpoint(dir, { seed });
  return dir;
}

function digest(dir: string): Record<string, string> {
  return Object.fromEntries(readdirSync(dir).sort().map((f) => [f, createHash('sha256').update(readFileSync(join(dir, f))).digest('hex')]));
}

/** The registries an application forms from this plugin, as `metrale serve --plugin` does. */
function registries() {
  const architectures = new ArchitectureRegistry();
  for (const a of plugin.architectures) architectures.register(a.modelType, a);
  const plugins = new PluginRegistry();
  plugins.register(plugin);
  return { architectures, plugins };
}

/** Greedy tokens of the checkpoint in `dir` through the public model runtime, on the CPU backend (and the drafts accepted). */
function greedy(dir: string, prompt: number[], options: { graphs?: boolean; k?: number } = {}): { tokens: number[]; accepted: number } {
  const gpu = new CpuBackend();
  const maxTokens = 24;
  const k = options.k ?? 0;
  const limits = { maxSeqs: 1, maxBatch: 1, maxK: k + 1, maxSeqLen: prompt.length + maxTokens + k, maxRows: Math.max(prompt.length, k + 1) };
  const { stack } = loadModel(dir, { gpu, limits, ...registries() });
  const driver = new StepDriver({ gpu, layers: stack.layers, limits, graphs: options.graphs ?? true });
  try {
    const loop = new EngineLoop({
      driver, vocabSize: stack.vocabSize, prefillChunk: limits.maxRows, ...(k ? { speculation: { proposer: new NgramProposer({ k }), k } } : {}),
    });
    const { outputs, stats } = generateAll(loop, [{ prompt, maxTokens }], k || undefined);
    return { tokens: outputs[0]!.tokens, accepted: stats.speculation?.accepted ?? 0 };
  } finally {
    driver.dispose();
    stack.dispose();
    gpu.dispose();
  }
}

describe('the qwen3_next_sliding architecture', () => {
  it('is part of the plugin', () => {
    expect(plugin.architectures).toEqual([qwen3NextSlidingAdapter]);
    expect(qwen3NextSlidingAdapter.modelType).toBe(TINY_CONFIG.model_type);
  });

  it('writes the same checkpoint for the same seed, another for another seed', () => {
    const a = digest(checkpointAt('seed0-a'));
    expect(Object.keys(a)).toEqual(['config.json', 'generation_config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json']);
    expect(digest(checkpointAt('seed0-b'))).toEqual(a);
    expect(digest(checkpointAt('seed1', 1))['model.safetensors']).not.toBe(a['model.safetensors']);
    expect(Checkpoint.open(join(tmp, 'seed0-a')).config.model_type).toBe('qwen3_next_sliding');
  });

  it('builds embedding, one block per layer (sliding window or full attention, then the MLP), norm and lm head', () => {
    const gpu = new CpuBackend();
    const limits = { maxSeqs: 1, maxBatch: 1, maxK: 1, maxSeqLen: 16, maxRows: 16 };
    const { stack } = loadModel(checkpointAt('layers'), { gpu, limits, ...registries() });
    try {
      expect(stack.layers.map((l) => l.type)).toEqual([
        'embedding',
        'qwen3_next_sliding layer 0 (sliding_window)', 'qwen3_next_sliding layer 1 (full_attention)',
        'qwen3_next_sliding layer 2 (sliding_window)', 'qwen3_next_sliding layer 3 (full_attention)',
        'rms-norm', 'lm-head',
      ]);
      expect(stack.vocabSize).toBe(259);
      expect(stack.eosTokenIds).toEqual([258]);
    } finally {
      stack.dispose();
      gpu.dispose();
    }
  });

  it('generates the same greedy tokens eagerly, replaying graphs, and verifying n-gram drafts', () => {
    const dir = checkpointAt('generate');
    // A prompt longer than the window (8), repeating itself so drafts get proposed and accepted.
    const prompt = [...'the cat sat on the mat; the cat sat on the'].map((ch) => ch.charCodeAt(0));
    const eager = greedy(dir, prompt, { graphs: false }).tokens;
    expect(eager).toHaveLength(24);
    expect(greedy(dir, prompt).tokens).toEqual(eager);
    const speculative = greedy(dir, prompt, { k: 3 });
    expect(speculative.tokens).toEqual(eager);
    // Verify steps ran and kept drafts: the sliding window's rewind on rejected rows was exercised.
    expect(speculative.accepted).toBeGreaterThan(0);
    // Another seed is another model.
    expect(greedy(checkpointAt('other', 7), prompt, { graphs: false }).tokens).not.toEqual(eager);
  });

  it('names the field of a config it cannot build', () => {
    const gpu = new CpuBackend();
    const limits = { maxSeqs: 1, maxBatch: 1, maxK: 1, maxSeqLen: 16, maxRows: 16 };
    const config = { ...TINY_CONFIG, layer_types: ['sliding_window', 'linear_attention', 'sliding_window', 'full_attention'] };
    const build = () => qwen3NextSlidingAdapter.build({ gpu, config, weights: Checkpoint.open(checkpointAt('bad')).weights, limits });
    expect(build).toThrow(InvalidArgumentError);
    expect(build).toThrow(/config\.layer_types\[1\] is "linear_attention"; qwen3_next_sliding layers are 'sliding_window' or 'full_attention'/);
    gpu.dispose();
  });
});
