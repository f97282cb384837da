// Random device buffers for the layer-std benchmarks (std.bench.mjs, prefill.bench.mjs): a seeded
// xorshift generator, values encoded in a row or weight type, buffers filled from one uploaded
// block (never periodic zeros), and every allocation freed at once.
const MiB = 2 ** 20;
export const BYTES = { f32: 4, bf16: 2, f16: 2, f8e4m3: 1 };

export function deviceBuffers(gpu, core, stream) {
  const seed = { s: 0x2545f491 };
  const rand = () => {
    seed.s ^= seed.s << 13; seed.s ^= seed.s >>> 17; seed.s ^= seed.s << 5;
    return (seed.s >>> 0) / 2 ** 32;
  };
  const normals = (n, scale = 1) => Float32Array.from({ length: n }, () => scale * (rand() + rand() + rand() - 1.5) * 2 || 0.25 * scale);
  const allocs = [];
  const alloc = (bytes) => {
    const p = gpu.alloc(Math.max(4, bytes));
    allocs.push(p);
    return p;
  };
  const upload = (data) => {
    const p = alloc(data.byteLength);
    gpu.upload(p, data);
    return p;
  };
  /** Random values of type `dtype` on the host: f32 as is, bf16 / f16 encoded, FP8 random finite codes. */
  const encoded = (n, scale, dtype) => {
    if (dtype === 'f8e4m3') return Uint8Array.from({ length: n }, () => ((rand() * 0x7e) | 0) | (rand() < 0.5 ? 0x80 : 0));
    const v = normals(n, scale);
    return dtype === 'f32' ? v : dtype === 'bf16' ? core.toBf16(v) : core.toF16(v);
  };
  /** Random `count` elements of `dtype` (default f32): one random block uploaded, repeated on the device. */
  const randomBuffer = (count, scale = 1, dtype = 'f32') => {
    const bytes = BYTES[dtype];
    const p = alloc(bytes * count);
    const block = Math.min(count, 16 * MiB);
    gpu.upload(p, encoded(block, scale, dtype));
    for (let off = block; off < count; off += block) gpu.copyDeviceAsync(p + BigInt(bytes * off), p, bytes * Math.min(block, count - off), stream);
    gpu.synchronize(stream);
    return p;
  };
  /** Frees the allocations made after the first `keep` (all by default). */
  const freeFrom = (keep = 0) => {
    gpu.synchronize();
    for (const p of allocs.splice(keep)) gpu.free(p);
  };
  return { rand, normals, alloc, upload, encoded, randomBuffer, allocs, freeFrom };
}
