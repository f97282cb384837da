import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  ArchitectureRegistry, Checkpoint, DeviceError, DeviceMemory, ModelFitError, SeededRandom, WeightsError, blocksOf, buildModelStack, checkFp8Tensors, encodeSafetensors,
  loadModel, quantizeFp8, tensorOf, toBf16, topLogprobs, weightBytes, type GpuBackend, type HostTensor, type ModelAdapter,
} from '../src/index.js';
import { CpuBackend, cpuBackend } from './support/cpu.js';

const root = mkdtempSync(join(tmpdir(), 'metrale-precision-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

function write(name: string, tensors: HostTensor[], config: Record<string, unknown> = { model_type: 'toy' }): string {
  const dir = join(root, name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'config.json'), JSON.stringify(config));
  writeFileSync(join(dir, 'model.safetensors'), encodeSafetensors(tensors));
  return dir;
}

function fp8(name: string, rows: number, cols: number): HostTensor[] {
  const { codes, scales } = quantizeFp8(new SeededRandom(rows + cols).normals(rows * cols, 0.1), rows, cols);
  return [{ name, dtype: 'f8e4m3', shape: [rows, cols], data: codes }, tensorOf(`${name}_scale_inv`, scales, [blocksOf(rows), blocksOf(cols)])];
}

const bf16 = (name: string, shape: number[]): HostTensor => {
  const bits = toBf16(new Float32Array(shape.reduce((a, b) => a * b, 1)).fill(0.5));
  return { name, dtype: 'bf16', shape, data: new Uint8Array(bits.buffer) };
};

describe('a block-FP8 checkpoint, from its headers', () => {
  it('passes a well-formed one and counts its device bytes per precision', () => {
    const dir = write('good', [...fp8('a.weight', 300, 200), bf16('norm.weight', [200]), bf16('embed.weight', [10, 200])]);
    const ckpt = Checkpoint.open(dir);
    try {
      checkFp8Tensors(ckpt.weights);
      const fp8Bytes = 300 * 200 + 4 * blocksOf(300) * blocksOf(200);
      expect(weightBytes(ckpt.weights, { rows: 'bf16', fp8Weights: true })).toEqual({ float: 2 * (200 + 2000), fp8: fp8Bytes, total: 2 * 2200 + fp8Bytes });
      expect(weightBytes(ckpt.weights, { rows: 'f32', fp8Weights: false }).total).toBe(4 * (300 * 200 + 2200));
    } finally {
      ckpt.close();
    }
  });

  it('names a missing or misshapen scale, and a scale without its FP8 weight', () => {
    const refused = (name: string, tensors: HostTensor[], pattern: RegExp) => {
      const ckpt = Checkpoint.open(write(name, tensors));
      try {
        expect(() => checkFp8Tensors(ckpt.weights)).toThrow(WeightsError);
        expect(() => checkFp8Tensors(ckpt.weights)).toThrow(pattern);
      } finally {
        ckpt.close();
      }
    };
    const [w, s] = fp8('layers.0.mlp.down_proj.weight', 130, 260);
    refused('no-scale', [w!], /missing tensor 'layers\.0\.mlp\.down_proj\.weight_scale_inv'.*\[2, 3\]/);
    refused('bad-scale', [w!, tensorOf('layers.0.mlp.down_proj.weight_scale_inv', new Float32Array(2), [1, 2])], /has shape \[1, 2\], expected \[2, 3\]/);
    refused('orphan', [bf16('x.weight', [4, 4]), tensorOf('x.weight_scale_inv', new Float32Array(1), [1, 1])], /scales 'x\.weight', which is bf16/);
    refused('scale-dtype', [w!, { ...s!, dtype: 'i32' }], /is i32; block scales are f32/);
  });
});

/** `gpu` reporting `bytes` of device memory (its methods bound to it: the backend keeps private state). */
function withTotalMemory(gpu: GpuBackend, bytes: number): GpuBackend {
  return new Proxy(gpu, {
    get: (t, p) => {
      if (p === 'device') return { ...t.device, totalMemory: bytes };
      const v = Reflect.get(t, p);
      return typeof v === 'function' ? v.bind(t) : v;
    },
  });
}

describe('loadModel refuses a model that cannot fit, before any upload', () => {
  it('names the sizes and the device', () => {
    const dir = write('big', [bf16('w.weight', [64, 64])], { model_type: 'toy' });
    const small = cpuBackend();
    const tiny = withTotalMemory(small, 1000);
    let built = false;
    const registry = new ArchitectureRegistry();
    const adapter: ModelAdapter = { modelType: 'toy', build: () => { built = true; throw new Error('unreachable'); } };
    registry.register('toy', adapter);
    const before = small.memoryDigest();
    expect(() => loadModel(dir, { gpu: tiny, limits: { maxSeqs: 1, maxSeqLen: 4, maxBatch: 1, maxK: 1, maxRows: 4 }, architectures: registry, precision: { rows: 'f32', fp8Weights: false } }))
      .toThrow(ModelFitError);
    expect(() => loadModel(dir, { gpu: tiny, limits: { maxSeqs: 1, maxSeqLen: 4, maxBatch: 1, maxK: 1, maxRows: 4 }, architectures: registry }))
      .toThrow(/take 0\.00 GiB on the device in f32 .*more than .*'s 0\.00 GiB; use a lower precision/);
    expect(built).toBe(false);
    expect(small.memoryDigest()).toBe(before);
    small.dispose();
  });

  it("leaves out the tensors the adapter never reads (unreadTensors: a vision tower, MTP layers)", () => {
    // 64 × 64 bf16 text weights (8 KiB in bf16) beside a 128 × 128 vision tower: only the text counts.
    const dir = write('vl', [bf16('w.weight', [64, 64]), bf16('model.visual.w.weight', [128, 128])], { model_type: 'toy_vl' });
    const small = cpuBackend();
    const gpu = withTotalMemory(small, 10_000);
    const registry = new ArchitectureRegistry();
    const limits = { maxSeqs: 1, maxSeqLen: 4, maxBatch: 1, maxK: 1, maxRows: 4 };
    const build = () => ({ layers: [], vocabSize: 1, eosTokenIds: [], dispose() {} });
    registry.register('toy_vl', { modelType: 'toy_vl', build, unreadTensors: () => (name: string) => name.startsWith('model.visual.') });
    const loaded = loadModel(dir, { gpu, limits, architectures: registry, precision: { rows: 'bf16', fp8Weights: false } });
    expect(loaded.weightBytes.total).toBe(2 * 64 * 64);
    const counted = new ArchitectureRegistry();
    counted.register('toy_vl', { modelType: 'toy_vl', build });
    expect(() => loadModel(dir, { gpu, limits, architectures: counted, precision: { rows: 'bf16', fp8Weights: false } })).toThrow(ModelFitError);
    small.dispose();
  });
});

describe('a model that fits the device but not with everything beside it', () => {
  const limits = { maxSeqs: 4, maxSeqLen: 64, maxBatch: 4, maxK: 1, maxRows: 64 };
  /** A toy adapter that uploads its weight, then allocates `extra` bytes of layer state; frees what it made when that fails. */
  const toy = (extra: number): ModelAdapter => ({
    modelType: 'toy',
    build: ({ gpu }) => {
      const memory = new DeviceMemory(gpu);
      try {
        memory.upload(new Uint8Array(2 * 64 * 64));
        memory.zeroed(extra);
      } catch (error) {
        memory.free();
        throw error;
      }
      return { layers: [], vocabSize: 1, eosTokenIds: [], dispose: () => memory.free() };
    },
  });

  it('refuses weights larger than what is free of the device, before any upload', () => {
    const dir = write('free', [bf16('w.weight', [64, 64])], { model_type: 'toy' });
    const gpu = new CpuBackend({ memoryLimit: 16_384 });
    const held = gpu.alloc(12_288); // another tenant's memory: 4 KiB stay free, the weights take 8 KiB
    const registry = new ArchitectureRegistry();
    registry.register('toy', toy(0));
    const before = gpu.memoryDigest();
    expect(() => loadModel(dir, { gpu, limits, architectures: registry, precision: { rows: 'bf16', fp8Weights: false } }))
      .toThrow(/take 0\.00 GiB on the device in bf16 .*more than the 0\.00 GiB free of .*'s 0\.00 GiB; use a lower precision/);
    expect(gpu.memoryDigest()).toBe(before);
    gpu.free(held);
    expect(loadModel(dir, { gpu, limits, architectures: registry, precision: { rows: 'bf16', fp8Weights: false } }).weightBytes.total).toBe(2 * 64 * 64);
    gpu.dispose();
  });

  it("is a ModelFitError naming the limits when the build runs out of memory, with the driver's error as its cause; nothing stays allocated", () => {
    const dir = write('beside', [bf16('w.weight', [64, 64])], { model_type: 'toy' });
    const gpu = new CpuBackend({ memoryLimit: 16_384 });
    const registry = new ArchitectureRegistry();
    registry.register('toy', toy(12_288)); // 8 KiB of weights fit; 12 KiB of state beside them do not
    const before = gpu.memoryDigest();
    let caught: unknown;
    try {
      loadModel(dir, { gpu, limits, architectures: registry, precision: { rows: 'bf16', fp8Weights: false } });
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(ModelFitError);
    const e = caught as ModelFitError;
    expect(e.message).toMatch(/beside: .* ran out of memory building the toy model in bf16: its weights take 0\.00 GiB, and the device had 0\.00 GiB free of 0\.00 GiB/);
    expect(e.message).toMatch(/4 sequences of up to 64 tokens and steps of up to 64 rows .*--max-batch, --max-model-len.*--tensor-parallel-size/);
    expect(e.needBytes).toBe(2 * 64 * 64);
    expect(e.deviceBytes).toBe(16_384);
    expect(e.cause).toBeInstanceOf(DeviceError);
    expect((e.cause as DeviceError).code).toBe('CUDA_ERROR_OUT_OF_MEMORY');
    expect(gpu.memoryDigest()).toBe(before);
    gpu.dispose();
  });

  it('passes any other build error through unchanged', () => {
    const gpu = cpuBackend();
    const boom = new Error('a layer refused its config');
    const adapter: ModelAdapter = { modelType: 'toy', build: () => { throw boom; } };
    expect(() => buildModelStack(adapter, { gpu, config: {}, weights: new Map() as never, limits }, { dir: 'x' })).toThrow(boom);
    const other: ModelAdapter = { modelType: 'toy', build: () => { throw new DeviceError('launch', 'bad grid', 'CUDA_ERROR_INVALID_VALUE'); } };
    expect(() => buildModelStack(other, { gpu, config: {}, weights: new Map() as never, limits }, { dir: 'x' })).toThrow(DeviceError);
    gpu.dispose();
  });
});

describe('topLogprobs', () => {
  it('is the log-softmax of the row, best first, ties to the lower id', () => {
    const logits = Float32Array.from([0, 1, 3, 3, -1, 2]);
    const got = topLogprobs(logits, 3, 1, 2); // the row [3, -1, 2]
    const lse = Math.log(Math.exp(3) + Math.exp(-1) + Math.exp(2));
    expect(got.map((e) => e.token)).toEqual([0, 2]);
    expect(got[0]!.logprob).toBeCloseTo(3 - lse, 12);
    expect(topLogprobs(logits, 6, 0, 3).map((e) => e.token)).toEqual([2, 3, 5]);
    expect(topLogprobs(logits, 6, 0, 0)).toEqual([]);
    expect(() => topLogprobs(logits, 6, 0, 21)).toThrow(/0\.\.20/);
  });
});
