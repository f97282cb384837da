#!/usr/bin/env node
// `layer-example-checkpoint DIR [--seed N]`: writes the tiny qwen3_next_sliding checkpoint.
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { writeTinyCheckpoint } from './tiny-checkpoint.js';

const { positionals, values } = parseArgs({ allowPositionals: true, options: { seed: { type: 'string', default: '0' } } });
const seed = Number(values.seed);
if (positionals.length !== 1 || !Number.isInteger(seed)) {
  process.stderr.write('usage: layer-example-checkpoint DIR [--seed N]\n');
  process.exit(2);
}
const dir = resolve(positionals[0]!);
writeTinyCheckpoint(dir, { seed });
process.stdout.write(`${dir}\n`);
