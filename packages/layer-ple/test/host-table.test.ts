// The table read from a safetensors file on disk: core's SafetensorsFile reads the header at open
// and rows on demand, so the layer never reads embed_tokens_per_layer whole; each miss reads one
// row (L·P values) straight into pinned staging. Checked against the float64 reference, with the
// checkpoint's `model.language_model.` prefix removed by rangedPrefix (which keeps ranged reads).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SafetensorsFile, prefixedWeights } from '@metrale/core';
import { isRanged, rangedPrefix, type RangedWeightSource } from '@metrale/layer-ple';
import { afterAll, describe, expect, it } from 'vitest';
import { runAgainstReference, SCENARIO } from './run-steps.js';
import { pleSetup, setupBytes } from './ple-setup.js';

const dir = mkdtempSync(join(tmpdir(), 'metrale-ple-table-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const PREFIX = 'model.language_model.';

/** A ranged source that records every read. */
function recording(source: RangedWeightSource) {
  const whole: string[] = [];
  const ranges: [string, number, number][] = [];
  const wrapped: RangedWeightSource = {
    origin: source.origin,
    names: () => source.names(),
    has: (n) => source.has(n),
    info: (n) => source.info(n),
    get: (n) => {
      whole.push(n);
      return source.get(n);
    },
    readRange: (n, o, l, into) => {
      ranges.push([n, o, l]);
      return source.readRange(n, o, l, into);
    },
  };
  return { wrapped, whole, ranges };
}

describe('the per-layer table from a safetensors file', () => {
  const setup = pleSetup(41, undefined, { table: 'bf16', embed: 'bf16', prefix: PREFIX });
  const path = join(dir, 'model.safetensors');
  writeFileSync(path, setupBytes(setup));
  const plain = pleSetup(41, undefined, { table: 'bf16', embed: 'bf16' }); // the same values, unprefixed, for the reference

  it('reads rows on demand, never the table whole, and matches the reference', () => {
    const file = SafetensorsFile.open(path);
    expect(isRanged(file)).toBe(true);
    const { wrapped, whole, ranges } = recording(rangedPrefix(file, PREFIX));
    let misses = 0;
    const steps = runAgainstReference(plain, 3, SCENARIO, { layerWeights: wrapped, after: (l) => (misses = l.stats().misses) });
    for (const s of steps) expect(s.rel).toBeLessThan(1e-5);
    expect(whole).not.toContain('embed_tokens_per_layer.weight');
    const rowBytes = plain.dims.layers * plain.dims.perLayer * 2;
    const tableReads = ranges.filter(([n]) => n === 'embed_tokens_per_layer.weight');
    expect(tableReads.length).toBe(misses);
    expect(tableReads.every(([, offset, length]) => length === rowBytes && offset % rowBytes === 0)).toBe(true);
    // The layer's own slice of per_layer_model_projection is read as P rows, not the whole [L·P, D].
    expect(whole).not.toContain('per_layer_model_projection.weight');
    file.close();
  });

  it('also works from a source without ranged reads (core prefixedWeights), reading the table whole', () => {
    const file = SafetensorsFile.open(path);
    const view = prefixedWeights(file, PREFIX);
    expect(isRanged(view)).toBe(false);
    const steps = runAgainstReference(plain, 3, SCENARIO.slice(0, 5), { layerWeights: view });
    for (const s of steps) expect(s.rel).toBeLessThan(1e-5);
    file.close();
  });
});
