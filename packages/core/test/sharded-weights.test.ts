// shardWeights: the view of a checkpoint one tensor-parallel rank reads. Each rank's part must be
// the slice of the whole tensor the rule names (row runs, column runs, fused runs, FP8 block
// scales with their weight), the ranks' parts must tile the tensor, a first-axis part must be read
// as byte ranges only, and every split that cannot be made is a WeightsError naming the tensor.
import { describe, expect, it } from 'vitest';
import {
  MemoryWeightSource, ParallelConfigError, SeededRandom, WeightsError, shardWeights, splitEvenly, tensorOf, toF32,
  type HostTensor, type ShardRule, type WeightSource,
} from '../src/index.js';

const random = new SeededRandom(11);
const q = tensorOf('layer.q_proj.weight', random.normals(8 * 3), [8, 3]);
const o = tensorOf('layer.o_proj.weight', random.normals(3 * 8), [3, 8]);
const conv = tensorOf('layer.conv1d.weight', random.normals(12 * 2), [12, 1, 2]);
const fused = tensorOf('experts.gate_up_proj', random.normals(2 * 8 * 3), [2, 8, 3]);
const norm = tensorOf('layer.norm.weight', random.normals(3), [3]);
const tensors = [q, o, conv, fused, norm];

const rule: ShardRule = (name) => {
  if (name.endsWith('q_proj.weight')) return { axis: 0 };
  if (name.endsWith('o_proj.weight')) return { axis: 1 };
  if (name.endsWith('conv1d.weight')) return { axis: 0, segments: [4, 4, 4] };
  if (name === 'experts.gate_up_proj') return { axis: 1, runs: 2 };
  return undefined;
};

/** Element [i, j] (or [i, 0, j], [e, i, j]) of a tensor as f32, by flat strides. */
const values = (t: HostTensor) => toF32(t);

/** The slice of `t` along `axis` made of `ranges` ([start, length)), as the view must return it. */
function slice(t: HostTensor, axis: number, ranges: readonly [number, number][]): Float32Array {
  const v = values(t);
  const outer = t.shape.slice(0, axis).reduce((a, b) => a * b, 1);
  const inner = t.shape.slice(axis + 1).reduce((a, b) => a * b, 1);
  const len = t.shape[axis]!;
  const out: number[] = [];
  for (let a = 0; a < outer; a++) for (const [s, n] of ranges) for (let i = s; i < s + n; i++) out.push(...v.subarray((a * len + i) * inner, (a * len + i + 1) * inner));
  return Float32Array.from(out);
}

