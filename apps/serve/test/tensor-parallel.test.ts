import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { metrale } from './support/run-cli.js';
import { readModelFixture, readPromptLogits, worstRowRel } from './support/model-fixtures.js';
import { writeTinyQwen3Next } from './support/tiny-qwen3-next.js';

// Tensor parallelism on the CPU backend: n ranks, each a CPU backend on its own thread with its
// shard of the model, meeting in all-reduces and the lm head's all-gather. In f32 a rank's partial
// sums add up in another order than one device's GEMM, so logits agree to rounding and the greedy
// tokens are the same.
const tmp = mkdtempSync(join(tmpdir(), 'metrale-tp-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const LOGITS_REL = 1e-4;

interface Run {
  readonly tokens: number[];
  readonly logits: Float32Array;
  readonly stats: { tensor_parallel_size: number; speculative: { drafted: number; accepted: number } | null; steps: { decode: number; verify: number } };
}

function generate(model: string, prompt: readonly number[], maxTokens: number, tp: number, extra: string[] = []): Run {
  const file = join(tmp, `logits-${tp}-${Math.random().toString(36).slice(2)}.safetensors`);
  const r = metrale([
    'generate', '--model', model, '--prompt-ids', prompt.join(','), '--max-tokens', String(maxTokens), '--greedy', '--ignore-eos',
    '--backend', 'cpu', '--dtype', 'f32', '--json', '--tensor-parallel-size', String(tp), '--prompt-logits', file, ...extra,
  ]);
  expect(r.stderr).toBe('');
  expect(r.code).toBe(0);
  const line = JSON.parse(r.lines.at(-1)!) as Omit<Run, 'logits'>;
  return { ...line, logits: readPromptLogits(file) };
}

describe('metrale generate --tensor-parallel-size on the CPU backend', () => {
  const fx = readModelFixture('qwen3-next-tiny');
  const prompt = fx.expected.prompt_ids;

  it("qwen3-next-tiny fixture: TP = 2 gives HF's greedy tokens, and prompt logits within 1e-4 of TP = 1", () => {
    const one = generate(fx.dir, prompt, fx.expected.max_new_tokens, 1);
    const two = generate(fx.dir, prompt, fx.expected.max_new_tokens, 2);
    expect(two.stats.tensor_parallel_size).toBe(2);
    expect(one.tokens).toEqual(fx.expected.greedy_tokens);
    expect(two.tokens).toEqual(one.tokens);
    const rel = worstRowRel(two.logits, one.logits, fx.vocab);
    console.log(`qwen3-next-tiny TP=2 vs TP=1: prompt logits worst row rel ${rel.toExponential(2)}`);
    expect(rel).toBeLessThanOrEqual(LOGITS_REL);
    expect(worstRowRel(two.logits, fx.promptLogits, fx.vocab)).toBeLessThanOrEqual(fx.expected.tolerance.logits_rel);
  });

  // The tiny test model with head counts that divide by 4 (the shipped fixtures have 2 KV heads and 2 GDN key heads).
  const divisible = { num_attention_heads: 8, num_key_value_heads: 4, linear_num_key_heads: 4, linear_num_value_heads: 8 };
  const ids = [5, 17, 9, 3, 5, 17, 9, 3, 42, 7, 5, 17];

  it('a model whose heads divide by 4: TP = 2 and TP = 4 equal TP = 1', () => {
    const dir = join(tmp, 'tp4');
    writeTinyQwen3Next(dir, { dtype: 'f32', config: divisible });
    const one = generate(dir, ids, 16, 1);
    for (const tp of [2, 4]) {
      const run = generate(dir, ids, 16, tp);
      expect(run.tokens, `TP=${tp}`).toEqual(one.tokens);
      const rel = worstRowRel(run.logits, one.logits, 64);
      console.log(`TP=${tp} vs TP=1: prompt logits worst row rel ${rel.toExponential(2)}`);
      expect(rel).toBeLessThanOrEqual(LOGITS_REL);
    }
  });

  it('TP = 4 with n-gram speculation: verified and accepted drafts give the tokens of TP = 1', () => {
    const dir = join(tmp, 'tp4-bigram');
    writeTinyQwen3Next(dir, { dtype: 'f32', config: divisible, bigram: true });
    const one = generate(dir, ids, 16, 1);
    const spec = generate(dir, ids, 16, 4, ['--spec', 'ngram:k=3,adaptive=0']);
    expect(spec.tokens).toEqual(one.tokens);
    expect(spec.stats.steps.verify).toBeGreaterThan(0);
    expect(spec.stats.speculative!.drafted).toBeGreaterThan(0);
    expect(spec.stats.speculative!.accepted).toBeGreaterThan(0);
  });

  it('glm-moe-dsa-real fixture (MLA heads split, the indexer whole on every rank): TP = 2 and 4 give HF\'s greedy tokens and TP = 1\'s logits', () => {
    const glm = readModelFixture('glm-moe-dsa-real');
    const one = generate(glm.dir, glm.expected.prompt_ids, glm.expected.max_new_tokens, 1);
    expect(one.tokens).toEqual(glm.expected.greedy_tokens);
    for (const tp of [2, 4]) {
      const run = generate(glm.dir, glm.expected.prompt_ids, glm.expected.max_new_tokens, tp);
      expect(run.tokens, `TP=${tp}`).toEqual(one.tokens);
      const rel = worstRowRel(run.logits, one.logits, glm.vocab);
      console.log(`glm-moe-dsa-real TP=${tp} vs TP=1: prompt logits worst row rel ${rel.toExponential(2)}`);
      expect(rel).toBeLessThanOrEqual(LOGITS_REL);
    }
  });

  it('--enable-expert-parallel: whole experts per rank (qwen3-next-tiny over 2, glm-moe-dsa-real over 4) give TP = 1\'s tokens and logits', () => {
    for (const [name, tp] of [['qwen3-next-tiny', 2], ['glm-moe-dsa-real', 4]] as const) {
      const f = readModelFixture(name);
      const one = generate(f.dir, f.expected.prompt_ids, f.expected.max_new_tokens, 1);
      const ep = generate(f.dir, f.expected.prompt_ids, f.expected.max_new_tokens, tp, ['--enable-expert-parallel']);
      expect(ep.tokens, name).toEqual(one.tokens);
      const rel = worstRowRel(ep.logits, one.logits, f.vocab);
      console.log(`${name} EP over ${tp} vs TP=1: prompt logits worst row rel ${rel.toExponential(2)}`);
      expect(rel).toBeLessThanOrEqual(LOGITS_REL);
    }
  });

  it('refuses a size that does not divide the heads, naming the field, its value and the sizes that would', () => {
    // 4 ranks over 2 KV heads is allowed (each KV head on two ranks); the fixture's 2 GDN key heads are not.
    const r = metrale(['generate', '--model', fx.dir, '--prompt-ids', '1,2,3', '--max-tokens', '2', '--backend', 'cpu', '--tensor-parallel-size', '4']);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/--tensor-parallel-size 4 does not divide config\.linear_num_key_heads \(2\).*\(1, 2\)/);
    const dir = join(tmp, 'kv3');
    writeTinyQwen3Next(dir, { dtype: 'f32', config: { num_attention_heads: 6, num_key_value_heads: 2, linear_num_key_heads: 3, linear_num_value_heads: 6 } });
    const three = metrale(['generate', '--model', dir, '--prompt-ids', '1,2,3', '--max-tokens', '2', '--backend', 'cpu', '--tensor-parallel-size', '3']);
    expect(three.code).not.toBe(0);
    expect(three.stderr).toMatch(/--tensor-parallel-size 3 is more than config\.num_key_value_heads \(2\) but not a multiple of it/);
  });

  it('more ranks than KV heads: each KV head is kept by several ranks (2 KV heads over 4 ranks, 1 over 2 and 4), and the tokens and logits are TP = 1\'s', () => {
    for (const [name, kv, sizes] of [['kv2', 2, [2, 4]], ['kv1', 1, [2, 4]]] as const) {
      const dir = join(tmp, name);
      writeTinyQwen3Next(dir, { dtype: 'f32', config: { ...divisible, num_key_value_heads: kv } });
      const one = generate(dir, ids, 16, 1);
      for (const tp of sizes) {
        const run = generate(dir, ids, 16, tp);
        expect(run.tokens, `${name} TP=${tp}`).toEqual(one.tokens);
        const rel = worstRowRel(run.logits, one.logits, 64);
        console.log(`${name} TP=${tp} vs TP=1: prompt logits worst row rel ${rel.toExponential(2)}`);
        expect(rel).toBeLessThanOrEqual(LOGITS_REL);
      }
    }
  });

  it('--enable-expert-parallel needs a tensor-parallel size above 1', () => {
    const r = metrale(['generate', '--model', fx.dir, '--prompt-ids', '1,2,3', '--max-tokens', '2', '--backend', 'cpu', '--enable-expert-parallel']);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/--enable-expert-parallel needs --tensor-parallel-size > 1/);
  });
});
