import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { probe } from '@metrale/cuda-backend';
import { indexScoreKernel, mlaAppendKernel, sparseAttnKernel, topkKernel } from '@metrale/layer-dsa';
import { embedKernel, expertsKernel, requireKernels, rmsNormKernel, routeKernel } from '@metrale/layer-std';
import { metrale } from '../support/run-cli.js';
import { HOW_TO_MAKE, MODEL_FIXTURES, readModelFixture, readPromptLogits, worstRowRel } from '../support/model-fixtures.js';

// The glm_moe_dsa fixture (GLM-5: DSA sparse attention + MoE, tools/fixtures/models.py) on CUDA:
// HF's greedy tokens wherever HF's top-2 margin at that step exceeds 0.05 (a closer call may flip:
// the device sums in another order; from the first such step on the sequences may part, so the
// comparison stops before it), with and without n-gram speculation, and HF's prompt logits within
// the fixture's tolerance (the GEMMs accumulate in f32, no TF32). It needs the CUDA kernels of
// @metrale/layer-std and @metrale/layer-dsa; without them, or without a GPU, it skips and says why.
const NAME = 'glm-moe-dsa-tiny';
const cuda = probe();
const missing: string[] = [];
try {
  requireKernels({ kind: 'cuda' } as never, 'std', [embedKernel, rmsNormKernel, routeKernel, expertsKernel]);
} catch {
  missing.push('@metrale/layer-std');
}
if ([mlaAppendKernel, indexScoreKernel, topkKernel, sparseAttnKernel].some((k) => !k.cuda || !existsSync(k.cuda.module.fatbin))) missing.push('@metrale/layer-dsa');
const why = !cuda.available ? cuda.reason : missing.length ? `${missing.join(' and ')} ha${missing.length > 1 ? 've' : 's'} no CUDA kernels in this build` : '';
if (why) console.warn(`[serve gpu] ${NAME} skipped: ${why}`);

const tmp = mkdtempSync(join(tmpdir(), 'metrale-glm-cuda-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe.skipIf(why !== '')(`metrale generate on ${NAME} (CUDA)${why ? `: ${why}` : ''}`, () => {
  it('finds the fixture', () => expect(existsSync(join(MODEL_FIXTURES, NAME, 'expected.json')), `make it with ${HOW_TO_MAKE}`).toBe(true));

  for (const spec of [[], ['--spec', 'ngram:k=4,adaptive=0'], ['--spec', 'ngram:k=3,min=1,adaptive=0']]) {
    it(`${spec.length ? spec.join(' ') : 'greedy'}: tokens agree up to the first step with a top-2 margin ≤ 0.05${spec.length ? '' : '; prompt logits within tolerance'}`, () => {
      const fx = readModelFixture(NAME);
      const logits = join(tmp, `logits-${spec.length}.safetensors`);
      const r = metrale(['generate', '--model', fx.dir, '--prompt-ids', fx.expected.prompt_ids.join(','), '--max-tokens', String(fx.expected.max_new_tokens),
        '--greedy', '--ignore-eos', '--backend', 'cuda', '--dtype', 'f32', '--json', ...spec, ...(spec.length ? [] : ['--prompt-logits', logits])]);
      expect(r.code, r.stderr).toBe(0);
      const out = JSON.parse(r.lines.at(-1)!) as { tokens: number[]; stats: { backend: string } };
      expect(out.stats.backend).toBe('cuda');
      const close = fx.expected.top2_margins.findIndex((m) => m <= 0.05);
      const upTo = close < 0 ? out.tokens.length : close;
      console.log(`${NAME} ${spec.join(' ') || 'greedy'} (CUDA): ${upTo} of ${out.tokens.length} tokens compared`);
      expect(out.tokens.slice(0, upTo)).toEqual(fx.expected.greedy_tokens.slice(0, upTo));
      if (!spec.length) {
        const rel = worstRowRel(readPromptLogits(logits), fx.promptLogits, fx.vocab);
        console.log(`${NAME} (CUDA): prompt logits worst row rel ${rel.toExponential(2)}`);
        expect(rel).toBeLessThanOrEqual(fx.expected.tolerance.logits_rel);
      }
    });
  }
});