describe('shardWeights: one rank’s part of each tensor', () => {
  const source = new MemoryWeightSource('mem', tensors);

  it.each([2, 4])('size %i: rows, columns, runs and fused runs, as the rule says; the rest whole', (size) => {
    for (let rank = 0; rank < size; rank++) {
      const view = shardWeights(source, rule, rank, size);
      const qp = view.get('layer.q_proj.weight');
      expect(qp.shape).toEqual([8 / size, 3]);
      expect(values(qp)).toEqual(slice(q, 0, [[rank * 8 / size, 8 / size]]));
      expect(values(view.get('layer.o_proj.weight'))).toEqual(slice(o, 1, [[rank * 8 / size, 8 / size]]));
      const c = view.get('layer.conv1d.weight');
      expect(c.shape).toEqual([12 / size, 1, 2]);
      const p = 4 / size;
      expect(values(c)).toEqual(slice(conv, 0, [[rank * p, p], [4 + rank * p, p], [8 + rank * p, p]]));
      const f = view.get('experts.gate_up_proj');
      expect(f.shape).toEqual([2, 8 / size, 3]);
      expect(values(f)).toEqual(slice(fused, 1, [[rank * 4 / size, 4 / size], [4 + rank * 4 / size, 4 / size]]));
      expect(view.get('layer.norm.weight')).toBe(norm);
    }
  });

  it('maxParts: with more ranks than parts, consecutive ranks share one part (KV heads kept whole); at or under it, one part per rank', () => {
    const kv: ShardRule = (name) => (name.endsWith('q_proj.weight') ? { axis: 0, maxParts: 2 } : undefined);
    for (const size of [4, 8]) {
      for (let rank = 0; rank < size; rank++) {
        const part = Math.floor((rank * 2) / size);
        const got = shardWeights(source, kv, rank, size).get('layer.q_proj.weight');
        expect(got.shape).toEqual([4, 3]);
        expect(values(got), `rank ${rank} of ${size}`).toEqual(slice(q, 0, [[part * 4, 4]]));
      }
    }
    for (let rank = 0; rank < 2; rank++) expect(values(shardWeights(source, kv, rank, 2).get('layer.q_proj.weight'))).toEqual(slice(q, 0, [[rank * 4, 4]]));
    expect(() => shardWeights(source, (n) => (n.endsWith('q_proj.weight') ? { axis: 0, maxParts: 4 } : undefined), 0, 6).get('layer.q_proj.weight'))
      .toThrow(/'layer\.q_proj\.weight' has 4 parts to share among 6 ranks; the tensor-parallel size must be a multiple of 4/);
  });

  it('size 1 is the source itself', () => {
    expect(shardWeights(source, rule, 0, 1)).toBe(source);
  });

  it('reads a first-axis part as byte ranges of the file only, and other axes from one whole read', () => {
    const reads: string[] = [];
    const ranged: WeightSource = {
      origin: 'ranged',
      names: () => source.names(),
      has: (n) => source.has(n),
      info: (n) => source.get(n),
      get: (n) => {
        reads.push(`get ${n}`);
        return source.get(n);
      },
      readRange: (n, off, len, into) => {
        reads.push(`range ${n} ${off} ${len}`);
        const out = into ?? new Uint8Array(len);
        out.set(source.get(n).data.subarray(off, off + len));
        return out.subarray(0, len);
      },
    };
    const view = shardWeights(ranged, rule, 1, 2);
    expect(values(view.get('layer.conv1d.weight'))).toEqual(slice(conv, 0, [[2, 2], [6, 2], [10, 2]]));
    expect(reads).toEqual(['range layer.conv1d.weight 16 16', 'range layer.conv1d.weight 48 16', 'range layer.conv1d.weight 80 16']);
    reads.length = 0;
    view.get('layer.o_proj.weight');
    expect(reads).toEqual(['get layer.o_proj.weight']);
  });

  it("splits an FP8 weight's block scales with it, in whole 128-blocks, and refuses parts that are not", () => {
    const codes = tensorOf('w', new Float32Array(512 * 128), [512, 128]);
    const fp8 = { ...codes, dtype: 'f8e4m3' as const, data: new Uint8Array(512 * 128).fill(0x38) };
    const scales = tensorOf('w_scale_inv', Float32Array.from([1, 2, 3, 4]), [4, 1]);
    const src = new MemoryWeightSource('fp8', [fp8, scales]);
    const rows: ShardRule = (n) => (n === 'w' ? { axis: 0 } : undefined);
    for (let rank = 0; rank < 2; rank++) {
      const view = shardWeights(src, rows, rank, 2);
      expect(view.get('w').shape).toEqual([256, 128]);
      expect(Array.from(values(view.get('w_scale_inv')))).toEqual(rank === 0 ? [1, 2] : [3, 4]);
    }
    expect(() => shardWeights(src, rows, 0, 8).get('w_scale_inv')).toThrow(/FP8 tensor 'w': a run of 512 along dimension 0 split 8 ways is not whole 128-blocks/);
  });

  it('refuses a split the tensor does not allow, naming it', () => {
    const bad: ShardRule = (n) => (n === 'layer.q_proj.weight' ? { axis: 0, segments: [5, 3] } : n === 'layer.norm.weight' ? { axis: 1 } : undefined);
    expect(() => shardWeights(source, rule, 0, 3).get('layer.q_proj.weight')).toThrow(/'layer\.q_proj\.weight' \(shape \[8, 3\]\): a run of 8 along dimension 0 does not split into 3 equal parts/);
    expect(() => shardWeights(source, bad, 0, 2).get('layer.q_proj.weight')).toThrow(WeightsError);
    expect(() => shardWeights(source, bad, 0, 2).get('layer.norm.weight')).toThrow(/no dimension 1 to split/);
  });
});

describe('splitEvenly', () => {
  it('divides, or names the field, the value and the sizes that divide it', () => {
    expect(splitEvenly(16, 4, 'config.num_attention_heads')).toBe(4);
    expect(() => splitEvenly(2, 4, 'config.num_key_value_heads')).toThrow(ParallelConfigError);
    expect(() => splitEvenly(6, 4, 'config.linear_num_key_heads')).toThrow('--tensor-parallel-size 4 does not divide config.linear_num_key_heads (6): every rank must hold the same share; use a size that divides it (1, 2, 3, 6)');
  });
});
