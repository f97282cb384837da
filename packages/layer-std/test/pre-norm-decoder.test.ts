import { CpuBackend } from '@metrale/cpu-backend';
import { DecoderBlock, MemoryWeightSource, StepDriver, WeightsError, type CollectiveArgs, type Communicator, type ModelStack, relativeL2Error } from '@metrale/core';
import { MlpLayer, buildPreNormDecoder, type PreNormDecoderSpec } from '@metrale/layer-std';
import { describe, expect, it } from 'vitest';
import { LIMITS, matvec, rmsNorm, silu, Weights } from './setup.js';

// A two-layer pre-norm decoder whose mixer and MLP are both SwiGLU MLPs (any layer will do: the
// builder only wires them), checked against the same stack computed in f64.
const D = 8;
const I = 12;
const V = 20;
const EPS = 1e-6;

function decoderWeights(options: { tied?: boolean } = {}): Weights {
  const w = new Weights();
  w.add('model.embed_tokens.weight', [V, D], 1);
  for (let i = 0; i < 2; i++) {
    for (const norm of ['input_layernorm', 'post_attention_layernorm']) w.add(`model.layers.${i}.${norm}.weight`, [D], 0.1, 0.2);
    for (const part of ['mixer', 'mlp']) {
      w.add(`model.layers.${i}.${part}.gate_proj.weight`, [I, D], 0.3);
      w.add(`model.layers.${i}.${part}.up_proj.weight`, [I, D], 0.3);
      w.add(`model.layers.${i}.${part}.down_proj.weight`, [D, I], 0.3);
    }
  }
  w.add('model.norm.weight', [D], 0.1, 0.2);
  if (!options.tied) w.add('lm_head.weight', [V, D], 0.5);
  return w;
}

const spec = (gpu: CpuBackend, normOffset: 0 | 1): PreNormDecoderSpec => ({
  hidden: D, vocab: V, layerCount: 2, eps: EPS, normOffset,
  layer: (i, weights) => ({
    type: `test layer ${i}`,
    mixer: () => new MlpLayer(gpu, weights('mixer.'), LIMITS, { hidden: D, inter: I }),
    mlp: () => new MlpLayer(gpu, weights('mlp.'), LIMITS, { hidden: D, inter: I }),
  }),
});

/** The decoder in f64: embed, per layer x += mixer(norm(x)), x += mlp(norm(x)), norm, head. */
function reference(w: Weights, tokens: readonly number[], normOffset: number, tied: boolean): Float64Array {
  const v = (name: string) => w.values.get(name)!;
  const swiglu = (prefix: string, x: Float64Array) => {
    const g = matvec(v(`${prefix}gate_proj.weight`), x, I, D);
    const u = matvec(v(`${prefix}up_proj.weight`), x, I, D);
    return matvec(v(`${prefix}down_proj.weight`), g.map((gi, j) => silu(gi) * u[j]!), D, I);
  };
  const out = new Float64Array(tokens.length * V);
  tokens.forEach((t, r) => {
    const x = v('model.embed_tokens.weight').slice(t * D, (t + 1) * D);
    for (let i = 0; i < 2; i++) {
      const at = `model.layers.${i}.`;
      swiglu(`${at}mixer.`, rmsNorm(x, v(`${at}input_layernorm.weight`), EPS, normOffset)).forEach((d, j) => (x[j]! += d));
      swiglu(`${at}mlp.`, rmsNorm(x, v(`${at}post_attention_layernorm.weight`), EPS, normOffset)).forEach((d, j) => (x[j]! += d));
    }
    out.set(matvec(v(tied ? 'model.embed_tokens.weight' : 'lm_head.weight'), rmsNorm(x, v('model.norm.weight'), EPS, normOffset), V, D), r * V);
  });
  return out;
}

function logits(stack: ModelStack, gpu: CpuBackend, tokens: readonly number[]): Float32Array {
  const driver = new StepDriver({ gpu, layers: stack.layers, limits: LIMITS });
  try {
    const r = driver.prefill({ seqs: [driver.open()], lengths: [tokens.length], tokens: Int32Array.from(tokens) });
    return driver.readOutputF32(r).slice();
  } finally {
    driver.dispose();
  }
}

