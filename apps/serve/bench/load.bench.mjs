// Load run of `metrale serve`: N concurrent streaming clients for D seconds on the embedded model
// (or --model DIR). Every client loops over a fixed set of greedy prompts whose answers were taken
// alone before the run; each streamed answer must equal its reference exactly, so a lost,
// duplicated or reordered token is an error. Prints one JSON line with throughput and latencies.
//
//   node bench/load.bench.mjs [--clients 64] [--duration 30] [--backend cpu|cuda] [--max-tokens 64]
//                             [--max-batch 64] [--model DIR] [--spec ngram] [--out FILE]
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import OpenAI from 'openai';

const { values: o } = parseArgs({
  options: {
    clients: { type: 'string', default: '64' },
    duration: { type: 'string', default: '30' },
    backend: { type: 'string', default: 'cpu' },
    'max-tokens': { type: 'string', default: '64' },
    'max-batch': { type: 'string', default: '64' },
    model: { type: 'string' },
    spec: { type: 'string' },
    out: { type: 'string' },
  },
});
const clients = Number(o.clients);
const durationMs = Number(o.duration) * 1000;
const maxTokens = Number(o['max-tokens']);
const cli = fileURLToPath(new URL('../dist/cli.js', import.meta.url));

const args = [cli, 'serve', '--port', '0', '--backend', o.backend, '--max-batch', o['max-batch'], '--max-queue', String(4 * clients),
  '--cache-dir', join(tmpdir(), 'metrale-bench-cache')];
if (o.model) args.push('--model', o.model);
if (o.spec) args.push('--spec', o.spec);
const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
const url = await new Promise((resolve, reject) => {
  let buf = '';
  child.stdout.on('data', (c) => {
    buf += c;
    for (const line of buf.split('\n').slice(0, -1)) {
      try {
        const e = JSON.parse(line);
        if (e.msg === 'listening') resolve(e.url);
      } catch { /* not a log line */ }
    }
    buf = buf.slice(buf.lastIndexOf('\n') + 1);
  });
  child.stdout.resume();
  child.once('exit', (code) => reject(new Error(`server exited ${code}`)));
});
for (;;) {
  const r = await fetch(`${url}/health`).catch(() => undefined);
  if (r?.status === 200) break;
  await new Promise((r) => setTimeout(r, 100));
}
const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 600_000 });
const model = (await client.models.list()).data[0].id;
const topics = ['the sea', 'a city at night', 'bread', 'mountains', 'a library', 'rain', 'the moon', 'trains'];
const prompts = topics.map((t, i) => `Write ${i + 2} sentences about ${t}.`);

async function stream(prompt) {
  const t0 = performance.now();
  let first;
  let last = t0;
  const gaps = [];
  let text = '';
  let usage;
  const s = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: prompt }], max_tokens: maxTokens, temperature: 0, ignore_eos: true, stream: true, stream_options: { include_usage: true },
  });
  for await (const chunk of s) {
    const now = performance.now();
    if (chunk.usage) usage = chunk.usage;
    const delta = chunk.choices[0]?.delta?.content;
    if (delta) {
      if (first === undefined) first = now - t0;
      else gaps.push(now - last);
      last = now;
      text += delta;
    }
  }
  return { text, ttft: first ?? NaN, gaps, tokens: usage?.completion_tokens ?? 0, ms: performance.now() - t0 };
}

// References, one request at a time.
const reference = new Map();
for (const p of prompts) reference.set(p, (await stream(p)).text);

const ttfts = [];
const itls = [];
let tokens = 0;
let done = 0;
let errors = 0;
let mismatches = 0;
const t0 = performance.now();
await Promise.all(Array.from({ length: clients }, async (_, c) => {
  for (let i = c; performance.now() - t0 < durationMs; i += clients) {
    const p = prompts[i % prompts.length];
    try {
      const r = await stream(p);
      if (performance.now() - t0 > durationMs + 120_000) break;
      ttfts.push(r.ttft);
      itls.push(...r.gaps);
      tokens += r.tokens;
      done++;
      if (r.text !== reference.get(p) || r.tokens !== maxTokens) mismatches++;
    } catch (error) {
      errors++;
      console.error(`client ${c}: ${error.message}`);
    }
  }
}));
const wall = (performance.now() - t0) / 1000;
const q = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? Number(s[Math.min(s.length - 1, Math.floor(p * s.length))].toFixed(1)) : null;
};
const metrics = await (await fetch(`${url}/metrics`)).text();
const backend = o.backend;
child.kill('SIGTERM');
const exit = await new Promise((r) => child.once('exit', r));
const result = {
  bench: 'serve-load', backend, model, clients, duration_s: Number(o.duration), max_tokens: maxTokens, spec: o.spec ?? null,
  requests: done, errors, mismatches, generated_tokens: tokens, wall_s: Number(wall.toFixed(1)),
  tokens_per_s: Number((tokens / wall).toFixed(1)), requests_per_s: Number((done / wall).toFixed(2)),
  ttft_ms: { p50: q(ttfts, 0.5), p99: q(ttfts, 0.99) }, itl_ms: { p50: q(itls, 0.5), p99: q(itls, 0.99) },
  server_generation_tokens: Number(/^vllm:generation_tokens_total\{[^}]*\} (\d+)/m.exec(metrics)?.[1] ?? -1),
  server_exit: exit,
};
console.log(JSON.stringify(result));
if (o.out) writeFileSync(o.out, `${JSON.stringify(result, null, 2)}\n`);
process.exitCode = errors === 0 && mismatches === 0 && exit === 0 ? 0 : 1;
