import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TokenConstraint } from '@metrale/core';
import { embeddedTokenizerFiles, EMBEDDED_CONFIG } from '../../src/embedded/embedded-model.js';
import { GrammarEngine, GrammarEngineError } from '../../src/structured/grammar-engine.js';
import { GrammarPool } from '../../src/structured/grammar-pool.js';
import type { GrammarSpec } from '../../src/structured/grammar-spec.js';
import { readTokenizerVocabulary } from '../../src/structured/tokenizer-vocabulary.js';

// The grammar pool over the embedded model's vocabulary (Qwen3's tokenizer), its host threads
// started from the built bundle (the tests' global setup builds dist).
const V = EMBEDDED_CONFIG.vocab_size;
const EOS = [...EMBEDDED_CONFIG.eos_token_id];
const tokenizerPath = embeddedTokenizerFiles().tokenizer;
const workerUrl = new URL('../../dist/grammar-host-worker.js', import.meta.url);
const options = { tokenizerPath, vocabSize: V, stopTokenIds: EOS, workerUrl };
let texts: string[];
const pools: GrammarPool[] = [];
const newPool = (maxHosts?: number) => {
  const pool = new GrammarPool({ ...options, ...(maxHosts !== undefined ? { maxHosts } : {}) });
  pools.push(pool);
  return pool;
};

beforeAll(() => {
  texts = readTokenizerVocabulary(tokenizerPath, V).encoded.map((s) => s.replace(/Ġ/g, ' ').replace(/Ċ/g, '\n'));
});

afterAll(async () => {
  await Promise.all(pools.map((p) => p.close()));
});

const allowed = (mask: Int32Array, t: number) => ((mask[t >> 5]! >>> (t & 31)) & 1) === 1;

/** A schema of `n` properties, each a small object of its own: distinct text, a compile of a second or two. */
function wideSchema(n: number, tag: string): GrammarSpec {
  const properties: Record<string, unknown> = {};
  for (let i = 0; i < n; i++) {
    properties[`${tag}_${i}`] = {
      type: 'object',
      properties: { name: { type: 'string', maxLength: 24 }, size: { type: 'integer', minimum: 0, maximum: 999 }, kind: { enum: [`a${i}`, `b${i}`, `c${i}`] } },
      required: ['name', 'size', 'kind'], additionalProperties: false,
    };
  }
  return { kind: 'json_schema', schema: JSON.stringify({ type: 'object', properties, required: Object.keys(properties), additionalProperties: false }) };
}

const SPEC: GrammarSpec = {
  kind: 'json_schema',
  schema: JSON.stringify({
    type: 'object',
    properties: { color: { enum: ['red', 'green', 'blue'] }, count: { type: 'integer', minimum: 1, maximum: 12 } },
    required: ['color', 'count'], additionalProperties: false,
  }),
};

/** The longest token the mask allows that continues `text` at `at`. */
function nextToken(mask: Int32Array, text: string, at: number): number {
  let best = -1;
  for (let t = 0; t < V; t++) if (allowed(mask, t) && texts[t]!.length > (best < 0 ? 0 : texts[best]!.length) && text.startsWith(texts[t]!, at)) best = t;
  if (best < 0) throw new Error(`no token continues ${JSON.stringify(text.slice(at))}`);
  return best;
}

