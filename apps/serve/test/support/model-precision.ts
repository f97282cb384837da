// The model fixtures in each data path (tools/fixtures/models.py; HF's float64 logits), on one
// backend: the first generated token's top-5 logprobs, as `metrale generate --json --logprobs 5`
// reports them, within 0.002 of HF's in --dtype f32 (with HF's greedy tokens) and within
// 0.12 in bf16 (the checkpoint's own dtype, --dtype auto) and for the block-FP8 fixture (its
// reference: the dequantized weights). The bf16 bound is not 0.05: Hugging Face's own bf16 model of
// these fixtures is 0.028–0.110 from its float64 one (qwen3-next-real: 0.110; docs/benchmarks.md),
// and the roundings the precision rule requires alone (bf16 residual stream and GEMM inputs) put
// three of five fixtures above 0.05 on this one-row figure, which moves by ±0.03 with the order of
// f32 sums (CPU against CUDA). 0.12: HF's worst, plus a tenth. A fixture whose HF bf16 model is
// on average over its prompt rows more than 4 × that from float64 (`checks.bf16_conditioned` false,
// tools/fixtures/models.py: the multimodal gemma3n-tiny, ~1.0) is not bounded in bf16, where one
// row's figure is a lottery; the test's name says so. Shared by the CPU and the CUDA test.
import { describe, expect, it } from 'vitest';
import { metrale } from './run-cli.js';
import { fixtureNames, readModelFixture, type ModelFixture } from './model-fixtures.js';

interface Logprob { token: number; logprob: number }

/** The bound of the bf16 and FP8 paths' top-5 logprobs against the float64 reference (see above). */
const AUTO_BOUND = 0.12;

/** HF's top-n logprobs of the first generated token: the log-softmax of the last prompt row, in f64. */
export function referenceTop(fx: ModelFixture, n: number): Logprob[] {
  const V = fx.vocab;
  const row = fx.promptLogits.subarray((fx.expected.prompt_ids.length - 1) * V, fx.expected.prompt_ids.length * V);
  let max = -Infinity;
  for (const v of row) max = Math.max(max, v);
  let sum = 0;
  for (const v of row) sum += Math.exp(v - max);
  const lse = max + Math.log(sum);
  return Array.from(row, (v, token) => ({ token, logprob: v - lse }))
    .sort((a, b) => b.logprob - a.logprob || a.token - b.token)
    .slice(0, n);
}

/**
 * The largest logprob difference between two top-n lists, by token. A token in one list only
 * (a near-tie at the last rank) counts by how far it is from the other list's last entry.
 */
export function topLogprobGap(ours: readonly Logprob[], ref: readonly Logprob[]): number {
  const mine = new Map(ours.map((e) => [e.token, e.logprob]));
  const theirs = new Map(ref.map((e) => [e.token, e.logprob]));
  const lastMine = ours.at(-1)!.logprob, lastRef = ref.at(-1)!.logprob;
  let worst = 0;
  for (const { token, logprob } of ref) {
    const m = mine.get(token);
    worst = Math.max(worst, m === undefined ? Math.max(0, logprob - lastMine) : Math.abs(m - logprob));
  }
  for (const { token, logprob } of ours) if (!theirs.has(token)) worst = Math.max(worst, Math.max(0, logprob - lastRef));
  return worst;
}

function firstTokenTop(fx: ModelFixture, backend: string, dtype: string, extra: string[] = []): { top: Logprob[]; tokens: number[]; dtype: string } {
  const r = metrale(['generate', '--model', fx.dir, '--prompt-ids', fx.expected.prompt_ids.join(','), '--max-tokens', String(fx.expected.max_new_tokens),
    '--greedy', '--ignore-eos', '--backend', backend, '--json', '--dtype', dtype, '--logprobs', '5', ...extra]);
  expect(r.code, r.stderr).toBe(0);
  const line = JSON.parse(r.lines.at(-1)!) as { tokens: number[]; logprobs: Logprob[][]; stats: { dtype: string } };
  expect(line.logprobs).toHaveLength(line.tokens.length);
  for (const list of line.logprobs) {
    expect(list).toHaveLength(5);
    for (let i = 1; i < list.length; i++) expect(list[i]!.logprob).toBeLessThanOrEqual(list[i - 1]!.logprob);
    expect(list[0]!.logprob).toBeLessThanOrEqual(0);
  }
  return { top: line.logprobs[0]!, tokens: line.tokens, dtype: line.stats.dtype };
}

/** The tests, for `backend` ('cpu' or 'cuda'). */
export function describeModelPrecision(backend: string, skip = ''): void {
  describe.skipIf(skip !== '')(`the model fixtures, logprobs of the first generated token against HF (${backend})${skip ? `: ${skip}` : ''}`, () => {
    for (const name of fixtureNames()) {
      const fx = readModelFixture(name);
      const ref = referenceTop(fx, 5);
      const fp8 = name.includes('fp8');

      it(`${name}: --dtype f32 within 0.002 and greedy-equal`, () => {
        const { top, tokens, dtype } = firstTokenTop(fx, backend, 'f32');
        expect(dtype).toBe('f32');
        const gap = topLogprobGap(top, ref);
        console.log(`${name} ${backend} f32: top-5 logprob gap ${gap.toExponential(2)}`);
        expect(gap).toBeLessThanOrEqual(0.002);
        expect(tokens).toEqual(fx.expected.greedy_tokens);
        // The greedy token is the first of its list.
        expect(top[0]!.token).toBe(tokens[0]);
      });

      // A fixture whose HF bf16 model is itself further than the bound from float64 on average over
      // the prompt rows (tools/fixtures/models.py records it) cannot tell a bug from bf16: said, not bounded.
      const ill = fx.expected.checks?.bf16_conditioned === false;
      const reason = ill ? `: not bounded, HF's own bf16 model is ${fx.expected.checks!.hf_bf16_mean_top5_gap!.toFixed(2)} from float64 on average over the prompt rows` : '';
      it.skipIf(ill)(`${name}: --dtype auto (${fp8 ? 'FP8 weights, bf16 rows' : 'the checkpoint\'s bf16'}) within ${AUTO_BOUND}${reason}`, () => {
        const { top, dtype } = firstTokenTop(fx, backend, 'auto');
        expect(dtype).toBe(fp8 ? 'fp8 weights, bf16 rows' : 'bf16');
        const gap = topLogprobGap(top, ref);
        console.log(`${name} ${backend} auto: top-5 logprob gap ${gap.toExponential(2)}`);
        expect(gap).toBeLessThanOrEqual(AUTO_BOUND);
      });
    }
  });
}
