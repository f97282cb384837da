// Bad input gets a clear error before anything changes: token ids outside the vocabulary, ids past
// the per-layer table (not an error: they read row 0, as Hugging Face maps them), tensors whose
// shape disagrees with the config, a broken config.
import { CpuBackend } from '@metrale/cpu-backend';
import { InvalidArgumentError, MemoryWeightSource, SeededRandom, StepDriver, WeightsError, tensorOf, type HostTensor, relativeL2Error } from '@metrale/core';
import { PleLayer, plePlugin, type PleState } from '@metrale/layer-ple';
import { describe, expect, it } from 'vitest';
import { referenceRows } from './ple-reference.js';
import { LIMITS, pleSetup, SMALL, type PleSetup } from './ple-setup.js';

const setup = pleSetup(31);

/** Builds a layer; its backend is disposed at once (only construction is under test). */
function create(s: PleSetup = setup, config: Record<string, unknown> = s.config, layerIndex = s.layerIndex, weights = s.weights) {
  const gpu = new CpuBackend();
  try {
    return new PleLayer({ gpu, layerType: 'ple', config, layerIndex, weights, limits: LIMITS });
  } finally {
    gpu.dispose();
  }
}

/** The setup with one tensor replaced. */
function withTensor(name: string, t: HostTensor): MemoryWeightSource {
  return new MemoryWeightSource('bad weights', setup.tensors.map((x) => (x.name === name ? { ...t, name } : x)));
}

describe('token ids', () => {
  it('refuses an id outside [0, vocab_size) in prestage, naming it, with nothing staged', () => {
    const gpu = new CpuBackend();
    const layer = new PleLayer({ gpu, layerType: 'ple', config: setup.config, layerIndex: 1, weights: setup.weights, limits: LIMITS });
    const state = layer.openState(0);
    for (const bad of [48, 1000, -1]) {
      expect(() => layer.decodePrestage(Int32Array.of(3, bad), state, gpu, gpu.defaultStream)).toThrow(InvalidArgumentError);
      expect(() => layer.decodePrestage(Int32Array.of(3, bad), state, gpu, gpu.defaultStream)).toThrow(
        new RegExp(`decodePrestage: token id ${bad} at row 1 is outside the vocabulary \\[0, 48\\) \\(config vocab_size\\)`),
      );
    }
    expect(state.armed).toBe(false);
    expect(layer.stats()).toMatchObject({ hits: 0, misses: 0, prestageCalls: 0, uploadedRowBytes: 0 });
    expect(() => layer.decodePrestage(new Int32Array(4), state, gpu, gpu.defaultStream)).toThrow(/got 4 tokens; a step has 1 to maxK \(3\)/);
    layer.dispose();
    gpu.dispose();
  });

  it('refuses an id outside the vocabulary in a prefill and in a decode through the driver', () => {
    const gpu = new CpuBackend();
    const layer = new PleLayer({ gpu, layerType: 'ple', config: setup.config, layerIndex: 1, weights: setup.weights, limits: LIMITS });
    const driver = new StepDriver({ gpu, layers: [layer], limits: LIMITS });
    const [a] = [driver.open()];
    const D = SMALL.hidden;
    expect(() => driver.prefill({ seqs: [a], lengths: [2], tokens: Int32Array.of(1, 99), input: new Float32Array(2 * D) })).toThrow(/prefill: token id 99 at row 1/);
    expect(layer.stats().prefillRows).toBe(0);
    expect(() => driver.decode({ seqs: [a], tokens: Int32Array.of(48), input: new Float32Array(D) })).toThrow(/token id 48 at row 0 is outside the vocabulary/);
    driver.dispose();
    layer.dispose();
    gpu.dispose();
  });

  it('maps ids at or past vocab_size_per_layer_input to table row 0 (embedding still of the id itself)', () => {
    const gpu = new CpuBackend();
    const layer = new PleLayer({ gpu, layerType: 'ple', config: setup.config, layerIndex: 1, weights: setup.weights, limits: LIMITS });
    const driver = new StepDriver({ gpu, layers: [layer], limits: LIMITS });
    const seqs = [driver.open(), driver.open(), driver.open()];
    const D = SMALL.hidden;
    const input = new SeededRandom(4).normals(3 * D);
    const tokens = Int32Array.of(40, 47, 0); // 40 and 47 are past the 40-row table
    const r = driver.decode({ seqs, tokens, input });
    const out = driver.readOutputF32(r);
    expect(relativeL2Error(out, referenceRows(setup.weights, SMALL, input, tokens))).toBeLessThan(1e-5);
    // One table row (row 0) serves all three: one miss, two hits.
    expect(layer.stats()).toMatchObject({ misses: 1, hits: 2 });
    expect(layer.cache.slotOf(0)).toBeGreaterThanOrEqual(0);
    // Same input rows, row-0 table part: rows differ only through embed_tokens(id).
    const row = (i: number) => out.subarray(i * D, (i + 1) * D);
    expect(relativeL2Error(row(0), row(1))).toBeGreaterThan(1e-3);
    driver.dispose();
    layer.dispose();
    gpu.dispose();
  });
});

