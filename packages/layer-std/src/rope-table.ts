import type { DevicePtr, GpuBackend } from '@metrale/core';

/**
 * cos and sin of every (position, frequency) pair, f32 [positions][rotaryDim / 2], computed the
 * way transformers' default RoPE computes them: inv_freq = 1 / θ^(2i / dim) in f32, the angle as
 * one f32 product inv_freq · position, cos and sin rounded to f32 (HF forces f32 here even when the
 * model runs in f64), so positions far into a sequence round as in the reference.
 */
export function ropeTable(positions: number, rotaryDim: number, theta: number): { cos: Float32Array; sin: Float32Array } {
  const half = rotaryDim / 2;
  const f = Math.fround;
  const invFreq = Float32Array.from({ length: half }, (_, i) => f(1 / f(theta ** f((2 * i) / rotaryDim))));
  const cos = new Float32Array(positions * half);
  const sin = new Float32Array(positions * half);
  for (let p = 0; p < positions; p++) {
    for (let i = 0; i < half; i++) {
      const angle = f(invFreq[i]! * p);
      cos[p * half + i] = Math.cos(angle);
      sin[p * half + i] = Math.sin(angle);
    }
  }
  return { cos, sin };
}

/** A device copy of a RoPE table that several layers read; `release` once per `acquireRopeTable`. */
export interface SharedRopeTable {
  readonly cos: DevicePtr;
  readonly sin: DevicePtr;
  release(): void;
}

interface Entry {
  readonly cos: DevicePtr;
  readonly sin: DevicePtr;
  refs: number;
}

const tables = new WeakMap<GpuBackend, Map<string, Entry>>();

/**
 * The device table for (positions, rotaryDim, theta) on `gpu`, uploaded by the first layer that
 * asks and freed when the last one releases it. Every attention layer of a model asks for the same
 * one; at a long context (262 144 positions, rotary 64: 64 MiB) one copy instead of one per layer.
 */
export function acquireRopeTable(gpu: GpuBackend, positions: number, rotaryDim: number, theta: number): SharedRopeTable {
  let byKey = tables.get(gpu);
  if (!byKey) tables.set(gpu, (byKey = new Map()));
  const key = `${positions}/${rotaryDim}/${theta}`;
  let entry = byKey.get(key);
  if (!entry) {
    const { cos, sin } = ropeTable(positions, rotaryDim, theta);
    const c = gpu.alloc(Math.max(4, cos.byteLength));
    let s: DevicePtr | undefined;
    try {
      s = gpu.alloc(Math.max(4, sin.byteLength));
      gpu.upload(c, cos);
      gpu.upload(s, sin);
    } catch (error) {
      gpu.free(c);
      if (s !== undefined) gpu.free(s);
      throw error;
    }
    entry = { cos: c, sin: s, refs: 0 };
    byKey.set(key, entry);
  }
  entry.refs++;
  const e = entry;
  let released = false;
  return {
    cos: e.cos,
    sin: e.sin,
    release() {
      if (released) return;
      released = true;
      if (--e.refs > 0) return;
      byKey!.delete(key);
      gpu.free(e.cos);
      gpu.free(e.sin);
    },
  };
}
