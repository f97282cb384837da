// The layer's precision data paths on the CPU reference backend: the conformance kit with bf16
// rows (bf16 and block-FP8 weights, shapes that are not multiples of 128), the golden fixtures in
// bf16 and FP8 against their f32 outputs, the weights as the device holds them, and Qwen3.5's split
// FP8 projections regrouped block by block.
import { basename } from 'node:path';
import {
  F32_PRECISION, InvalidArgumentError, MemoryWeightSource, SeededRandom, encodeFloats, floatBytes, linearBytes, linearToF32, readLinear, runLinear, toF32, uploadLinear,
  type DevicePtr, type HostLinear, type HostTensor, type Precision,
} from '@metrale/core';
import { checkLayerFixture, fixtureDirectories, runLayerConformance } from '@metrale/core/testing';
import { CpuBackend } from '@metrale/cpu-backend';
import plugin, { GdnLayer, groupSplitLinears, groupSplitProjections, inputProjections, loadGdnWeights, projectionRow, readGdnConfig } from '@metrale/layer-gdn';
import { afterAll, describe, expect, it } from 'vitest';
import { configOf, randomWeights, Rig, SMALL, splitTensors, type Shape } from './gdn-setup.js';
import { BF16, F16, FIXTURE_BOUNDS, FP8, fp8Checkpoint, fp8Source, fp8Tensors, withPrecision } from './precision-setup.js';

/** A shape whose Linears cross 128-row and 128-column blocks without filling them: in_proj_qkvz [192, 136], out_proj [136, 64]. */
const BLOCKS: Shape = { hidden: 136, hk: 2, hv: 4, dk: 16, dv: 16, K: 4 };
/** in_proj_qkvz [256, 136]: whole 128-row blocks, under which a block-FP8 in_proj_ba stacks (H_v 3: ba's 6 columns padded to 8). */
const WHOLE: Shape = { hidden: 136, hk: 1, hv: 3, dk: 32, dv: 32, K: 4 };

/** A block-FP8 checkpoint with in_proj_ba quantized too (the published ones leave it in bf16). */
const allFp8 = (t: HostTensor[]) => fp8Checkpoint(t).flatMap((x) => (x.name === 'in_proj_ba.weight' ? fp8Tensors(x) : [x]));


const CONFORMANCE_CHECKS = [
  'default-hooks', 'replay-equals-eager', 'failed-capture-rearm', 'verify-accept-equals-decode',
  'rejected-rows-leave-no-trace', 'carried-equals-write-on-accept', 'slot-reuse-starts-clean', 'prefix-resume-equals-prefill',
];

describe('conformance kit with bf16 rows on the CPU reference backend', () => {
  const cases: { name: string; shape: Shape; precision: Precision; tensors: (t: HostTensor[]) => HostTensor[] }[] = [
    { name: 'bf16 weights', shape: SMALL, precision: BF16, tensors: (t) => t },
    { name: 'block-FP8 in_proj_qkvz and out_proj (partial blocks)', shape: SMALL, precision: FP8, tensors: fp8Checkpoint },
    { name: 'block-FP8, Linears over more than one block', shape: BLOCKS, precision: FP8, tensors: fp8Checkpoint },
    { name: 'block-FP8, Qwen3.5 split projections (dequantized: runs of rows split blocks)', shape: SMALL, precision: FP8, tensors: (t) => fp8Checkpoint(splitTensors(SMALL, t)) },
    { name: 'block-FP8 in_proj_ba stacked under in_proj_qkvz (one GEMM)', shape: WHOLE, precision: FP8, tensors: allFp8 },
  ];
  for (const c of cases) {
    it(`${c.name}: every check of the kit at k = 4`, () => {
      const { tensors } = randomWeights(c.shape, 3);
      const report = runLayerConformance(withPrecision(plugin, c.precision), {
        backend: () => new CpuBackend(),
        config: configOf(c.shape),
        weights: new MemoryWeightSource('conformance weights', c.tensors(tensors)),
        k: 4,
        rowDtype: 'bf16',
      });
      const status = Object.fromEntries(report.checks.map((x) => [x.check, `${x.status}: ${x.detail}`]));
      for (const check of CONFORMANCE_CHECKS) expect(status[check], check).toMatch(/^pass/);
      expect(report.passed).toBe(true);
    });
  }
});

