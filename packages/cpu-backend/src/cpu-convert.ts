import {
  InvalidArgumentError, bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits, floatBytes, type ConvertArgs, type FloatDtype,
} from '@metrale/core';
import type { MemoryArena } from './memory-arena.js';

const DTYPES = new Set(['f32', 'bf16', 'f16']);

/** Validates a conversion's types and count, and that both ranges are live allocations. */
export function checkConvert(arena: MemoryArena, call: string, a: ConvertArgs): void {
  for (const [name, dt] of [['srcDtype', a.srcDtype], ['dstDtype', a.dstDtype]] as const) {
    if (!DTYPES.has(dt)) throw new InvalidArgumentError(`${call}: ${name} must be 'f32', 'bf16' or 'f16', got ${String(dt)}`);
  }
  if (!Number.isSafeInteger(a.count) || a.count < 0) throw new InvalidArgumentError(`${call}: count must be a non-negative integer, got ${a.count}`);
  const srcBytes = a.count * floatBytes(a.srcDtype), dstBytes = a.count * floatBytes(a.dstDtype);
  arena.check(`${call} (src)`, a.src, srcBytes);
  arena.check(`${call} (dst)`, a.dst, dstBytes);
  if (a.count > 0 && a.src < a.dst + BigInt(dstBytes) && a.dst < a.src + BigInt(srcBytes)) {
    throw new InvalidArgumentError(`${call}: src and dst overlap; convert into another buffer`);
  }
}

function read(arena: MemoryArena, call: string, ptr: bigint, count: number, dtype: FloatDtype): Float32Array {
  if (dtype === 'f32') return arena.typed(call, ptr, count, Float32Array).slice();
  const bits = arena.typed(call, ptr, count, Uint16Array);
  const decode = dtype === 'bf16' ? bf16BitsToF32 : f16BitsToF32;
  return Float32Array.from(bits, (b) => decode(b));
}

/** dst = src converted, rounding to nearest even. */
export function runConvert(arena: MemoryArena, call: string, a: ConvertArgs): void {
  if (a.count === 0) return;
  const values = read(arena, `${call} (src)`, a.src, a.count, a.srcDtype);
  if (a.dstDtype === 'f32') {
    arena.typed(`${call} (dst)`, a.dst, a.count, Float32Array).set(values);
    return;
  }
  const out = arena.typed(`${call} (dst)`, a.dst, a.count, Uint16Array);
  const encode = a.dstDtype === 'bf16' ? f32ToBf16Bits : f32ToF16Bits;
  for (let i = 0; i < a.count; i++) out[i] = encode(values[i]!);
}