describe('buildPreNormDecoder', () => {
  const tokens = [3, 17, 0, 9, 9, 12];

  for (const [normOffset, tied] of [[0, false], [1, false], [1, true]] as const) {
    it(`wires embedding, two residual branches per layer, norm and ${tied ? 'the tied embedding as' : ''} lm head (norm offset ${normOffset})`, () => {
      const gpu = new CpuBackend();
      const w = decoderWeights({ tied });
      const config = { eos_token_id: [5, 7], tie_word_embeddings: tied };
      const stack = buildPreNormDecoder({ gpu, config, weights: w.source(), limits: LIMITS }, spec(gpu, normOffset));
      try {
        expect(stack.layers.map((l) => l.type)).toEqual(['embedding', 'test layer 0', 'test layer 1', 'rms-norm', 'lm-head']);
        expect(stack.vocabSize).toBe(V);
        expect(stack.eosTokenIds).toEqual([5, 7]);
        expect(relativeL2Error(logits(stack, gpu, tokens), reference(w, tokens, normOffset, tied))).toBeLessThan(1e-5);
      } finally {
        stack.dispose();
        gpu.dispose();
      }
    });
  }

  it('frees everything it made when a layer cannot be built, and names the tensor', () => {
    const gpu = new CpuBackend();
    const missing = 'model.layers.1.mlp.up_proj.weight';
    const weights = new MemoryWeightSource('ckpt', decoderWeights().tensors.filter((t) => t.name !== missing));
    const build = () => buildPreNormDecoder({ gpu, config: {}, weights, limits: LIMITS }, spec(gpu, 0));
    expect(build).toThrow(WeightsError);
    expect(build).toThrow(`missing tensor '${missing}'`);
    expect(gpu.stats().liveAllocations).toBe(0);
    gpu.dispose();
  });

  it('as one rank of a group of one, adds no collective: the same stack and the same logits', () => {
    const gpu = new CpuBackend();
    const id = gpu.createCommunicatorId(1);
    const comm = gpu.joinCommunicator(id, 0);
    const w = decoderWeights();
    const stack = buildPreNormDecoder({ gpu, config: {}, weights: w.source(), limits: LIMITS, parallel: { rank: 0, size: 1, comm, expertParallel: false } }, spec(gpu, 1));
    try {
      expect(stack.layers.map((l) => l.type)).toEqual(['embedding', 'test layer 0', 'test layer 1', 'rms-norm', 'lm-head']);
      expect(relativeL2Error(logits(stack, gpu, tokens), reference(w, tokens, 1, false))).toBeLessThan(1e-5);
      expect(gpu.stats().collectivesRun).toBe(0);
    } finally {
      stack.dispose();
      gpu.dispose();
    }
  });

  it('as rank 1 of 2: an all-reduce ends each branch, and the head is split by vocabulary and all-gathered', () => {
    const gpu = new CpuBackend();
    const calls: string[] = [];
    // Records the calls and keeps the rank's own part (the other rank's is not there to add).
    const record = (op: string) => (a: CollectiveArgs) => {
      calls.push(`${op} ${a.count} ${a.dtype}`);
      if (op === 'allReduce') gpu.copyDeviceAsync(a.recv, a.send, 4 * a.count, a.stream);
      else gpu.memsetAsync(a.recv, 0, 8 * a.count, a.stream);
    };
    const comm: Communicator = {
      rank: 1, size: 2, allReduce: record('allReduce'), allGather: record('allGather'), reduceScatter: record('reduceScatter'), allToAll: record('allToAll'),
      abort: () => undefined, dispose: () => undefined,
    };
    const stack = buildPreNormDecoder(
      { gpu, config: {}, weights: decoderWeights().source(), limits: LIMITS, parallel: { rank: 1, size: 2, comm, expertParallel: false } },
      { ...spec(gpu, 1), shard: () => undefined },
    );
    try {
      expect(stack.layers.map((l) => l.type)).toEqual(['embedding', 'test layer 0', 'test layer 1', 'rms-norm', 'lm-head (vocab-parallel)']);
      expect((stack.layers[1] as DecoderBlock).layers.map((l) => l.type)).toEqual(['rms-norm', 'mlp', 'all-reduce', 'rms-norm', 'mlp', 'all-reduce']);
      logits(stack, gpu, tokens);
      const rows = tokens.length;
      expect(calls).toEqual([...Array(4).fill(`allReduce ${rows * D} f32`), `allGather ${rows * (V / 2)} f32`]);
    } finally {
      stack.dispose();
      gpu.dispose();
    }
  });

  it('refuses a vocabulary the group does not divide, naming it', () => {
    const gpu = new CpuBackend();
    const comm = gpu.joinCommunicator(gpu.createCommunicatorId(3), 0);
    const build = () => buildPreNormDecoder({ gpu, config: {}, weights: decoderWeights().source(), limits: LIMITS, parallel: { rank: 0, size: 3, comm, expertParallel: false } }, spec(gpu, 1));
    expect(build).toThrow('--tensor-parallel-size 3 does not divide config.vocab_size (20)');
    gpu.dispose();
  });
});