const fixtures = fixtureDirectories(new URL('../fixtures', import.meta.url), {
  envVar: 'METRALE_GDN_FIXTURES_DIR', generator: 'tools/fixtures/gdn.py', out: 'packages/layer-gdn/fixtures',
});

describe('golden fixtures in bf16 and block-FP8 against their f32 outputs (CPU)', () => {
  const worst: Record<string, number> = {};
  afterAll(() => console.log(`golden fixtures, worst step rel L2 against the f32 outputs: ${JSON.stringify(worst)}`));
  it('has fixtures to check', () => {
    expect(fixtures.dirs.length, fixtures.missing).toBeGreaterThan(0);
  });
  for (const dir of fixtures.dirs) {
    for (const [mode, p, bound] of [['bf16', withPrecision(plugin, BF16), FIXTURE_BOUNDS.bf16], ['fp8', withPrecision(plugin, FP8, fp8Source), FIXTURE_BOUNDS.fp8]] as const) {
      it(`${basename(dir)} in ${mode}: every step within ${bound}`, () => {
        const { fixture, runs } = checkLayerFixture(dir, { plugins: [p], backend: () => new CpuBackend(), bound: () => bound, print: 'none' });
        for (const { report, over } of runs) {
          expect(report.rowFormat).toEqual({ input: 'bf16', output: 'bf16' });
          expect(report.steps).toHaveLength(fixture.steps.length);
          expect(over).toEqual([]);
          worst[`${basename(dir)} ${mode}`] = report.worstRel;
        }
      });
    }
  }
});

describe('weights and rows in the precision', () => {
  const limits = { maxSeqs: 2, maxSeqLen: 64, maxBatch: 2, maxK: 3, maxRows: 24 };
  const create = (precision: Precision | undefined, tensors: HostTensor[], shape = SMALL) => {
    const gpu = new CpuBackend();
    const before = gpu.stats().liveBytes;
    const layer = plugin.create({
      gpu, layerType: 'gdn', config: configOf(shape), layerIndex: 0, weights: new MemoryWeightSource('w', tensors), limits, ...(precision ? { precision } : {}),
    }) as GdnLayer;
    return { gpu, layer, bytes: gpu.stats().liveBytes - before };
  };

  it('rows of the row type in and out: f32 without a precision, 2 bytes in bf16 and f16', () => {
    const { tensors } = randomWeights(SMALL, 2);
    for (const [precision, bytes] of [[undefined, 4], [F32_PRECISION, 4], [BF16, 2], [F16, 2], [FP8, 2]] as const) {
      const { gpu, layer } = create(precision, precision === FP8 ? fp8Checkpoint(tensors) : tensors);
      expect(layer.inputRowBytes).toBe(bytes * SMALL.hidden);
      expect(layer.outputRowBytes).toBe(bytes * SMALL.hidden);
      expect(layer.precision).toEqual(precision ?? F32_PRECISION);
      layer.dispose();
      gpu.dispose();
    }
  });

  it('holds bf16 weights in half the bytes, FP8 ones in a quarter plus their scales', () => {
    const { tensors } = randomWeights(BLOCKS, 2);
    const f32 = create(F32_PRECISION, tensors, BLOCKS);
    const bf16 = create(BF16, tensors, BLOCKS);
    const fp8 = create(FP8, fp8Checkpoint(tensors), BLOCKS);
    const cfg = readGdnConfig(configOf(BLOCKS));
    const src = new MemoryWeightSource('w', fp8Checkpoint(tensors));
    const qkvz = readLinear(src, 'in_proj_qkvz.weight', [cfg.qkvzDim, cfg.hidden], FP8);
    const out = readLinear(src, 'out_proj.weight', [cfg.hidden, cfg.valueDim], FP8);
    expect(qkvz.dtype).toBe('f8e4m3');
    // Projection bytes: f32 4·n, bf16 2·n; FP8 n + scales for qkvz and out_proj, in_proj_ba bf16.
    const n = { qkvz: cfg.qkvzDim * cfg.hidden, ba: 2 * cfg.hv * cfg.hidden, out: cfg.hidden * cfg.valueDim };
    const rowScratch = limits.maxRows * cfg.valueDim;  // y in the row type, and (16-bit rows) o in f32
    expect(f32.bytes - bf16.bytes).toBe(2 * (n.qkvz + n.ba + n.out) + 2 * rowScratch - 4 * rowScratch);
    expect(bf16.bytes - fp8.bytes).toBe(2 * n.qkvz + 2 * n.out - linearBytes(qkvz) - linearBytes(out));
    for (const x of [f32, bf16, fp8]) {
      x.layer.dispose();
      x.gpu.dispose();
    }
  });

  it('refuses FP8 weights with f32 rows before touching the device', () => {
    const gpu = new CpuBackend();
    const before = gpu.stats();
    expect(() => plugin.create({
      gpu, layerType: 'gdn', config: configOf(SMALL), layerIndex: 0, weights: new MemoryWeightSource('w', fp8Checkpoint(randomWeights(SMALL).tensors)), limits,
      precision: { rows: 'f32', fp8Weights: true },
    })).toThrow(InvalidArgumentError);
    expect(gpu.stats().liveAllocations).toBe(before.liveAllocations);
    gpu.dispose();
  });

  it('an FP8 checkpoint without fp8Weights runs its weights dequantized in the row type', () => {
    const { tensors } = randomWeights(SMALL, 4);
    const ckpt = fp8Checkpoint(tensors);
    const a = new Rig(configOf(SMALL), ckpt, limits, { precision: BF16 });
    const b = new Rig(configOf(SMALL), ckpt, limits, { precision: FP8 });
    try {
      const x = Float32Array.from({ length: 3 * SMALL.hidden }, (_, i) => Math.sin(i));
      const [sa, sb] = [a.driver.open(), b.driver.open()];
      const ya = a.prefill([sa], [3], x);
      const yb = b.prefill([sb], [3], x);
      // The same weights (code × scale rounded to bf16 on one side, exact on the other): close, not equal.
      let num = 0;
      let den = 0;
      for (let i = 0; i < ya.length; i++) {
        num += (ya[i]! - yb[i]!) ** 2;
        den += yb[i]! ** 2;
      }
      expect(Math.sqrt(num / den)).toBeLessThan(2e-2);
    } finally {
      a.dispose();
      b.dispose();
    }
  });
});

