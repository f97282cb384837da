// Host time of the host sampler on one logit row of the Qwen3 vocabulary (151 936): the softmax at
// a temperature, then the filters (top-k, top-p, min-p), then the draw — what the engine loop spends
// a row it samples on the host (logprobs, logit adjustments, a grammar, or no device picker).
// Median of 15 rounds of 10 rows. No device ceiling applies: this is host time.
//
//   node bench/host-sampler.bench.mjs [--out FILE]
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { SeededRandom, sampleLogitsRow } from '../dist/index.js';

const { values: o } = parseArgs({ options: { out: { type: 'string' } } });
const V = 151_936;
const logits = new SeededRandom(1).normals(V, 3);
const cases = [
  { temperature: 0.7 },
  { temperature: 0.7, topK: 50 },
  { temperature: 0.7, topP: 0.9 },
  { temperature: 0.7, topP: 0.8, topK: 20 },
  { temperature: 0.7, topP: 0.95, minP: 0.05 },
];
const results = [];
for (const params of cases) {
  const rounds = [];
  for (let round = 0; round < 15; round++) {
    const t = performance.now();
    for (let i = 0; i < 10; i++) sampleLogitsRow(logits, V, 0, params, new SeededRandom(round * 10 + i));
    rounds.push((performance.now() - t) / 10);
  }
  rounds.sort((a, b) => a - b);
  const row = { params, vocab: V, median_ms_per_row: Number(rounds[7].toFixed(3)) };
  results.push(row);
  console.error(JSON.stringify(row));
}
const report = { bench: 'host sampler', node: process.version, results };
console.log(JSON.stringify(report));
if (o.out) writeFileSync(o.out, `${JSON.stringify(report, null, 2)}\n`);