describe('grammar pool', () => {
  it('a host\'s masks are the local engine\'s, through accepts, draft walks, rollbacks and the end', async () => {
    const pool = newPool();
    const local = new GrammarEngine(options);
    const [remote, mine] = await Promise.all([pool.constraint(SPEC), local.constraint(SPEC)]) as [TokenConstraint, TokenConstraint];
    const text = '{"color": "green", "count": 7}';
    let at = 0;
    let steps = 0;
    while (at < text.length) {
      const mask = remote.allowedTokens();
      expect(mask).toEqual(mine.allowedTokens());
      const t = nextToken(mask, text, at);
      // A verify's walk: two tokens ahead (when the text has them), masks compared, then taken back.
      const ahead = [t];
      if (at + texts[t]!.length < text.length) {
        expect(mine.accept(t)).toBe(true);
        ahead.push(nextToken(mine.allowedTokens(), text, at + texts[t]!.length));
        mine.rollback(1);
      }
      for (const d of ahead) {
        expect(remote.accept(d)).toBe(true);
        expect(mine.accept(d)).toBe(true);
        expect(remote.allowedTokens()).toEqual(mine.allowedTokens());
      }
      remote.rollback(ahead.length);
      mine.rollback(ahead.length);
      expect(remote.allowedTokens()).toEqual(mine.allowedTokens());
      // A token the grammar forbids is refused by both, moving neither.
      const forbidden = texts.findIndex((s, id) => s === 'zebra' && !allowed(mask, id));
      if (forbidden >= 0) expect([remote.accept(forbidden), mine.accept(forbidden)]).toEqual([false, false]);
      expect(remote.accept(t)).toBe(true);
      expect(mine.accept(t)).toBe(true);
      at += texts[t]!.length;
      steps++;
    }
    expect(steps).toBeGreaterThan(5);
    expect(remote.isComplete()).toBe(false);
    expect(allowed(remote.allowedTokens(), EOS[0]!)).toBe(true);
    expect(remote.accept(EOS[0]!)).toBe(true);
    expect(mine.accept(EOS[0]!)).toBe(true);
    expect([remote.isComplete(), mine.isComplete()]).toEqual([true, true]);
    remote.release();
    mine.release();
  }, 60_000);

  it('a compile runs on a host of its own: an open constraint\'s masks answer in well under a millisecond throughout', async () => {
    const pool = newPool();
    const c = await pool.constraint(SPEC);
    expect(pool.hosts).toBe(1);
    // Two tokens the grammar allows first; taking one then the other makes every mask a new position.
    const first = c.allowedTokens();
    const [a, b] = ['{"', '{'].map((s) => texts.findIndex((x, id) => x === s && allowed(first, id)));
    expect(a! >= 0 && b! >= 0).toBe(true);
    const t0 = performance.now();
    let compileMs = 0;
    const compiling = pool.prepare(wideSchema(24, 'slow')).then(() => (compileMs = performance.now() - t0));
    const roundTrips: number[] = [];
    while (compileMs === 0) {
      const s = performance.now();
      expect(c.accept(roundTrips.length % 2 === 0 ? a! : b!)).toBe(true);
      c.allowedTokens();
      roundTrips.push(performance.now() - s);
      c.rollback(1);
      // Let the pool hear from its hosts, as the engine loop does between steps.
      await new Promise((resolve) => setImmediate(resolve));
    }
    await compiling;
    expect(pool.hosts).toBe(2);
    roundTrips.sort((x, y) => x - y);
    const median = roundTrips[roundTrips.length >> 1]!;
    const worst = roundTrips[roundTrips.length - 1]!;
    console.log(`compile ${compileMs.toFixed(0)} ms; ${roundTrips.length} mask round trips during it: median ${(median * 1000).toFixed(0)} µs, worst ${worst.toFixed(2)} ms`);
    expect(compileMs).toBeGreaterThan(200);
    expect(roundTrips.length).toBeGreaterThan(100);
    expect(median).toBeLessThan(1);
    expect(worst).toBeLessThan(compileMs / 10);
    c.release();
  }, 60_000);

  it('prefetched masks are ready when asked: a step of 8 constrained rows costs one message per host', async () => {
    const pool = newPool();
    const rows = await Promise.all(Array.from({ length: 8 }, () => pool.constraint(SPEC)));
    const first = rows[0]!.allowedTokens();
    const [a, b] = ['{"', '{'].map((s) => texts.findIndex((x, id) => x === s && allowed(first, id)));
    const fetched: number[] = [];
    const prefetched: number[] = [];
    for (let step = 0; step < 40; step++) {
      // Each row takes another first token than at its last step: every mask is of a new position.
      for (const r of rows) {
        if (step > 0) r.rollback(1);
        expect(r.accept(step % 2 === 0 ? a! : b!)).toBe(true);
      }
      if (step % 4 < 2) {
        const s = performance.now();
        for (const r of rows) r.allowedTokens();
        fetched.push(performance.now() - s);
      } else {
        pool.prefetch();
        // What a step's forward would take, meanwhile.
        const until = performance.now() + 2;
        while (performance.now() < until);
        const s = performance.now();
        for (const r of rows) r.allowedTokens();
        prefetched.push(performance.now() - s);
      }
    }
    const median = (xs: number[]) => xs.sort((x, y) => x - y)[xs.length >> 1]!;
    console.log(`8 constrained rows per step: masks asked one by one ${median(fetched).toFixed(3)} ms, prefetched during a 2 ms forward ${median(prefetched).toFixed(3)} ms`);
    expect(median(prefetched)).toBeLessThan(median(fetched));
    for (const r of rows) r.release();
  }, 60_000);

  it('a refused schema rejects with xgrammar\'s reason, and the pool goes on', async () => {
    const pool = newPool();
    await expect(pool.prepare({ kind: 'json_schema', schema: '{"type": "integer", "minimum": 5, "maximum": 1}' })).rejects.toThrow(GrammarEngineError);
    await expect(pool.prepare({ kind: 'json_schema', schema: '{"type": "integer", "minimum": 5, "maximum": 1}' })).rejects.toThrow(/minimum greater than maximum/);
    const c = await pool.constraint(SPEC);
    expect(c.allowedTokens().some((w) => w !== 0)).toBe(true);
    c.release();
  }, 60_000);

  it('with every host serving requests, a new grammar waits for one to become free instead of compiling beside them', async () => {
    const pool = newPool(1);
    const c = await pool.constraint(SPEC);
    let done = false;
    const compiling = pool.prepare(wideSchema(4, 'queued')).then(() => (done = true));
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(done).toBe(false);
    expect(pool.hosts).toBe(1);
    c.release();
    await compiling;
    expect(done).toBe(true);
  }, 60_000);
});
