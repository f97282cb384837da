import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeTinyCheckpoint } from '@metrale/layer-example';
import { afterAll, describe, expect, it } from 'vitest';
import { BROKEN_PLUGINS, LAYER_EXAMPLE_DIR, writePluginProject } from './support/plugin-projects.js';
import { metrale } from './support/run-cli.js';
import { writeTinyQwen3Next } from './support/tiny-qwen3-next.js';

interface GenerateLine {
  tokens: number[];
  text: string | null;
  stats: {
    backend: string; prompt_tokens: number; generated_tokens: number; finish_reason: string; tokens_per_s: number;
    prefill_ms: number; decode_ms: number; steps: { prefill: number; decode: number; verify: number };
    speculative: { k: number; verify_steps: number; drafted: number; accepted: number; acceptance_rate: number } | null;
  };
}

const root = mkdtempSync(join(tmpdir(), 'metrale-generate-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

function checkpoint(name: string, options: Parameters<typeof writeTinyQwen3Next>[1] = {}): string {
  const dir = join(root, name);
  writeTinyQwen3Next(dir, options);
  return dir;
}

function generate(args: string[], options: { cwd?: string } = {}): GenerateLine {
  const r = metrale(['generate', '--backend', 'cpu', '--json', ...args], options);
  expect(r.stderr).toBe('');
  expect(r.code).toBe(0);
  return JSON.parse(r.lines.at(-1)!) as GenerateLine;
}

// A prompt that repeats, so the n-gram proposer has something to look up.
const REPEAT = '4,5,6,7,4,5,6,7,4,5,6';

describe('metrale generate on a tiny random qwen3_next checkpoint (CPU)', () => {
  const bigram = checkpoint('bigram', { bigram: true, tokenizer: true });
  const plain = checkpoint('plain', { tokenizer: true });

  it('greedy with --spec ngram gives the same tokens as without, with drafts accepted', () => {
    const base = generate(['--model', bigram, '--prompt-ids', REPEAT, '--max-tokens', '40', '--greedy', '--ignore-eos']);
    for (const spec of ['ngram', 'ngram:k=2,adaptive=0', 'ngram:k=5,min=1,max=4,adaptive=0']) {
      const sped = generate(['--model', bigram, '--prompt-ids', REPEAT, '--max-tokens', '40', '--greedy', '--ignore-eos', '--spec', spec]);
      expect(sped.tokens, spec).toEqual(base.tokens);
      const s = sped.stats.speculative!;
      console.log(`${spec}: acceptance rate ${(100 * s.acceptance_rate).toFixed(1)}% (${s.accepted}/${s.drafted} drafts, ${s.verify_steps} verify steps)`);
      expect(s.accepted).toBeGreaterThan(0);
      expect(s.acceptance_rate).toBeGreaterThan(0.2);
      expect(sped.stats.steps.verify).toBe(s.verify_steps);
      // Accepted drafts mean fewer steps than tokens.
      expect(sped.stats.steps.decode + sped.stats.steps.verify).toBeLessThan(39);
    }
    expect(base.stats.speculative).toBeNull();
    expect(base.tokens).toHaveLength(40);
  });

  it('the same on a model whose text does not repeat (drafts mostly rejected)', () => {
    const base = generate(['--model', plain, '--prompt-ids', REPEAT, '--max-tokens', '24', '--ignore-eos']);
    const sped = generate(['--model', plain, '--prompt-ids', REPEAT, '--max-tokens', '24', '--ignore-eos', '--spec', 'ngram:k=3']);
    expect(sped.tokens).toEqual(base.tokens);
  });

  it('prints the JSON line with tokens, text and stats', () => {
    const line = generate(['--model', bigram, '--prompt-ids', REPEAT, '--max-tokens', '12', '--ignore-eos', '--spec', 'ngram']);
    expect(Object.keys(line)).toEqual(['tokens', 'text', 'stats']);
    expect(line.tokens).toHaveLength(12);
    expect(line.text).toBe(line.tokens.map((t) => `w${t}`).join(' '));
    expect(line.stats).toMatchObject({ backend: 'cpu', prompt_tokens: 11, generated_tokens: 12, finish_reason: 'length' });
    expect(line.stats.tokens_per_s).toBeGreaterThan(0);
    expect(line.stats.steps.prefill).toBe(1);
    expect(line.stats.speculative).toMatchObject({ k: 4 });
  });

  it('sharded and single-file checkpoints, graphs on and off, give the same tokens', () => {
    const sharded = checkpoint('sharded', { sharded: true });
    const a = generate(['--model', plain, '--prompt-ids', '9,10,11', '--max-tokens', '10', '--ignore-eos']);
    const b = generate(['--model', sharded, '--prompt-ids', '9,10,11', '--max-tokens', '10', '--ignore-eos']);
    const c = generate(['--model', plain, '--prompt-ids', '9,10,11', '--max-tokens', '10', '--ignore-eos', '--no-graphs']);
    expect(b.tokens).toEqual(a.tokens);
    expect(c.tokens).toEqual(a.tokens);
  });

  it('encodes --prompt with tokenizer.json and applies the chat template with --chat', () => {
    const text = generate(['--model', bigram, '--prompt', 'w4 w5 w6 w7 w4 w5 w6', '--max-tokens', '6', '--ignore-eos']);
    const ids = generate(['--model', bigram, '--prompt-ids', '4,5,6,7,4,5,6', '--max-tokens', '6', '--ignore-eos']);
    expect(text.tokens).toEqual(ids.tokens);
    const chat = generate(['--model', bigram, '--prompt', 'w9 w10', '--chat', '--max-tokens', '4', '--ignore-eos']);
    // The template wraps the message: w2 w9 w10 w3 w4.
    expect(chat.stats.prompt_tokens).toBe(5);
  });

  it('sampling with a seed is reproducible, with and without speculation', () => {
    const args = ['--model', plain, '--prompt-ids', REPEAT, '--max-tokens', '16', '--ignore-eos', '--temperature', '0.8', '--top-p', '0.9', '--top-k', '20', '--min-p', '0.01', '--seed', '7'];
    const a = generate(args);
    expect(generate(args).tokens).toEqual(a.tokens);
    const s = generate([...args, '--spec', 'ngram:k=3']);
    expect(generate([...args, '--spec', 'ngram:k=3']).tokens).toEqual(s.tokens);
    expect(s.tokens).toHaveLength(16);
  });

  it('stops at the end-of-sequence token unless --ignore-eos', () => {
    const full = generate(['--model', plain, '--prompt-ids', '3', '--max-tokens', '60', '--ignore-eos']);
    const at = full.tokens.indexOf(1);
    const stopped = generate(['--model', plain, '--prompt-ids', '3', '--max-tokens', '60']);
    if (at >= 0) {
      expect(stopped.tokens).toEqual(full.tokens.slice(0, at + 1));
      expect(stopped.stats.finish_reason).toBe('stop');
    } else {
      expect(stopped.tokens).toEqual(full.tokens);
    }
  });

  it('writes the prompt logits with --prompt-logits', () => {
    const file = join(root, 'logits.safetensors');
    generate(['--model', plain, '--prompt-ids', '9,10,11', '--max-tokens', '1', '--prompt-logits', file]);
    const bytes = readFileSync(file);
    const header = JSON.parse(bytes.subarray(8, 8 + Number(bytes.readBigUInt64LE(0))).toString()) as Record<string, { shape: number[]; dtype: string }>;
    expect(header.logits).toMatchObject({ dtype: 'F32', shape: [3, 64] });
  });
});

describe("metrale generate with a plugin's architecture", () => {
  const sliding = join(root, 'qwen3-next-sliding');
  writeTinyCheckpoint(sliding);
  // A working directory with no node_modules of its own.
  const bare = mkdtempSync(join(tmpdir(), 'metrale-generate-bare-'));
  afterAll(() => rmSync(bare, { recursive: true, force: true }));

  it('runs the example\'s qwen3_next_sliding given with --plugin <dir>; greedy, the same tokens with drafts verified', () => {
    const args = ['--plugin', LAYER_EXAMPLE_DIR, '--model', sliding, '--prompt', 'the cat sat on the mat; the cat sat on the', '--max-tokens', '24', '--greedy', '--ignore-eos'];
    const base = generate(args, { cwd: bare });
    expect(base.tokens).toHaveLength(24);
    // The example's lm head speaks printable ASCII only.
    expect(base.text).toMatch(/^[\x20-\x7e]{24}$/);
    const sped = generate([...args, '--spec', 'ngram:k=3'], { cwd: bare });
    expect(sped.tokens).toEqual(base.tokens);
    expect(sped.stats.speculative!.accepted).toBeGreaterThan(0);
  });

  it('skips, with a warning each, the discovered plugins that fail, and generates', () => {
    const project = writePluginProject(mkdtempSync(join(tmpdir(), 'metrale-generate-broken-')), BROKEN_PLUGINS);
    try {
      const r = metrale(['generate', '--plugin', LAYER_EXAMPLE_DIR, '--model', sliding, '--prompt-ids', '65,66,67', '--max-tokens', '4', '--backend', 'cpu', '--json'], { cwd: project });
      expect(r.code).toBe(0);
      const warnings = r.stderr.trim().split('\n');
      expect(warnings).toHaveLength(3);
      expect(warnings).toContainEqual(expect.stringMatching(/^warning: acme-throws: skipped: plugin acme-throws: failed to import .*: acme-throws cannot start: missing ACME_LICENSE$/));
      expect(warnings).toContainEqual(expect.stringMatching(/^warning: acme-future: skipped: plugin acme-future: implements layer contract 2\.0\.0, but @metrale\/core implements 1\.0\.0/));
      expect(warnings).toContainEqual("warning: acme-twice: skipped: plugin acme-twice: registers model_type 'llama' twice; keep one adapter per model_type");
      expect((JSON.parse(r.lines.at(-1)!) as GenerateLine).tokens).toHaveLength(4);

      const named = metrale(['generate', '--plugin', 'acme-throws', '--model', sliding, '--prompt-ids', '65', '--max-tokens', '1', '--backend', 'cpu'], { cwd: project });
      expect(named.code).toBe(1);
      expect(named.stderr).toMatch(/^error: plugin acme-throws: failed to import .*: acme-throws cannot start: missing ACME_LICENSE\n$/);
    } finally {
      rmSync(project, { recursive: true, force: true });
    }
  });
});

describe('metrale generate errors', () => {
  it('an unsupported model_type names the supported ones', () => {
    const dir = checkpoint('llama');
    const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
    writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...config, model_type: 'llama' }));
    const r = metrale(['generate', '--model', dir, '--prompt-ids', '1,2', '--max-tokens', '2', '--backend', 'cpu']);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/model_type "llama" is not supported; supported: .*qwen3_next/);
  });

  it('a missing tensor names itself and the file', () => {
    const dir = checkpoint('missing', { sharded: true });
    const index = JSON.parse(readFileSync(join(dir, 'model.safetensors.index.json'), 'utf8')) as { weight_map: Record<string, string> };
    delete index.weight_map['model.layers.1.self_attn.k_norm.weight'];
    writeFileSync(join(dir, 'model.safetensors.index.json'), JSON.stringify(index));
    const r = metrale(['generate', '--model', dir, '--prompt-ids', '1,2', '--max-tokens', '2', '--backend', 'cpu']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("missing tensor 'model.layers.1.self_attn.k_norm.weight'");
    expect(r.stderr).toContain('model.safetensors.index.json');
  });

  it('a misshapen tensor names itself, its shape and its shard', () => {
    const dir = join(root, 'misshapen');
    writeTinyQwen3Next(dir, { sharded: true });
    const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
    // A config that disagrees with the tensors: the MLP is wider than what was stored.
    writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...config, intermediate_size: 50 }));
    const r = metrale(['generate', '--model', dir, '--prompt-ids', '1,2', '--max-tokens', '2', '--backend', 'cpu']);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/model-0000[12]-of-00002\.safetensors: tensor 'model\.layers\.2\.mlp\.gate_proj\.weight' has shape \[48, 32\], expected \[50, 32\]/);
  });

  it('--prompt without a tokenizer is a usage error', () => {
    const dir = checkpoint('no-tokenizer');
    const r = metrale(['generate', '--model', dir, '--prompt', 'hello', '--max-tokens', '2', '--backend', 'cpu']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('tokenizer.json');
  });

  it('a bad --spec is a usage-level error naming the option', () => {
    const dir = checkpoint('bad-spec');
    const r = metrale(['generate', '--model', dir, '--prompt-ids', '1', '--max-tokens', '2', '--backend', 'cpu', '--spec', 'medusa']);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain('--spec');
  });
});
