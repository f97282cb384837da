// The bare patterns of the GDN state passes, with no GDN math: how fast one head's state (d_k × d_v
// = 128 × 128 f32, 64 KiB) can be read, or read and written back in place, by a CTA of 256 threads
// in the decode state kernel's layout (thread (warp w, lane l): rows 16w .. 16w + 15, columns
// 4l .. 4l + 3; all of a thread's loads issued before its stores). gdn-state-ceilings.cu makes
// them the ceilings gdn.bench.mjs measures the layer's kernels against in the same run;
// rmw-ceiling.cu times them beside other patterns.
#pragma once

namespace gdn_ceiling {

constexpr int kHeadFloats = 128 * 128;
constexpr int kThreads = 256;

__device__ __forceinline__ float4 step(float4 v) {
  return make_float4(fmaf(v.x, 0.999f, 1e-3f), fmaf(v.y, 0.999f, 1e-3f), fmaf(v.z, 0.999f, 1e-3f), fmaf(v.w, 0.999f, 1e-3f));
}
__device__ __forceinline__ float sum4(float4 v) { return (v.x + v.y) + (v.z + v.w); }

/** h ← 0.999 h + 1e-3 in place (a decode step's read + write of the head). */
__device__ __forceinline__ void rmw_head(float4* h) {
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  float4 v[16];
#pragma unroll
  for (int r = 0; r < 16; ++r) v[r] = h[(16 * w + r) * 32 + l];
  __syncthreads();
#pragma unroll
  for (int r = 0; r < 16; ++r) h[(16 * w + r) * 32 + l] = step(v[r]);
}

/** Reads the head (evict-first) and writes its sum to *out (a write-on-accept verify's read of the head). */
__device__ __forceinline__ void read_head(const float4* h, float* out) {
  __shared__ float part[8];
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  float4 v[16];
#pragma unroll
  for (int r = 0; r < 16; ++r) v[r] = __ldcs(h + (16 * w + r) * 32 + l);
  float acc = 0.0f;
#pragma unroll
  for (int r = 0; r < 16; ++r) acc += sum4(v[r]);
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, m);
  if (l == 0) part[w] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    float tot = 0.0f;
#pragma unroll
    for (int q = 0; q < 8; ++q) tot += part[q];
    *out = tot;
  }
}

}  // namespace gdn_ceiling
