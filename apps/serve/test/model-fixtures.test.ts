import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { architectures } from '@metrale/core';
import { afterAll, describe, expect, it } from 'vitest';
import { registerModels } from '../src/models/index.js';
import { metrale } from './support/run-cli.js';
import { fixtureNames, HOW_TO_MAKE, MODEL_FIXTURES, readModelFixture, readPromptLogits, worstRowRel } from './support/model-fixtures.js';

// Tiny random checkpoints saved by Hugging Face itself, with HF's greedy continuation and prompt
// logits (tools/fixtures/models.py): `metrale generate` must reproduce them on the CPU backend.
const tmp = mkdtempSync(join(tmpdir(), 'metrale-model-fixtures-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
registerModels();
const names = fixtureNames();

describe('metrale generate on the Hugging Face model fixtures (CPU)', () => {
  for (const modelType of ['qwen3_next', 'glm_moe_dsa', 'qwen3_5', 'qwen3_5_moe', 'qwen3_5_text', 'gemma3n_text', 'gemma3n']) {
    it(`finds the ${modelType} fixture, and its adapter`, () => {
      expect(names.some((n) => readModelFixture(n).expected.model_type === modelType), `no ${modelType} fixture in ${MODEL_FIXTURES}; make it with ${HOW_TO_MAKE}`).toBe(true);
      expect(architectures.has(modelType)).toBe(true);
    });
  }

  for (const name of names) {
    const fx = readModelFixture(name);
    const supported = architectures.has(fx.expected.model_type);
    const run = (extra: string[]) => {
      const r = metrale(['generate', '--model', fx.dir, '--prompt-ids', fx.expected.prompt_ids.join(','), '--max-tokens', String(fx.expected.max_new_tokens),
        '--greedy', '--ignore-eos', '--backend', 'cpu', '--dtype', 'f32', '--json', ...extra]);
      expect(r.stderr).toBe('');
      expect(r.code).toBe(0);
      return JSON.parse(r.lines.at(-1)!) as { tokens: number[]; stats: { speculative: { acceptance_rate: number; accepted: number; drafted: number } | null } };
    };

    it.skipIf(!supported)(`${name}: greedy tokens equal HF's and prompt logits are within ${fx.expected.tolerance.logits_rel} relative`, () => {
      const file = join(tmp, `${name}.logits.safetensors`);
      const out = run(['--prompt-logits', file]);
      expect(out.tokens).toEqual(fx.expected.greedy_tokens);
      const rel = worstRowRel(readPromptLogits(file), fx.promptLogits, fx.vocab);
      console.log(`${name}: prompt logits worst row rel ${rel.toExponential(2)}`);
      expect(rel).toBeLessThanOrEqual(fx.expected.tolerance.logits_rel);
    });

    it.skipIf(!supported)(`${name}: the same tokens with --spec ngram`, () => {
      const out = run(['--spec', 'ngram:k=4,adaptive=0']);
      expect(out.tokens).toEqual(fx.expected.greedy_tokens);
      const s = out.stats.speculative!;
      console.log(`${name}: n-gram acceptance rate ${(100 * s.acceptance_rate).toFixed(1)}% (${s.accepted}/${s.drafted} drafts)`);
    });
  }
});