describe('weights that disagree with the config', () => {
  const P = SMALL.perLayer;
  const cases: [string, MemoryWeightSource, RegExp][] = [
    ['a table with a row too many', withTensor('embed_tokens_per_layer.weight', tensorOf('', new Float32Array(41 * 24), [41, 24])),
      /tensor 'embed_tokens_per_layer\.weight' has shape \[41, 24\], but the config needs \[40, 24\] \(\[vocab_size_per_layer_input 40, num_hidden_layers 3 × hidden_size_per_layer_input 8\]\)/],
    ['a table of another layer count', withTensor('embed_tokens_per_layer.weight', tensorOf('', new Float32Array(40 * 32), [40, 32])),
      /has shape \[40, 32\], but the config needs \[40, 24\]/],
    ['a flat table', withTensor('embed_tokens_per_layer.weight', tensorOf('', new Float32Array(40 * 24), [960])), /has shape \[960\]/],
    ['an f64 table', withTensor('embed_tokens_per_layer.weight', tensorOf('', new Float64Array(40 * 24), [40, 24])), /is f64; the layer reads it in place as bf16, f16 or f32/],
    ['an i32 table', withTensor('embed_tokens_per_layer.weight', tensorOf('', new Int32Array(40 * 24), [40, 24])), /is i32/],
    ['an embedding of another width', withTensor('embed_tokens.weight', tensorOf('', new Float32Array(48 * 16), [48, 16])), /tensor 'embed_tokens\.weight' has shape \[48, 16\], but the config needs \[48, 32\] \(\[vocab_size 48, hidden_size 32\]\)/],
    ['a model projection of another shape', withTensor('per_layer_model_projection.weight', tensorOf('', new Float32Array(24 * 16), [24, 16])), /per_layer_model_projection\.weight' has shape \[24, 16\]/],
    ['a projection norm of another width', withTensor('per_layer_projection_norm.weight', tensorOf('', new Float32Array(P + 1), [P + 1])), /per_layer_projection_norm\.weight' has shape \[9\]/],
    ['a transposed gate', withTensor('layers.1.per_layer_input_gate.weight', tensorOf('', new Float32Array(P * 32), [32, P])), /layers\.1\.per_layer_input_gate\.weight' has shape \[32, 8\], but the config needs \[8, 32\]/],
    ['a non-finite gate', withTensor('layers.1.per_layer_input_gate.weight', tensorOf('', new Float32Array(P * 32).fill(Number.NaN), [P, 32])), /layers\.1\.per_layer_input_gate\.weight' holds NaN/],
    ['a missing post norm', new MemoryWeightSource('bad weights', setup.tensors.filter((t) => !t.name.startsWith('layers.1.post'))), /bad weights: missing tensor 'layers\.1\.post_per_layer_input_norm\.weight'/],
  ];
  it.each(cases)('names the tensor and the config fields for %s', (_what, weights, pattern) => {
    expect(() => create(setup, setup.config, 1, weights)).toThrow(WeightsError);
    expect(() => create(setup, setup.config, 1, weights)).toThrow(pattern);
  });

  it('reads the text_config of a whole gemma3n config, and names bad fields', () => {
    const layer = create(setup, { model_type: 'gemma3n', text_config: setup.config });
    expect(layer.config.modelType).toBe('gemma3n_text');
    expect(() => create(setup, { ...setup.config, hidden_size_per_layer_input: 0 })).toThrow(/config\.hidden_size_per_layer_input must be a positive integer, got 0/);
    expect(() => create(setup, { ...setup.config, vocab_size_per_layer_input: undefined })).toThrow(/config\.vocab_size_per_layer_input must be a positive integer/);
    expect(() => create(setup, { ...setup.config, hidden_activation: 'silu' })).toThrow(/hidden_activation is "silu"; the per-layer gate runs GELU with the tanh approximation/);
    expect(() => create(setup, { ...setup.config, rms_norm_eps: -1 })).toThrow(/rms_norm_eps must be a positive number/);
    expect(() => create(setup, setup.config, 3)).toThrow(/layer index 3 is outside the model's 3 layers \(config\.num_hidden_layers\)/);
    expect(() => create(setup, { model_type: 'gemma3n', text_config: { ...setup.config, num_hidden_layers: 'x' } })).toThrow(/config\.text_config\.num_hidden_layers must be a positive integer/);
  });

  it('refuses a step without its prestage and a replay sync without one', () => {
    const gpu = new CpuBackend();
    const layer = plePlugin().create({ gpu, layerType: 'ple', config: setup.config, layerIndex: 1, weights: setup.weights, limits: LIMITS }) as PleLayer;
    const state = layer.openState(0) as PleState;
    expect(() => layer.syncReplayedStep(state, 0, 1)).toThrow(/a replayed step ran without its decodePrestage/);
    layer.dispose();
    expect(() => layer.openState(1)).toThrow(/openState on a disposed layer/);
    gpu.dispose();
  });
});
