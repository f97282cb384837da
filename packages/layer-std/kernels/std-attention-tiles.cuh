// The pieces of flash attention on mma.sync shared by std-attention-prefill.cu and
// std-attention-decode.cu: the Q tile's load and the cp.async gather of K and V rows into their
// padded shared layout (rows of D + 8 elements), S = Q Kᵀ of a warp's m16 rows, an m16 tile's online
// softmax per key tile (a quad's two rows), O += P V, and the gated store of an output pair. The
// kernels differ in tile heights and in who fills a buffer (a warp its own ring, or the CTA).
#pragma once
#include "std-common.cuh"
#include "std-mma.cuh"

namespace stdk {

__device__ __forceinline__ uint32_t smem_word(const void* p) { return *reinterpret_cast<const uint32_t*>(p); }

/**
 * A Q tile of ROWS rows into shared memory (rows of D + 8 elements) by the CTA's THREADS threads:
 * row r < count from row(r), zeros past count and past d. row(r) keeps each kernel's own address
 * arithmetic: a common stride cost the prefill kernel registers.
 */
template <int ROWS, int D, int THREADS, typename T, typename Row>
__device__ __forceinline__ void load_q_tile(T* Qs, int count, int d, Row&& row) {
  constexpr int LD = D + 8;
  constexpr int C8 = D / 8;  // 16-byte pieces of a shared row
  for (int i = threadIdx.x; i < ROWS * C8; i += THREADS) {
    const int r = i / C8, c = (i - r * C8) * 8;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (r < count && c < d) v = *reinterpret_cast<const uint4*>(row(r) + c);
    *reinterpret_cast<uint4*>(Qs + r * LD + c) = v;
  }
}

/**
 * Keys k0 … k0 + KEYS − 1 of a run of `len` keys from key `base` of kv head kvh, gathered from their
 * pages by cp.async: K rows at Kb, then V rows (rows of D + 8 elements), zeros past the run and past
 * d. The 16-byte pieces go to threads first, first + STEP, … (a warp's lanes for its own buffer, else
 * the CTA's).
 */
template <int KEYS, int D, int STEP, typename T>
__device__ __forceinline__ void gather_keys(T* Kb, int first, const T* __restrict__ kCache, const T* __restrict__ vCache,
                                            const int32_t* __restrict__ table, int pageSize, int kvHeads, int kvh, int d, int base, int len, int k0) {
  constexpr int LD = D + 8;
  constexpr int C8 = D / 8;
  for (int i = first; i < KEYS * C8; i += STEP) {
    const int r = i / C8, c = (i - r * C8) * 8;
    const int k = k0 + r;
    const bool valid = k < len && c < d;
    const size_t off = valid ? cache_offset(table, pageSize, kvHeads, d, base + k, kvh) + c : 0;
    cp_async16(Kb + r * LD + c, kCache + off, valid);
    cp_async16(Kb + KEYS * LD + r * LD + c, vCache + off, valid);
  }
}

/**
 * S = Q Kᵀ on mma.sync for a warp's m16 rows of a Q tile (Qw: its first row) and J n8 tiles of keys
 * at Ks, both in rows of D + 8 elements; k16 steps past d are skipped.
 */
template <typename T, int D, int J>
__device__ __forceinline__ void qk_tile(float (&s)[J][4], const T* Qw, const T* Ks, int d, int g, int tig) {
  constexpr int LD = D + 8;
#pragma unroll
  for (int j = 0; j < J; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < D / 16; kk++) {
    if (kk * 16 >= d) break;
    const T* qa = Qw + g * LD + kk * 16 + 2 * tig;
    const uint32_t a[4] = {smem_word(qa), smem_word(qa + 8 * LD), smem_word(qa + 8), smem_word(qa + 8 * LD + 8)};
#pragma unroll
    for (int j = 0; j < J; j++) {
      const T* kb = Ks + (j * 8 + g) * LD + kk * 16 + 2 * tig;
      mma16816<T>(s[j], a, smem_word(kb), smem_word(kb + 8));
    }
  }
}

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

/**
 * O += P V on mma.sync: P from the J n8 tiles of e^(s − m) (rounded to T, two tiles a k16 step),
 * V's fragments from its rows at Vs (rows of D + 8 elements) by ldmatrix .trans; columns past d
 * are skipped.
 */
template <typename T, int D, int J>
__device__ __forceinline__ void pv_tile(float (&acc)[D / 8][4], const float (&s)[J][4], const T* Vs, int d, int lane) {
  constexpr int LD = D + 8;
#pragma unroll
  for (int kk = 0; kk < J / 2; kk++) {
    uint32_t a[4];
    p_fragment<T>(a, s, kk);
    const T* vrow = Vs + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + (lane >> 4) * 8;
#pragma unroll
    for (int n = 0; n < D / 16; n++) {
      if (n * 16 >= d) break;
      uint32_t b[4];
      ldmatrix_x4_trans(b, vrow + n * 16);
      mma16816<T>(acc[2 * n], a, b[0], b[1]);
      mma16816<T>(acc[2 * n + 1], a, b[2], b[3]);
    }
  }
}

}  // namespace stdk
