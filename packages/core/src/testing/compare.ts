import { isDeepStrictEqual } from 'node:util';

/** ‖a − b‖₂ / ‖b‖₂ (or ‖a − b‖₂ when b is all zeros); NaN anywhere gives NaN. */
export function relativeError(a: Float32Array, b: Float32Array): number {
  if (a.length !== b.length) return Number.POSITIVE_INFINITY;
  let num = 0;
  let den = 0;
  for (let i = 0; i < a.length; i++) {
    const d = a[i]! - b[i]!;
    num += d * d;
    den += b[i]! * b[i]!;
  }
  if (Number.isNaN(num) || Number.isNaN(den)) return Number.NaN;
  return den > 0 ? Math.sqrt(num / den) : Math.sqrt(num);
}

/** True when `rel` is a number within tolerance (NaN never passes). */
export function withinTolerance(rel: number, tolerance: number): boolean {
  return !Number.isNaN(rel) && rel <= tolerance;
}

/** Plain-data comparison of host bookkeeping; bigints and typed arrays compare by value. */
export function sameSnapshot(a: unknown, b: unknown): boolean {
  return isDeepStrictEqual(a, b);
}

/** A short printable form of a snapshot for failure messages. */
export function describeSnapshot(value: unknown): string {
  const text = JSON.stringify(value, (_k, v) => (typeof v === 'bigint' ? `${v}n` : ArrayBuffer.isView(v) ? Array.from(v as unknown as ArrayLike<number>) : v));
  return text === undefined ? 'undefined' : text.length > 300 ? `${text.slice(0, 300)}…` : text;
}
