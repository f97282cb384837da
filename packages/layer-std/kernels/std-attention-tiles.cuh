// The pieces of flash attention on mma.sync shared by std-attention-prefill.cu and
// std-attention-decode.cu: an m16 tile's online softmax per key tile (a quad's two rows), the P
// fragment of P·V, and the gated store of an output pair.
#pragma once
#include "std-common.cuh"
#include "std-mma.cuh"

namespace stdk {

__device__ __forceinline__ uint32_t smem_word(const void* p) { return *reinterpret_cast<const uint32_t*>(p); }

/**
 * The online softmax of one key tile for a quad's rows r0 and r1 (positions pos0 / pos1, windows from
 * lo0 / lo1), in base 2: s holds the tile's scores as n8 tiles (keys k0 + 8j + 2·tig, + 1; elements
 * 2 and 3 are row r1's). Masks, scales, takes the new running maxima, turns s into e^(s − m) and
 * returns each row's factor for what was accumulated before.
 */
struct RowPair {
  int pos0, pos1, lo0, lo1;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;

  template <int J>
  __device__ __forceinline__ void softmax_tile(float (&s)[J][4], int k0, int tig, float scale2, float& c0, float& c1) {
    float x0 = m0, x1 = m1;
#pragma unroll
    for (int j = 0; j < J; j++) {
      const int t = k0 + j * 8 + 2 * tig;
      s[j][0] = t >= lo0 && t <= pos0 ? s[j][0] * scale2 : -INFINITY;
      s[j][1] = t + 1 >= lo0 && t + 1 <= pos0 ? s[j][1] * scale2 : -INFINITY;
      s[j][2] = t >= lo1 && t <= pos1 ? s[j][2] * scale2 : -INFINITY;
      s[j][3] = t + 1 >= lo1 && t + 1 <= pos1 ? s[j][3] * scale2 : -INFINITY;
      x0 = fmaxf(x0, fmaxf(s[j][0], s[j][1]));
      x1 = fmaxf(x1, fmaxf(s[j][2], s[j][3]));
    }
    // The four lanes of a quad share rows r0 and r1.
#pragma unroll
    for (int o = 1; o <= 2; o <<= 1) {
      x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, o));
      x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, o));
    }
    const float b0 = x0 == -INFINITY ? 0.f : x0, b1 = x1 == -INFINITY ? 0.f : x1;
    c0 = exp2f(m0 - b0), c1 = exp2f(m1 - b1);  // 0 while a row has seen no key
    m0 = x0, m1 = x1;
    l0 *= c0, l1 *= c1;
#pragma unroll
    for (int j = 0; j < J; j++) {
      s[j][0] = exp2f(s[j][0] - b0), s[j][1] = exp2f(s[j][1] - b0);
      s[j][2] = exp2f(s[j][2] - b1), s[j][3] = exp2f(s[j][3] - b1);
      l0 += s[j][0] + s[j][1];
      l1 += s[j][2] + s[j][3];
    }
  }

  /** 1 / l of each row (summed over the quad), 0 for a row that saw no key. */
  __device__ __forceinline__ void finish(float& inv0, float& inv1) {
#pragma unroll
    for (int o = 1; o <= 2; o <<= 1) {
      l0 += __shfl_xor_sync(0xffffffffu, l0, o);
      l1 += __shfl_xor_sync(0xffffffffu, l1, o);
    }
    inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
  }
};

/** Columns c, c + 1 of row `row`, head h of the output: v × inv × sigmoid(gate) when gated, rounded once. */
template <typename T>
__device__ __forceinline__ void store_pair(T* __restrict__ out, const T* __restrict__ qkv, int row, int h, int heads, int d, int c, int gated, int W,
                                           float v0, float v1) {
  if (gated) {
    const size_t gate = (size_t)row * W + (size_t)h * 2 * d + d + c;
    v0 *= sigmoid(ldg_value(qkv, gate));
    v1 *= sigmoid(ldg_value(qkv, gate + 1));
  }
  *reinterpret_cast<uint32_t*>(out + ((size_t)row * heads + h) * d + c) = pack2<T>(v0, v1);
}

/** The P fragment (A of the k16 step kk) from two n8 tiles of e^(s − m), rounded to T. */
template <typename T, int J>
__device__ __forceinline__ void p_fragment(uint32_t (&a)[4], const float (&s)[J][4], int kk) {
  a[0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]), a[1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
  a[2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]), a[3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

}  // namespace stdk
