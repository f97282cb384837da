import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SafetensorsFile, toF32 } from '@metrale/core';

/** Where tools/fixtures/models.py writes the Hugging Face model fixtures; METRALE_MODEL_FIXTURES overrides. */
export const MODEL_FIXTURES = process.env.METRALE_MODEL_FIXTURES ?? fileURLToPath(new URL('../../fixtures/models', import.meta.url));

export const HOW_TO_MAKE = `python3 tools/fixtures/models.py --out apps/serve/fixtures/models (PyTorch + transformers; see tools/fixtures/README.md)`;

/** expected.json of a model fixture (format metrale-model-fixture/1). */
export interface ModelExpectation {
  readonly format: string;
  readonly model_type: string;
  readonly prompt_ids: number[];
  readonly max_new_tokens: number;
  /** HF `generate` greedy continuation (eos disabled). */
  readonly greedy_tokens: number[];
  /** Per generated token: HF's logit gap between its best and second-best token at that step. */
  readonly top2_margins: number[];
  readonly tolerance: { readonly logits_rel: number };
  /** What the generator checked; `bf16_conditioned` false: HF's own bf16 model is further from float64 than the bf16 bound, on average over the prompt rows. */
  readonly checks?: { readonly bf16_conditioned?: boolean; readonly hf_bf16_mean_top5_gap?: number; readonly hf_bf16_first_token_top5_gap?: number };
}

export interface ModelFixture {
  readonly name: string;
  readonly dir: string;
  readonly expected: ModelExpectation;
  /** HF's logits of every prompt row, f32 [prompt, vocab]. */
  readonly promptLogits: Float32Array;
  readonly vocab: number;
}

export function fixtureNames(): string[] {
  if (!existsSync(MODEL_FIXTURES)) return [];
  return readdirSync(MODEL_FIXTURES).filter((n) => existsSync(join(MODEL_FIXTURES, n, 'expected.json'))).sort();
}

export function readModelFixture(name: string): ModelFixture {
  const dir = join(MODEL_FIXTURES, name);
  const expected = JSON.parse(readFileSync(join(dir, 'expected.json'), 'utf8')) as ModelExpectation;
  const file = SafetensorsFile.open(join(dir, 'expected.safetensors'));
  const t = file.get('prompt_logits');
  file.close();
  return { name, dir, expected, promptLogits: toF32(t), vocab: t.shape[1]! };
}

/** Worst relative L2 error over rows: ‖a_r − b_r‖ / ‖b_r‖. */
export function worstRowRel(a: Float32Array, b: Float32Array, vocab: number): number {
  let worst = 0;
  for (let r = 0; r < b.length / vocab; r++) {
    let num = 0;
    let den = 0;
    for (let i = r * vocab; i < (r + 1) * vocab; i++) {
      num += (a[i]! - b[i]!) ** 2;
      den += b[i]! ** 2;
    }
    worst = Math.max(worst, Math.sqrt(num / den));
  }
  return worst;
}

/** The prompt logits `metrale generate --prompt-logits` wrote. */
export function readPromptLogits(path: string): Float32Array {
  const file = SafetensorsFile.open(path);
  const v = toF32(file.get('logits'));
  file.close();
  return v;
}
