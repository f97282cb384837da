// The kernels of kernels/backend-test.cu, for this package's tests and benchmark: each with its
// CUDA entry and a CPU implementation of the same computation, so the same tests can run on the
// CPU reference backend.
import { defineKernel, defineKernelModule } from '@metrale/core';

// '../dist/kernels/…' resolves to the package's dist/kernels both from src/ (tests) and from
// dist/index.js (the bundle), since both sit one level below the package root.
const backendTestModule = defineKernelModule('backend-test', new URL('../dist/kernels/backend-test.fatbin', import.meta.url));

const cuda = (symbol: string) => ({ module: backendTestModule, symbol });

const vectorAddF32 = defineKernel({
  name: 'backend-test.vector_add_f32',
  params: { a: 'ptr', b: 'ptr', out: 'ptr', n: 'u32' },
  cuda: cuda('vector_add_f32'),
  cpu: ({ a, b, out, n }, { mem }) => {
    const x = mem.f32(a, n), y = mem.f32(b, n), z = mem.f32(out, n);
    for (let i = 0; i < n; i++) z[i] = x[i]! + y[i]!;
  },
});

const fillU32 = defineKernel({
  name: 'backend-test.fill_u32',
  params: { dst: 'ptr', value: 'u32', n: 'u32' },
  cuda: cuda('fill_u32'),
  cpu: ({ dst, value, n }, { mem }) => mem.u32(dst, n).fill(value),
});

const scaleInplaceF32 = defineKernel({
  name: 'backend-test.scale_inplace_f32',
  params: { x: 'ptr', scale: 'f32', n: 'u32' },
  cuda: cuda('scale_inplace_f32'),
  cpu: ({ x, scale, n }, { mem }) => {
    const v = mem.f32(x, n);
    const s = Math.fround(scale);
    for (let i = 0; i < n; i++) v[i] = v[i]! * s;
  },
});

const noop = defineKernel({
  name: 'backend-test.noop',
  params: {},
  cuda: cuda('noop'),
  cpu: () => {},
});

/** Writes each argument back as a 64-bit word: out[0..6] = a, c, bits(e), bits(f), b, d, g. */
const paramsProbe = defineKernel({
  name: 'backend-test.params_probe',
  params: { out: 'ptr', a: 'i32', c: 'i64', e: 'f32', f: 'f64', b: 'u32', d: 'u64', g: 'i32' },
  cuda: cuda('params_probe'),
  cpu: ({ out, a, c, e, f, b, d, g }, { mem }) => {
    const words = mem.u64(out, 7);
    const scratch = new DataView(new ArrayBuffer(8));
    words[0] = BigInt.asUintN(64, BigInt(a));
    words[1] = BigInt.asUintN(64, c);
    scratch.setFloat32(0, e, true);
    words[2] = BigInt(scratch.getUint32(0, true));
    scratch.setFloat64(0, f, true);
    words[3] = scratch.getBigUint64(0, true);
    words[4] = BigInt(b);
    words[5] = d;
    words[6] = BigInt.asUintN(64, BigInt(g));
  },
});

/** One block; needs n * 4 bytes of dynamic shared memory. */
const sharedReverseF32 = defineKernel({
  name: 'backend-test.shared_reverse_f32',
  params: { src: 'ptr', dst: 'ptr', n: 'u32' },
  cuda: cuda('shared_reverse_f32'),
  cpu: ({ src, dst, n }, { mem, sharedBytes }) => {
    if (sharedBytes < n * 4) throw new RangeError(`shared_reverse_f32 needs ${n * 4} bytes of shared memory, got ${sharedBytes}`);
    const s = mem.f32(src, n).slice(), d = mem.f32(dst, n);
    for (let i = 0; i < n; i++) d[i] = s[n - 1 - i]!;
  },
});

/** acc = acc * mul + src (mod 2^32). */
const accumulateU32 = defineKernel({
  name: 'backend-test.accumulate_u32',
  params: { acc: 'ptr', src: 'ptr', mul: 'u32', n: 'u32' },
  cuda: cuda('accumulate_u32'),
  cpu: ({ acc, src, mul, n }, { mem }) => {
    const a = mem.u32(acc, n), s = mem.u32(src, n);
    for (let i = 0; i < n; i++) a[i] = (Math.imul(a[i]!, mul) + s[i]!) >>> 0;
  },
});

/** x = xorshift32(x). */
const xorshiftU32 = defineKernel({
  name: 'backend-test.xorshift_u32',
  params: { x: 'ptr', n: 'u32' },
  cuda: cuda('xorshift_u32'),
  cpu: ({ x, n }, { mem }) => {
    const v = mem.u32(x, n);
    for (let i = 0; i < n; i++) v[i] = xorshift32(v[i]!);
  },
});