describe("Qwen3.5's split projections as block-FP8", () => {
  // d_k and r·d_v multiples of 128 (as in the Qwen3.5 checkpoints): the regrouping moves whole blocks.
  const ALIGNED: Shape = { hidden: 40, hk: 2, hv: 2, dk: 128, dv: 128, K: 4 };
  const cfg = readGdnConfig(configOf(ALIGNED));

  it('move whole 128-row blocks with their scales where every run of rows is whole blocks', () => {
    const { tensors } = randomWeights(ALIGNED, 6);
    const split = new MemoryWeightSource('split', fp8Checkpoint(splitTensors(ALIGNED, tensors)));
    const read = (name: string, rows: number) => readLinear(split, name, [rows, cfg.hidden], FP8);
    const parts = { qkv: read('in_proj_qkv.weight', cfg.convDim), z: read('in_proj_z.weight', cfg.valueDim), b: read('in_proj_b.weight', cfg.hv), a: read('in_proj_a.weight', cfg.hv) };
    const grouped = groupSplitLinears(cfg, parts, FP8);
    expect(grouped.qkvz.dtype).toBe('f8e4m3');
    expect(grouped.ba.dtype).toBe('bf16');
    // The grouped weight's values are the parts' values, regrouped row by row.
    const want = groupSplitProjections(cfg, linearToF32(parts.qkv), linearToF32(parts.z), linearToF32(parts.b), linearToF32(parts.a));
    expect(Array.from(linearToF32(grouped.qkvz))).toEqual(Array.from(want.qkvz));
    expect(Array.from(linearToF32(grouped.ba))).toEqual(Array.from(want.ba));
  });

  it('give the fused FP8 layout\'s outputs, bit for bit', () => {
    const { tensors } = randomWeights(ALIGNED, 6);
    // Quantized once, in the split layout; the fused checkpoint holds the same blocks regrouped.
    const splitCkpt = fp8Checkpoint(splitTensors(ALIGNED, tensors));
    const src = new MemoryWeightSource('split', splitCkpt);
    const read = (name: string, rows: number) => readLinear(src, name, [rows, cfg.hidden], FP8);
    const g = groupSplitLinears(cfg, { qkv: read('in_proj_qkv.weight', cfg.convDim), z: read('in_proj_z.weight', cfg.valueDim), b: read('in_proj_b.weight', cfg.hv), a: read('in_proj_a.weight', cfg.hv) }, FP8);
    const bc = Math.ceil(cfg.hidden / 128);
    const fusedCkpt: HostTensor[] = [
      { name: 'in_proj_qkvz.weight', dtype: 'f8e4m3', shape: [cfg.qkvzDim, cfg.hidden], data: g.qkvz.data },
      { name: 'in_proj_qkvz.weight_scale_inv', dtype: 'f32', shape: [cfg.qkvzDim / 128, bc], data: new Uint8Array(g.qkvz.scales!.buffer) },
      { name: 'in_proj_ba.weight', dtype: 'bf16', shape: [2 * cfg.hv, cfg.hidden], data: g.ba.data },
      ...splitCkpt.filter((t) => !t.name.startsWith('in_proj_')),
    ];
    const limits = { maxSeqs: 2, maxSeqLen: 64, maxBatch: 2, maxK: 3, maxRows: 12 };
    const x = Float32Array.from({ length: 6 * ALIGNED.hidden }, (_, i) => Math.cos(0.37 * i));
    const outputs = (ckpt: HostTensor[], config: Record<string, unknown>) => {
      const rig = new Rig(config, ckpt, limits, { precision: FP8 });
      try {
        const s = rig.driver.open();
        const pre = rig.prefill([s], [5], x.subarray(0, 5 * ALIGNED.hidden));
        const dec = rig.decode([s], x.subarray(5 * ALIGNED.hidden));
        expect((rig.layer as GdnLayer).weightLayout).toBe(config.model_type === 'qwen3_5_text' ? 'qwen3_5' : 'qwen3_next');
        return [...pre, ...dec];
      } finally {
        rig.dispose();
      }
    };
    const fused = outputs(fusedCkpt, configOf(ALIGNED));
    const split = outputs(splitCkpt, configOf(ALIGNED, { model_type: 'qwen3_5_text' }));
    expect(fused.every(Number.isFinite)).toBe(true);
    expect(split).toEqual(fused);
  });

  it('are dequantized into the row type where a run of rows splits a block (small shapes)', () => {
    const small = readGdnConfig(configOf(SMALL));
    const src = new MemoryWeightSource('split', splitTensors(SMALL, randomWeights(SMALL, 2).tensors).flatMap((t) => (t.name === 'in_proj_qkv.weight' || t.name === 'in_proj_z.weight' ? fp8Tensors(t) : [t])));
    const read = (name: string, rows: number) => readLinear(src, name, [rows, small.hidden], FP8);
    const parts = { qkv: read('in_proj_qkv.weight', small.convDim), z: read('in_proj_z.weight', small.valueDim), b: read('in_proj_b.weight', small.hv), a: read('in_proj_a.weight', small.hv) };
    const g = groupSplitLinears(small, parts, FP8);
    expect(g.qkvz.dtype).toBe('bf16');
    const want = groupSplitProjections(small, linearToF32(parts.qkv), linearToF32(parts.z), linearToF32(parts.b), linearToF32(parts.a)).qkvz;
    const got = linearToF32(g.qkvz);
    for (let i = 0; i < want.length; i++) expect(Math.abs(got[i]! - want[i]!)).toBeLessThanOrEqual(Math.abs(want[i]!) * 2 ** -8);
    expect(toF32({ name: 'x', dtype: 'bf16', shape: [got.length], data: g.qkvz.data })).toEqual(got);
  });
});

