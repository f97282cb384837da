import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  ArchitectureRegistry, Checkpoint, UnsupportedArchitectureError, WeightsError, encodeSafetensors, loadModel, readF32, scopeWeights, tensorOf, toBf16,
  type HostTensor, type ModelAdapter,
} from '../src/index.js';
import { cpuBackend } from './support/cpu.js';

const root = mkdtempSync(join(tmpdir(), 'metrale-checkpoint-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const values = Float32Array.from({ length: 12 }, (_, i) => (i - 5) * 0.375);

function f16(v: Float32Array): Uint16Array {
  // Exact for these values: small multiples of 1/8.
  return Uint16Array.from(v, (x) => {
    if (x === 0) return 0;
    const sign = x < 0 ? 0x8000 : 0;
    const a = Math.abs(x);
    const e = Math.floor(Math.log2(a));
    const m = Math.round((a / 2 ** e - 1) * 1024);
    return sign | ((e + 15) << 10) | m;
  });
}

function write(name: string, tensors: HostTensor[], config: Record<string, unknown> = { model_type: 'toy' }, shards?: string[][]): string {
  const dir = join(root, name);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'config.json'), JSON.stringify(config));
  if (!shards) writeFileSync(join(dir, 'model.safetensors'), encodeSafetensors(tensors));
  else {
    const map: Record<string, string> = {};
    shards.forEach((names, i) => {
      const file = `model-0000${i + 1}-of-0000${shards.length}.safetensors`;
      writeFileSync(join(dir, file), encodeSafetensors(tensors.filter((t) => names.includes(t.name))));
      for (const n of names) map[n] = file;
    });
    writeFileSync(join(dir, 'model.safetensors.index.json'), JSON.stringify({ metadata: {}, weight_map: map }));
  }
  return dir;
}

const tensors = (): HostTensor[] => [
  tensorOf('model.a.weight', values, [3, 4]),
  { ...tensorOf('model.b.weight', toBf16(values), [3, 4], 'bf16') },
  { ...tensorOf('model.c.weight', f16(values), [12], 'f16') },
];

describe('Checkpoint', () => {
  it('reads f32, bf16 and f16 tensors as the same f32 values, single file or sharded', () => {
    for (const dir of [write('single', tensors()), write('sharded', tensors(), undefined, [['model.a.weight'], ['model.b.weight', 'model.c.weight']])]) {
      const ckpt = Checkpoint.open(dir);
      expect(ckpt.config.model_type).toBe('toy');
      expect(Array.from(readF32(ckpt.weights, 'model.a.weight', [3, 4]))).toEqual(Array.from(values));
      expect(Array.from(readF32(ckpt.weights, 'model.b.weight', [3, 4]))).toEqual(Array.from(values));
      expect(Array.from(readF32(ckpt.weights, 'model.c.weight', [12]))).toEqual(Array.from(values));
      const scoped = scopeWeights(ckpt.weights, 'model.');
      expect([...scoped.names()].sort()).toEqual(['a.weight', 'b.weight', 'c.weight']);
      ckpt.close();
    }
  });

  it('names the tensor and the shard file when a tensor is missing or misshapen', () => {
    const dir = write('errors', tensors(), undefined, [['model.a.weight'], ['model.b.weight', 'model.c.weight']]);
    const ckpt = Checkpoint.open(dir);
    const layer = scopeWeights(ckpt.weights, 'model.');
    expect(() => readF32(layer, 'b.weight', [4, 3])).toThrow(`${join(dir, 'model-00002-of-00002.safetensors')}: tensor 'model.b.weight' has shape [3, 4], expected [4, 3]`);
    expect(() => readF32(layer, 'd.weight', [2])).toThrow(`missing tensor 'model.d.weight' (expected shape [2])`);
    expect(() => readF32(layer, 'd.weight', [2])).toThrow(join(dir, 'model.safetensors.index.json'));
    // A scoped view whose tensors all live in one shard names that shard as its origin.
    expect(scopeWeights(ckpt.weights, 'model.a').origin).toBe(join(dir, 'model-00001-of-00002.safetensors'));
  });

  it('refuses an index that lists a shard the directory lacks, and a directory without weights', () => {
    const dir = write('no-shard', tensors(), undefined, [['model.a.weight'], ['model.b.weight', 'model.c.weight']]);
    rmSync(join(dir, 'model-00002-of-00002.safetensors'));
    expect(() => Checkpoint.open(dir)).toThrow(/lists shard\(s\) 'model-00002-of-00002.safetensors' that are not in/);
    const empty = write('empty', tensors());
    rmSync(join(empty, 'model.safetensors'));
    expect(() => Checkpoint.open(empty)).toThrow(WeightsError);
    expect(() => Checkpoint.open(join(root, 'nowhere'))).toThrow(/not a checkpoint directory/);
  });
});

describe('ArchitectureRegistry and loadModel', () => {
  const adapter = (modelType: string): ModelAdapter => ({
    modelType,
    build: ({ weights }) => {
      readF32(weights, 'model.a.weight', [3, 4]);
      return { layers: [], vocabSize: 4, eosTokenIds: [], dispose() {} };
    },
  });

  it('an unsupported model_type names the supported ones', () => {
    const registry = new ArchitectureRegistry();
    registry.register('qwen3_next', adapter('qwen3_next'));
    registry.register('glm_moe_dsa', adapter('glm_moe_dsa'));
    expect(() => registry.get('llama')).toThrow(UnsupportedArchitectureError);
    expect(() => registry.get('llama')).toThrow('model_type "llama" is not supported; supported: glm_moe_dsa, qwen3_next; a plugin may bring it: install or load the plugin whose architectures include it');
    const dir = write('unsupported', tensors(), { model_type: 'llama' });
    const gpu = cpuBackend();
    expect(() => loadModel(dir, { gpu, limits: { maxSeqs: 1, maxSeqLen: 4, maxBatch: 1, maxK: 1, maxRows: 4 }, architectures: registry })).toThrow(/config.json: model_type "llama" is not supported/);
    gpu.dispose();
  });

  it('builds with the adapter registered for the config', () => {
    const registry = new ArchitectureRegistry();
    registry.register('toy', adapter('toy'));
    expect(() => registry.register('toy', adapter('toy'))).toThrow(/already registered/);
    const gpu = cpuBackend();
    const loaded = loadModel(write('toy', tensors()), { gpu, limits: { maxSeqs: 1, maxSeqLen: 4, maxBatch: 1, maxK: 1, maxRows: 4 }, architectures: registry });
    expect(loaded.adapter.modelType).toBe('toy');
    expect(loaded.stack.vocabSize).toBe(4);
    gpu.dispose();
  });
});