/** dst = src once the previous kernel on the stream has finished (it waits for it: launch it with earlyStart). */
const copyAfterU32 = defineKernel({
  name: 'backend-test.copy_after_u32',
  params: { dst: 'ptr', src: 'ptr', n: 'u32' },
  cuda: cuda('copy_after_u32'),
  cpu: ({ dst, src, n }, { mem }) => mem.u32(dst, n).set(mem.u32(src, n)),
  earlyStart: 'wait-first',
});

/**
 * sink[b] = the xor of the 32-bit words CTA b reads of src's n4 16-byte words (grid-stride, at
 * most 256 threads a CTA); waits for the kernel ahead and lets the next start early. For the
 * kernel-chain benchmark: a decode step's bytes read by many kernels.
 */
const readXorU32 = defineKernel({
  name: 'backend-test.read_xor_u32',
  params: { src: 'ptr', sink: 'ptr', n4: 'u32' },
  cuda: cuda('read_xor_u32'),
  cpu: ({ src, sink, n4 }, { mem, grid, block }) => {
    const [ctas] = grid;
    const [threads] = block;
    const words = mem.u32(src, 4 * n4);
    const out = mem.u32(sink, ctas);
    out.fill(0);
    for (let i = 0; i < n4; i++) {
      const cta = Math.floor((i % (ctas * threads)) / threads);
      out[cta] = (out[cta]! ^ words[4 * i]! ^ words[4 * i + 1]! ^ words[4 * i + 2]! ^ words[4 * i + 3]!) >>> 0;
    }
  },
  earlyStart: 'wait-first',
});

/** What read_xor_ahead_u32 starts before its wait: nothing, its first loads into registers, its whole share into L2 (kernels/backend-test.cu). */
export const READ_AHEAD_MODES = { none: 0, registers: 1, l2: 2 } as const;

/**
 * sink[b] = the xor of the 32-bit words of CTA b's contiguous share of src's n4 16-byte words
 * (⌈n4 / grid⌉ words a CTA, at most 256 threads a CTA); what it starts before it waits for the
 * kernel ahead is `ahead` (READ_AHEAD_MODES), which changes no result. For the kernel-chain
 * benchmark: a decode kernel streaming its weights while the kernel ahead still runs.
 */
const readXorAheadU32 = defineKernel({
  name: 'backend-test.read_xor_ahead_u32',
  params: { src: 'ptr', sink: 'ptr', n4: 'u32', ahead: 'i32' },
  cuda: cuda('read_xor_ahead_u32'),
  cpu: ({ src, sink, n4 }, { mem, grid }) => {
    const [ctas] = grid;
    const words = mem.u32(src, 4 * n4);
    const out = mem.u32(sink, ctas);
    const per = Math.ceil(n4 / ctas);
    for (let b = 0; b < ctas; b++) {
      let acc = 0;
      for (let i = b * per; i < Math.min(n4, (b + 1) * per); i++) acc = (acc ^ words[4 * i]! ^ words[4 * i + 1]! ^ words[4 * i + 2]! ^ words[4 * i + 3]!) >>> 0;
      out[b] = acc;
    }
  },
  earlyStart: 'wait-first',
});

/** Waits for the kernel ahead, then spins `cycles` SM clocks on one thread and stores the clocks spun in sink[0] (on the CPU: `cycles`). For the kernel-chain benchmark: serial work that moves no bytes. */
const spinCycles = defineKernel({
  name: 'backend-test.spin_cycles',
  params: { sink: 'ptr', cycles: 'u32' },
  cuda: cuda('spin_cycles'),
  cpu: ({ sink, cycles }, { mem }) => {
    mem.u32(sink, 1)[0] = cycles;
  },
  earlyStart: 'wait-first',
});

/** The xorshift32 step of xorshift_u32, for host-side expectations. */
export function xorshift32(value: number): number {
  let v = value >>> 0;
  v = (v ^ (v << 13)) >>> 0;
  v = (v ^ (v >>> 17)) >>> 0;
  v = (v ^ (v << 5)) >>> 0;
  return v;
}

export const testKernels = Object.freeze({
  module: backendTestModule,
  vectorAddF32,
  fillU32,
  scaleInplaceF32,
  noop,
  paramsProbe,
  sharedReverseF32,
  accumulateU32,
  xorshiftU32,
  copyAfterU32,
  readXorU32,
  readXorAheadU32,
  spinCycles,
});