describe('the input projections as one GEMM (inputProjections)', () => {
  const cases: { name: string; shape: Shape; precision: Precision; tensors: (t: HostTensor[]) => HostTensor[]; gemms: number }[] = [
    { name: 'f32', shape: WHOLE, precision: F32_PRECISION, tensors: (t) => t, gemms: 1 },
    { name: 'bf16', shape: SMALL, precision: BF16, tensors: (t) => t, gemms: 1 },
    { name: 'f16', shape: WHOLE, precision: F16, tensors: (t) => t, gemms: 1 },
    { name: 'block-FP8 in_proj_qkvz, bf16 in_proj_ba (apart: two types)', shape: WHOLE, precision: FP8, tensors: fp8Checkpoint, gemms: 2 },
    { name: 'block-FP8 both, in_proj_qkvz in whole 128-row blocks', shape: WHOLE, precision: FP8, tensors: allFp8, gemms: 1 },
    { name: 'block-FP8 both, in_proj_qkvz ending inside a block (apart)', shape: BLOCKS, precision: FP8, tensors: allFp8, gemms: 2 },
    { name: 'block-FP8 checkpoint dequantized (fp8Weights false)', shape: WHOLE, precision: BF16, tensors: allFp8, gemms: 1 },
  ];
  for (const c of cases) {
    it(`${c.name}: ${c.gemms === 1 ? 'one GEMM writes' : 'two GEMMs write'} the rows the two projections' own GEMMs give, bit for bit`, () => {
      const { tensors } = randomWeights(c.shape, 9);
      const cfg = readGdnConfig(configOf(c.shape));
      const w = loadGdnWeights(new MemoryWeightSource('w', c.tensors(tensors)), cfg, c.precision);
      const gemms = inputProjections(w);
      expect(gemms.length).toBe(c.gemms);
      expect(gemms.reduce((n, g) => n + g.weight.rows, 0)).toBe(cfg.qkvzDim + 2 * cfg.hv);
      if (c.gemms === 1) expect(gemms[0]!.weight.dtype).toBe(w.qkvz.dtype);
      const { width, baCol } = projectionRow(cfg);
      expect(width).toBe(cfg.projDim);
      const gpu = new CpuBackend();
      try {
        const m = 5;
        const rows = c.precision.rows;
        const x = gpu.alloc(m * cfg.hidden * floatBytes(rows));
        gpu.upload(x, encodeFloats(Float32Array.from(new SeededRandom(3).normals(m * cfg.hidden)), rows));
        const run = (weight: HostLinear, y: DevicePtr, ldy: number) => {
          const dw = uploadLinear(gpu, (bytes) => gpu.alloc(bytes), weight);
          runLinear(gpu, { m, x, w: dw, y, ldy, xDtype: rows, yDtype: 'f32' });
        };
        const fused = gpu.alloc(4 * m * width);
        gpu.memsetAsync(fused, 0, 4 * m * width, gpu.defaultStream);
        for (const g of gemms) run(g.weight, fused + BigInt(4 * g.col), width);
        const qkvz = gpu.alloc(4 * m * cfg.qkvzDim);
        const ba = gpu.alloc(4 * m * 2 * cfg.hv);
        run(w.qkvz, qkvz, cfg.qkvzDim);
        run(w.ba, ba, 2 * cfg.hv);
        gpu.synchronize();
        const words = (p: DevicePtr, n: number) => {
          const b = gpu.download(p, 4 * n);
          return new Uint32Array(b.buffer, b.byteOffset, n);
        };
        const f = words(fused, m * width), q = words(qkvz, m * cfg.qkvzDim), r = words(ba, m * 2 * cfg.hv);
        for (let t = 0; t < m; t++) {
          expect(Array.from(f.subarray(t * width, t * width + cfg.qkvzDim)), `row ${t}: qkvz`).toEqual(Array.from(q.subarray(t * cfg.qkvzDim, (t + 1) * cfg.qkvzDim)));
          expect(Array.from(f.subarray(t * width + baCol, t * width + baCol + 2 * cfg.hv)), `row ${t}: ba`).toEqual(Array.from(r.subarray(t * 2 * cfg.hv, (t + 1) * 2 * cfg.hv)));
          expect(Array.from(f.subarray(t * width + baCol + 2 * cfg.hv, (t + 1) * width)), `row ${t}: padding`).toEqual(new Array(width - baCol - 2 * cfg.hv).fill(0));
        }
      } finally {
        gpu.dispose();
      }
    });
  }
});
