// Two tiny layers for the fixture runner's tests, written only against core's public API:
// 'affine' (stateless: out = W·x + b + tokenScale·token, f32 or bf16 rows) and 'running-sum'
// (stateful: out = the sum of every committed row of the sequence plus this step's rows so far,
// kept per slot in device memory, with write-on-accept verify so rejected rows leave no trace).
import {
  bf16BitsToF32, defineKernel, definePlugin, f32ToBf16Bits, toF32, type DevicePtr, type GpuBackend, type LayerState, type LayerStep,
  type TransformerLayer,
} from '../../src/index.js';

const affineKernel = defineKernel({
  name: 'test.affine',
  params: {
    input: 'ptr', output: 'ptr', weight: 'ptr', bias: 'ptr', tokens: 'ptr', rows: 'i32', inDim: 'i32', outDim: 'i32', bf16: 'i32', tokenScale: 'f32',
  },
  cpu: (a, { mem }) => {
    const W = mem.f32(a.weight, a.outDim * a.inDim);
    const b = mem.f32(a.bias, a.outDim);
    const tok = mem.i32(a.tokens, a.rows);
    const inF32 = a.bf16 ? undefined : mem.f32(a.input, a.rows * a.inDim);
    const inBf16 = a.bf16 ? mem.u16(a.input, a.rows * a.inDim) : undefined;
    const outF32 = a.bf16 ? undefined : mem.f32(a.output, a.rows * a.outDim);
    const outBf16 = a.bf16 ? mem.u16(a.output, a.rows * a.outDim) : undefined;
    for (let r = 0; r < a.rows; r++) {
      for (let j = 0; j < a.outDim; j++) {
        let acc = b[j]! + a.tokenScale * tok[r]!;
        for (let i = 0; i < a.inDim; i++) {
          const x = inF32 ? inF32[r * a.inDim + i]! : bf16BitsToF32(inBf16![r * a.inDim + i]!);
          acc += W[j * a.inDim + i]! * x;
        }
        if (outF32) outF32[r * a.outDim + j] = acc;
        else outBf16![r * a.outDim + j] = f32ToBf16Bits(acc);
      }
    }
  },
});

function upload(gpu: GpuBackend, values: Float32Array): DevicePtr {
  const ptr = gpu.alloc(values.byteLength);
  gpu.upload(ptr, values);
  return ptr;
}

export const affinePlugin = definePlugin({
  name: 'test-affine',
  version: '0.0.1',
  specificationVersion: '1.0.0',
  layerTypes: ['affine'],
  create({ gpu, config, weights }): TransformerLayer {
    const w = weights.get('weight');
    const [outDim, inDim] = w.shape as [number, number];
    const bf16 = config.row_dtype === 'bf16';
    const elem = bf16 ? 2 : 4;
    // The config can also lie about the width, to test the runner's row-size check.
    const inRow = typeof config.claimed_in_dim === 'number' ? config.claimed_in_dim : inDim;
    const tokenScale = typeof config.token_scale === 'number' ? config.token_scale : 0;
    const weight = upload(gpu, toF32(w));
    const bias = upload(gpu, toF32(weights.get('bias')));
    return {
      type: 'affine',
      inputRowBytes: inRow * elem,
      outputRowBytes: outDim * elem,
      openState: (slot: number): LayerState => ({ slot }),
      closeState: () => {},
      forward(step: LayerStep) {
        step.gpu.launch(affineKernel, { grid: 1, block: 1, stream: step.stream }, {
          input: step.input, output: step.output, weight, bias, tokens: step.tables.tokens, rows: step.rows, inDim, outDim, bf16: bf16 ? 1 : 0, tokenScale,
        });
      },
      dispose() {
        gpu.free(weight);
        gpu.free(bias);
      },
    };
  },
});

/** Adds each sequence's rows to its running sum and commits it (prefill, decode, and leaky verify). */
const commitKernel = defineKernel({
  name: 'test.running-sum.commit',
  params: { input: 'ptr', output: 'ptr', sums: 'ptr', slots: 'ptr', rowStarts: 'ptr', batch: 'i32', width: 'i32', maxSeqs: 'i32' },
  cpu: (a, { mem }) => {
    const slots = mem.i32(a.slots, a.batch);
    const starts = mem.i32(a.rowStarts, a.batch + 1);
    const rows = starts[a.batch]!;
    const x = mem.f32(a.input, rows * a.width);
    const out = mem.f32(a.output, rows * a.width);
    const sums = mem.f32(a.sums, a.maxSeqs * a.width);
    for (let p = 0; p < a.batch; p++) {
      const slot = slots[p]!;
      if (slot < 0) continue;
      for (let r = starts[p]!; r < starts[p + 1]!; r++) {
        for (let c = 0; c < a.width; c++) {
          sums[slot * a.width + c]! += x[r * a.width + c]!;
          out[r * a.width + c] = sums[slot * a.width + c]!;
        }
      }
    }
  },
});

