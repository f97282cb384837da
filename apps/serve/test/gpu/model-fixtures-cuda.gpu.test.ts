import { describe, expect, it } from 'vitest';
import { probe } from '@metrale/cuda-backend';
import { requireKernels, rmsNormKernel, prepKernel, expertsKernel, embedKernel } from '@metrale/layer-std';
import { metrale } from '../support/run-cli.js';
import { fixtureNames, HOW_TO_MAKE, readModelFixture } from '../support/model-fixtures.js';

// The Hugging Face model fixtures on CUDA: the same greedy tokens wherever HF's top-2 margin at
// that step exceeds 0.05 (a closer call may flip: the device sums in another order;
// from the first such step on the sequences may part, so comparison stops before it).
const cuda = probe();
let stdKernels = true;
try {
  requireKernels({ kind: 'cuda' } as never, 'std', [embedKernel, rmsNormKernel, prepKernel, expertsKernel]);
} catch {
  stdKernels = false;
}

describe.skipIf(!cuda.available || !stdKernels)(`metrale generate on the HF model fixtures (CUDA)${!cuda.available ? `: ${cuda.reason}` : !stdKernels ? ': @metrale/layer-std has no CUDA kernels in this build' : ''}`, () => {
  const names = fixtureNames();
  it('finds the fixtures', () => expect(names.length, `make them with ${HOW_TO_MAKE}`).toBeGreaterThan(0));
  for (const name of names) {
    for (const spec of [[], ['--spec', 'ngram:k=4,adaptive=0']]) {
      it(`${name}${spec.length ? ' with --spec ngram' : ''}: tokens agree up to the first step with a top-2 margin ≤ 0.05`, () => {
        const fx = readModelFixture(name);
        const r = metrale(['generate', '--model', fx.dir, '--prompt-ids', fx.expected.prompt_ids.join(','), '--max-tokens', String(fx.expected.max_new_tokens),
          '--greedy', '--ignore-eos', '--backend', 'cuda', '--dtype', 'f32', '--json', ...spec]);
        expect(r.code, r.stderr).toBe(0);
        const tokens = (JSON.parse(r.lines.at(-1)!) as { tokens: number[] }).tokens;
        const close = fx.expected.top2_margins.findIndex((m) => m <= 0.05);
        const upTo = close < 0 ? tokens.length : close;
        expect(tokens.slice(0, upTo)).toEqual(fx.expected.greedy_tokens.slice(0, upTo));
      });
    }
  }
});