/** Verify without committing: outputs from a copy of the sum, rows kept in the stash for the fold. */
const verifyKernel = defineKernel({
  name: 'test.running-sum.verify',
  params: {
    input: 'ptr', output: 'ptr', sums: 'ptr', stash: 'ptr', slots: 'ptr', batch: 'i32', k: 'i32', stashStride: 'i32', width: 'i32', maxSeqs: 'i32',
  },
  cpu: (a, { mem }) => {
    const slots = mem.i32(a.slots, a.batch);
    const x = mem.f32(a.input, a.batch * a.k * a.width);
    const out = mem.f32(a.output, a.batch * a.k * a.width);
    const sums = mem.f32(a.sums, a.maxSeqs * a.width);
    for (let p = 0; p < a.batch; p++) {
      const slot = slots[p]!;
      if (slot < 0) continue;
      const stash = mem.f32(a.stash + BigInt(4 * slot * a.stashStride), a.k * a.width);
      const s = sums.slice(slot * a.width, (slot + 1) * a.width);
      for (let r = 0; r < a.k; r++) {
        const row = p * a.k + r;
        for (let c = 0; c < a.width; c++) {
          s[c]! += x[row * a.width + c]!;
          out[row * a.width + c] = s[c]!;
          stash[r * a.width + c] = x[row * a.width + c]!;
        }
      }
    }
  },
});

const foldKernel = defineKernel({
  name: 'test.running-sum.fold',
  params: { sums: 'ptr', stash: 'ptr', slotTable: 'ptr', naTab: 'ptr', n: 'i32', k: 'i32', stashStride: 'i32', width: 'i32', maxSeqs: 'i32' },
  cpu: (a, { mem }) => {
    const slots = mem.i32(a.slotTable, a.n);
    const na = mem.u32(a.naTab, a.n);
    const sums = mem.f32(a.sums, a.maxSeqs * a.width);
    for (let p = 0; p < a.n; p++) {
      const slot = slots[p]!;
      if (slot < 0) continue;
      const stash = mem.f32(a.stash + BigInt(4 * slot * a.stashStride), a.k * a.width);
      for (let r = 0; r < na[p]!; r++) {
        for (let c = 0; c < a.width; c++) sums[slot * a.width + c]! += stash[r * a.width + c]!;
      }
    }
  },
});

export const runningSumPlugin = definePlugin({
  name: 'test-running-sum',
  version: '0.0.1',
  specificationVersion: '1.0.0',
  layerTypes: ['running-sum'],
  create({ gpu, config, limits }): TransformerLayer {
    const width = config.hidden_size as number;
    // A leaky layer commits verify rows it was never told were accepted: the fixture must catch it.
    const leaky = config.leaky === true;
    const maxSeqs = limits.maxSeqs;
    const sums = gpu.alloc(4 * maxSeqs * width);
    const stashSeqFloats = limits.maxK * width;
    let stash: DevicePtr = 0n;
    const layer: TransformerLayer = {
      type: 'running-sum',
      inputRowBytes: width * 4,
      outputRowBytes: width * 4,
      openState(slot: number): LayerState {
        gpu.upload(sums + BigInt(4 * slot * width), new Float32Array(width));
        return { slot };
      },
      closeState: () => {},
      forward(step: LayerStep) {
        const common = { input: step.input, output: step.output, sums, slots: step.tables.slots, batch: step.batch, width, maxSeqs };
        const cfg = { grid: 1, block: 1, stream: step.stream };
        if (step.phase === 'verify' && !leaky) {
          step.gpu.launch(verifyKernel, cfg, { ...common, stash, k: step.k, stashStride: stashSeqFloats });
        } else {
          step.gpu.launch(commitKernel, cfg, { ...common, rowStarts: step.tables.rowStarts });
        }
      },
      dispose: () => gpu.free(sums),
    };
    if (leaky) return layer;
    return {
      ...layer,
      gdnWoaStashSeqFloats: () => stashSeqFloats,
      gdnWoaBind: (_flag: DevicePtr, ptr: DevicePtr) => {
        stash = ptr;
      },
      gdnFoldAccepted(g, slotTable, naTab, kRows, n, stream) {
        g.launch(foldKernel, { grid: 1, block: 1, stream }, { sums, stash, slotTable, naTab, n, k: kRows, stashStride: stashSeqFloats, width, maxSeqs });
        return true;
      },
    };
  },
});
