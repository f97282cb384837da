// dsa_sparse_attn: absorbed MLA attention of every row and head over the row's selected tokens.
// Layouts and semantics: ../KERNELS.md; CPU twin: ../src/dsa-attn.cpu.ts (sparseAttnCpu).
//
//   logit_s = scale · qlat[r][h] · cache row (slot, s)  (lat values, paged),  p = softmax over s ∈ sel[r],
//   olat[r][h] = Σ_s p_s · c_s  (the first kvLora values of the cache row); zeros for no tokens.
//
// Launch (src/dsa-launch.ts sparseAttnLaunch): grid [4, rows], 256 threads.
//
// Fast path (sm_90 clusters; 64 heads, kvLora 512, rope 64 or 0; f32 or bf16 cache; dynamic
// shared memory sparseAttnLaunch gives it): the 4 CTAs of a row are one cluster, each takes a
// quarter of the row's selected tokens for all 64 heads — every gathered cache row is read from
// memory once, for all heads (FlashMLA-style) — and the quarters are combined through
// distributed shared memory. Per CTA: q (64 × lat) as bf16 in shared memory; the gathered rows
// stream through a 2-stage cp.async ring (bf16: 64 rows a tile, converted nowhere; f32: 32 rows a
// tile, converted to bf16 as the MMA fragments are built); S = Q·Kᵀ on tensor cores (8 warps:
// 2 head halves × 4 token quarters), an online softmax in f32 (exp2), P (bf16) through shared
// memory, O += P·V on tensor cores (each warp 64 heads × 64 of the 512 latent columns, f32
// accumulators in registers). Operands are rounded to bf16 (q, the f32 cache's values, p);
// accumulation, the softmax and the combine are f32. At the end each CTA publishes its running
// max and sum per head, scales its O, and CTA c sums columns [128c, 128c + 128) of the four.
// Generic path (any shape, and sm_80): CTA x takes heads x, x + 4, …: logits in shared memory,
// f32 throughout.
// olat is in the rows' type (FLOAT_DTYPE_CODE olatDtype): each value is rounded once where it is
// stored; qlat is f32.
#include "dsa-common.cuh"

namespace dsa {

constexpr int kSaThreads = 256;

/** Where the cache rows of a slot's tokens are (paged: KERNELS.md). */
struct Pages {
  const int32_t* blockTable;
  int pagesPerSeq, pageRows;
  __device__ __forceinline__ size_t row(int slot, int t) const { return paged_row(blockTable, pagesPerSeq, pageRows, slot, t); }
};
constexpr int kSaHeads = 64;
constexpr int kSaKL = 512;
constexpr int kSaOStride = kSaKL + 8;  // f32 row stride of the combine buffer

template <int LAT, bool F32>
struct SaCfg {
  static constexpr int EB = F32 ? 4 : 2;
  static constexpr int T = F32 ? 32 : 64;  // gathered rows per tile
  static constexpr int ROWB = LAT * EB;    // bytes of a cache row
  static constexpr int CHR = ROWB / 16;    // 16-byte chunks of a cache row
  static constexpr int TILEB = T * ROWB;
  static constexpr int TPR = kSaThreads / T;  // loader threads per gathered row
  static constexpr int QROWB = LAT * 2;
  static constexpr int QB = kSaHeads * QROWB;
  static constexpr int PROWB = T * 2;
  static constexpr int PB = kSaHeads * PROWB;
  static constexpr int KSQ = LAT / 16;  // k-steps of Q·Kᵀ
  static constexpr int NTW = T / 32;    // 8-token n-tiles per warp in Q·Kᵀ
  // Shared memory: Q | stage 0 | stage 1 | P | xmax (f32 [2][4][32], later the l partials) | alpha [64] | ML [2][64] | fac [64]
  static constexpr int OFF_STAGE = QB;
  static constexpr int OFF_P = QB + 2 * TILEB;
  static constexpr int OFF_XMAX = OFF_P + PB;
  static constexpr int OFF_ALPHA = OFF_XMAX + 2 * 4 * 32 * 4;
  static constexpr int OFF_ML = OFF_ALPHA + kSaHeads * 4;
  static constexpr int OFF_FAC = OFF_ML + 2 * kSaHeads * 4;
  static constexpr int BYTES = OFF_FAC + kSaHeads * 4;
  static_assert(kSaHeads * kSaOStride * 4 <= OFF_P, "the combine buffer reuses Q and the stages");
};

/** Four consecutive values into element i (a multiple of 4) of a row-typed buffer (FLOAT_DTYPE_CODE `code`). */
__device__ __forceinline__ void store4(void* base, size_t i, float4 v, int code) {
  if (code == metrale::kF32) {
    *reinterpret_cast<float4*>(static_cast<float*>(base) + i) = v;
  } else if (code == metrale::kBF16) {
    *reinterpret_cast<uint2*>(static_cast<uint16_t*>(base) + i) = make_uint2(pack_bf16x2(v.x, v.y), pack_bf16x2(v.z, v.w));
  } else {
    metrale::store_element(base, i, v.x, code);
    metrale::store_element(base, i + 1, v.y, code);
    metrale::store_element(base, i + 2, v.z, code);
    metrale::store_element(base, i + 3, v.w, code);
  }
}

__host__ __device__ constexpr int sa_fast_bytes(int lat, bool f32) {
  return lat == 576 ? (f32 ? SaCfg<576, true>::BYTES : SaCfg<576, false>::BYTES) : (f32 ? SaCfg<512, true>::BYTES : SaCfg<512, false>::BYTES);
}

/** Physical 16-byte chunk of logical chunk c in gathered row `tok` (XOR within aligned groups of 8). */
template <bool F32>
__device__ __forceinline__ int kv_chunk(int tok, int c) {
  const int x = F32 ? (((tok & 1) << 2) ^ (((tok >> 1) & 3) << 1)) : (tok & 7);
  return c ^ x;
}

#if DSA_HAS_CLUSTER
template <int LAT, bool F32>
__device__ __forceinline__ void attn_fast(const float* __restrict__ qlat, const uint8_t* __restrict__ kvCache, const int32_t* __restrict__ selRow,
                                          int n, void* __restrict__ olat, int olatDtype, int row, int slot, const Pages pg, float scale,
                                          uint8_t* smem) {
  using C = SaCfg<LAT, F32>;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int rank = Coop::rank();
  const int start = (int)(((long long)rank * n) >> 2), end = (int)(((long long)(rank + 1) * n) >> 2);
  const int count = end - start;
  const int tiles = (count + C::T - 1) / C::T;
  uint8_t* const Q = smem;
  uint8_t* const stage = smem + C::OFF_STAGE;
  uint8_t* const Pb = smem + C::OFF_P;
  float* const xmax = reinterpret_cast<float*>(smem + C::OFF_XMAX);
  float* const alphaS = reinterpret_cast<float*>(smem + C::OFF_ALPHA);
  float* const ML = reinterpret_cast<float*>(smem + C::OFF_ML);
  float* const fac = reinterpret_cast<float*>(smem + C::OFF_FAC);

  // Loader: thread → (gathered row tid / TPR, chunks tid % TPR + TPR·i).
  const int ltok = tid / C::TPR, lch0 = tid % C::TPR;
  auto load_tile = [&](int it, int s) {
    const int j = it * C::T + ltok;
    const bool ok = j < count;
    const int tok = ok ? selRow[start + j] : 0;
    const uint8_t* src = kvCache + pg.row(slot, tok) * C::ROWB;
    uint8_t* dst = stage + s * C::TILEB + ltok * C::ROWB;
#pragma unroll
    for (int i = 0; i < C::CHR / C::TPR; i++) {
      const int c = lch0 + C::TPR * i;
      cp_async16(smem_u32(dst + (kv_chunk<F32>(ltok, c) << 4)), src + c * 16, ok ? 16 : 0);
    }
  };
  if (tiles > 0) load_tile(0, 0);
  cp_async_commit();

  // q (f32) → bf16 in shared memory, rows = heads, chunks XOR (head & 7). The f32 variant stores
  // each 16-dim block permuted (logical k 2u, 2u+1, 2u+8, 2u+9 ← physical 4u … 4u+3) so that a K
  // fragment is one 16-byte load of 4 consecutive f32.
  const float* qrow = qlat + (size_t)row * kSaHeads * LAT;
#pragma unroll 4
  for (int e = tid; e < kSaHeads * LAT / 4; e += kSaThreads) {
    const int h = e / (LAT / 4), d = (e - h * (LAT / 4)) * 4;
    const float4 v = *reinterpret_cast<const float4*>(qrow + (size_t)h * LAT + d);
    uint8_t* qr = Q + h * C::QROWB;
    if constexpr (!F32) {
      const int ch = d >> 3;
      *reinterpret_cast<uint2*>(qr + ((ch ^ (h & 7)) << 4) + ((d >> 2) & 1) * 8) = make_uint2(pack_bf16x2(v.x, v.y), pack_bf16x2(v.z, v.w));
    } else {
      const int ks = d >> 4, u = (d >> 2) & 3;
      *reinterpret_cast<uint32_t*>(qr + (((2 * ks) ^ (h & 7)) << 4) + 4 * u) = pack_bf16x2(v.x, v.y);
      *reinterpret_cast<uint32_t*>(qr + (((2 * ks + 1) ^ (h & 7)) << 4) + 4 * u) = pack_bf16x2(v.z, v.w);
    }
  }

  const int hg = warp >> 2, tq = warp & 3;  // Q·Kᵀ role: heads 32hg…, tokens tq·T/4…
  const float sl2 = scale * 1.4426950408889634f;
  float mrun[2][2], lrun[2][2];
#pragma unroll
  for (int mi = 0; mi < 2; mi++)
#pragma unroll
    for (int e = 0; e < 2; e++) {
      mrun[mi][e] = -INFINITY;
      lrun[mi][e] = 0.f;
    }
  float o[4][8][4];
#pragma unroll
  for (int mi = 0; mi < 4; mi++)
#pragma unroll
    for (int nt = 0; nt < 8; nt++) o[mi][nt][0] = o[mi][nt][1] = o[mi][nt][2] = o[mi][nt][3] = 0.f;

  const uint32_t qU = smem_u32(Q), pU = smem_u32(Pb);
  for (int it = 0; it < tiles; it++) {
    cp_async_wait<0>();
    __syncthreads();  // tile `it` (and q) visible; the previous tile's P·V is done with its stage and P
    if (it + 1 < tiles) load_tile(it + 1, (it + 1) & 1);
    cp_async_commit();
    const uint8_t* st = stage + (it & 1) * C::TILEB;
    const uint32_t stU = smem_u32(st);

    // ---- S = Q·Kᵀ: 32 heads × T/4 tokens per warp ----
    float sacc[2][C::NTW][4];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
      for (int ni = 0; ni < C::NTW; ni++) sacc[mi][ni][0] = sacc[mi][ni][1] = sacc[mi][ni][2] = sacc[mi][ni][3] = 0.f;
    const int tokBase = tq * (C::T / 4);
#pragma unroll 2
    for (int ks = 0; ks < C::KSQ; ks++) {
      uint32_t a[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; mi++) {
        const int qrw = hg * 32 + mi * 16 + (lane & 15);
        const int ch = 2 * ks + (lane >> 4);
        ldmatrix_x4(qU + qrw * C::QROWB + ((ch ^ (qrw & 7)) << 4), a[mi][0], a[mi][1], a[mi][2], a[mi][3]);
      }
      uint32_t b[C::NTW][2];
      if constexpr (!F32) {
        const int tok = tokBase + (lane & 7) + ((lane >> 4) << 3);
        const int ch = 2 * ks + ((lane >> 3) & 1);
        uint32_t r0, r1, r2, r3;
        ldmatrix_x4(stU + tok * C::ROWB + (kv_chunk<F32>(tok, ch) << 4), r0, r1, r2, r3);
        b[0][0] = r0;
        b[0][1] = r1;
        b[1][0] = r2;
        b[1][1] = r3;
      } else {
        const int tok = tokBase + g;
        const float4 f = *reinterpret_cast<const float4*>(st + tok * C::ROWB + (kv_chunk<F32>(tok, 4 * ks + t) << 4));
        b[0][0] = pack_bf16x2(f.x, f.y);
        b[0][1] = pack_bf16x2(f.z, f.w);
      }
#pragma unroll
      for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < C::NTW; ni++) mma_bf16_16816(sacc[mi][ni], a[mi][0], a[mi][1], a[mi][2], a[mi][3], b[ni][0], b[ni][1]);
    }

    // ---- online softmax (log2 domain) over the tile, across the 4 token quarters ----
    const int valid = count - it * C::T;  // tokens of this tile: [0, valid)
    float mx[2][2];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
      for (int e = 0; e < 2; e++) {
        float m = -INFINITY;
#pragma unroll
        for (int ni = 0; ni < C::NTW; ni++)
#pragma unroll
          for (int c = 0; c < 2; c++) {
            const int tok = tokBase + ni * 8 + 2 * t + c;
            const float x = tok < valid ? sacc[mi][ni][2 * e + c] * sl2 : -INFINITY;
            sacc[mi][ni][2 * e + c] = x;
            m = fmaxf(m, x);
          }
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
        mx[mi][e] = m;
      }
    if (t == 0) {
#pragma unroll
      for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int e = 0; e < 2; e++) xmax[(hg * 4 + tq) * 32 + mi * 16 + e * 8 + g] = mx[mi][e];
    }
    named_barrier(1 + hg, 128);
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
      for (int e = 0; e < 2; e++) {
        const int hl = mi * 16 + e * 8 + g;
        float m = fmaxf(fmaxf(xmax[(hg * 4 + 0) * 32 + hl], xmax[(hg * 4 + 1) * 32 + hl]),
                        fmaxf(xmax[(hg * 4 + 2) * 32 + hl], xmax[(hg * 4 + 3) * 32 + hl]));
        const float mnew = fmaxf(mrun[mi][e], m);
        const float muse = mnew == -INFINITY ? 0.f : mnew;
        const float alpha = exp2f(mrun[mi][e] - muse);
        mrun[mi][e] = mnew;
        float ls = 0.f;
        const int head = hg * 32 + hl;
#pragma unroll
        for (int ni = 0; ni < C::NTW; ni++) {
          const float p0 = exp2f(sacc[mi][ni][2 * e] - muse), p1 = exp2f(sacc[mi][ni][2 * e + 1] - muse);
          const uint32_t pk = pack_bf16x2(p0, p1);
          ls += bf16_bits_to_f32(pk & 0xffffu) + bf16_bits_to_f32(pk >> 16);
          const int tok = tokBase + ni * 8 + 2 * t;  // even: both tokens in one 16-byte chunk
          const int ch = tok >> 3;
          const int pch = F32 ? (ch ^ ((head >> 1) & 3)) : (ch ^ (head & 7));
          *reinterpret_cast<uint32_t*>(Pb + head * C::PROWB + (pch << 4) + (tok & 7) * 2) = pk;
        }
        lrun[mi][e] = lrun[mi][e] * alpha + ls;
        if (tq == 0 && t == 0) alphaS[head] = alpha;
      }
    __syncthreads();  // P and alpha of all 64 heads visible

    // ---- O = diag(alpha)·O + P·V: 64 heads × 64 columns per warp ----
#pragma unroll
    for (int mi = 0; mi < 4; mi++) {
      const float al0 = alphaS[mi * 16 + g], al1 = alphaS[mi * 16 + 8 + g];
#pragma unroll
      for (int nt = 0; nt < 8; nt++) {
        o[mi][nt][0] *= al0;
        o[mi][nt][1] *= al0;
        o[mi][nt][2] *= al1;
        o[mi][nt][3] *= al1;
      }
    }
#pragma unroll 1
    for (int kk = 0; kk < C::T / 16; kk++) {
      uint32_t a[4][4];
#pragma unroll
      for (int mi = 0; mi < 4; mi++) {
        const int prw = mi * 16 + (lane & 15);
        const int ch = 2 * kk + (lane >> 4);
        const int pch = F32 ? (ch ^ ((prw >> 1) & 3)) : (ch ^ (prw & 7));
        ldmatrix_x4(pU + prw * C::PROWB + (pch << 4), a[mi][0], a[mi][1], a[mi][2], a[mi][3]);
      }
      if constexpr (!F32) {
#pragma unroll
        for (int np = 0; np < 4; np++) {
          const int tok = kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
          const int ch = (warp * 64 + np * 16) / 8 + (lane >> 4);
          uint32_t b0, b1, b2, b3;
          ldmatrix_x4_trans(stU + tok * C::ROWB + (kv_chunk<F32>(tok, ch) << 4), b0, b1, b2, b3);
#pragma unroll
          for (int mi = 0; mi < 4; mi++) {
            mma_bf16_16816(o[mi][2 * np], a[mi][0], a[mi][1], a[mi][2], a[mi][3], b0, b1);
            mma_bf16_16816(o[mi][2 * np + 1], a[mi][0], a[mi][1], a[mi][2], a[mi][3], b2, b3);
          }
        }
      } else {
#pragma unroll
        for (int q = 0; q < 2; q++) {
          const int ch = (warp * 64 + q * 32) / 4 + g;  // dims warp·64 + 32q + 4g … + 3
          float4 v[4];
#pragma unroll
          for (int r = 0; r < 4; r++) {
            const int tok = kk * 16 + 2 * t + (r & 1) + (r >> 1) * 8;
            v[r] = *reinterpret_cast<const float4*>(st + tok * C::ROWB + (kv_chunk<F32>(tok, ch) << 4));
          }
          const uint32_t bb[4][2] = {{pack_bf16x2(v[0].x, v[1].x), pack_bf16x2(v[2].x, v[3].x)},
                                     {pack_bf16x2(v[0].y, v[1].y), pack_bf16x2(v[2].y, v[3].y)},
                                     {pack_bf16x2(v[0].z, v[1].z), pack_bf16x2(v[2].z, v[3].z)},
                                     {pack_bf16x2(v[0].w, v[1].w), pack_bf16x2(v[2].w, v[3].w)}};
#pragma unroll
          for (int d = 0; d < 4; d++)
#pragma unroll
            for (int mi = 0; mi < 4; mi++) mma_bf16_16816(o[mi][4 * q + d], a[mi][0], a[mi][1], a[mi][2], a[mi][3], bb[d][0], bb[d][1]);
        }
      }
    }
  }
  cp_async_wait<0>();

  // ---- combine the 4 CTAs of the row ----
  float* const lsum = xmax;  // [4][64]
#pragma unroll
  for (int mi = 0; mi < 2; mi++)
#pragma unroll
    for (int e = 0; e < 2; e++) {
      float l = lrun[mi][e];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      lrun[mi][e] = l;
    }
  __syncthreads();  // everyone is past the last tile's reads of xmax
  if (t == 0) {
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
      for (int e = 0; e < 2; e++) {
        const int head = hg * 32 + mi * 16 + e * 8 + g;
        lsum[tq * 64 + head] = lrun[mi][e];
        if (tq == 0) ML[head] = mrun[mi][e];
      }
  }
  __syncthreads();
  if (tid < kSaHeads) ML[kSaHeads + tid] = (lsum[tid] + lsum[64 + tid]) + (lsum[128 + tid] + lsum[192 + tid]);
  Coop::sync();
  if (tid < kSaHeads) {
    float m[4], l[4];
    float M = -INFINITY;
#pragma unroll
    for (int r = 0; r < 4; r++) {
      const float* ml = Coop::map(ML, r);
      m[r] = ml[tid];
      l[r] = ml[kSaHeads + tid];
      M = fmaxf(M, m[r]);
    }
    float L = 0.f;
#pragma unroll
    for (int r = 0; r < 4; r++) L += m[r] == -INFINITY ? 0.f : l[r] * exp2f(m[r] - M);
    const float mine = ML[tid];
    fac[tid] = (L > 0.f && mine != -INFINITY) ? exp2f(mine - M) / L : 0.f;
  }
  __syncthreads();  // fac visible; Q, the stages and P are no longer read
  float* const obuf = reinterpret_cast<float*>(smem);  // [64][kSaOStride]
#pragma unroll
  for (int mi = 0; mi < 4; mi++) {
    const int h0 = mi * 16 + g, h1 = h0 + 8;
    const float f0 = fac[h0], f1 = fac[h1];
#pragma unroll
    for (int nt = 0; nt < 8; nt++) {
#pragma unroll
      for (int c = 0; c < 2; c++) {
        // Column of accumulator (·, 2t + c) of n-tile nt.
        const int col = F32 ? warp * 64 + (nt >> 2) * 32 + 4 * (2 * t + c) + (nt & 3) : warp * 64 + nt * 8 + 2 * t + c;
        obuf[h0 * kSaOStride + col] = o[mi][nt][c] * f0;
        obuf[h1 * kSaOStride + col] = o[mi][nt][2 + c] * f1;
      }
    }
  }
  Coop::sync();
  const int colBase = rank * (kSaKL / 4);
  const size_t orow = (size_t)row * kSaHeads * kSaKL;
#pragma unroll
  for (int i = 0; i < kSaHeads * (kSaKL / 4) / 4 / kSaThreads; i++) {
    const int idx = tid + i * kSaThreads;
    const int h = idx / (kSaKL / 16), c4 = idx - h * (kSaKL / 16);
    const int col = colBase + 4 * c4;
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int r = 0; r < 4; r++) {
      const float4 v = *reinterpret_cast<const float4*>(Coop::map(obuf, r) + h * kSaOStride + col);
      s.x += v.x;
      s.y += v.y;
      s.z += v.z;
      s.w += v.w;
    }
    store4(olat, orow + (size_t)h * kSaKL + col, s, olatDtype);
  }
  Coop::sync();  // no CTA leaves while another still reads its shared memory
}
#endif

/** Any shape: CTA x takes heads x, x + gridDim.x, …; logits of the row's tokens in shared memory; f32. */
__device__ __forceinline__ void attn_generic(const float* __restrict__ qlat, const uint8_t* __restrict__ kvCache, const int32_t* __restrict__ selRow,
                                             int n, void* __restrict__ olat, int olatDtype, int row, int slot, int heads, int kvLora, int rope,
                                             const Pages pg, int kvDtype, float scale, uint8_t* smem) {
  const int lat = kvLora + rope;
  float* q = reinterpret_cast<float*>(smem);  // [lat]
  float* red = q + lat;                       // [32]
  float* lg = red + 32;                       // [n]
  auto kv = [&](int s, int i) -> float {
    const size_t e = pg.row(slot, s) * lat + i;
    return kvDtype == kF32 ? reinterpret_cast<const float*>(kvCache)[e] : bf16_bits_to_f32(reinterpret_cast<const uint16_t*>(kvCache)[e]);
  };
  for (int h = blockIdx.x; h < heads; h += gridDim.x) {
    const size_t out = ((size_t)row * heads + h) * kvLora;
    if (n <= 0) {
      for (int i = threadIdx.x; i < kvLora; i += blockDim.x) metrale::store_element(olat, out + i, 0.f, olatDtype);
      continue;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < lat; i += blockDim.x) q[i] = qlat[((size_t)row * heads + h) * lat + i];
    __syncthreads();
    float mloc = -INFINITY;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
      const int s = selRow[j];
      float dot = 0.f;
      for (int i = 0; i < lat; i++) dot = fmaf(q[i], kv(s, i), dot);
      lg[j] = dot * scale;
      mloc = fmaxf(mloc, lg[j]);
    }
    const float m = block_max_f(mloc, red);
    float zloc = 0.f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
      const float e = expf(lg[j] - m);
      lg[j] = e;
      zloc += e;
    }
    const float z = block_sum_f(zloc, red);
    __syncthreads();
    for (int i = threadIdx.x; i < kvLora; i += blockDim.x) {
      float acc = 0.f;
      for (int j = 0; j < n; j++) acc = fmaf(lg[j], kv(selRow[j], i), acc);
      metrale::store_element(olat, out + i, acc / z, olatDtype);
    }
  }
}

}  // namespace dsa

using namespace dsa;

extern "C" __global__ void DSA_CLUSTER_DIMS(4) __launch_bounds__(kSaThreads, 1) dsa_sparse_attn(
    const float* __restrict__ qlat, const void* __restrict__ kvCache, const int32_t* __restrict__ sel, const int32_t* __restrict__ selCount,
    void* __restrict__ olat, const int32_t* __restrict__ slots, const int32_t* __restrict__ rowStarts, const int32_t* __restrict__ positions,
    int batch, int heads, int kvLora, int rope, int selWidth, const int32_t* __restrict__ blockTable, int pagesPerSeq, int pageRows,
    int kvDtype, int olatDtype, float scale) {
  DSA_DYNAMIC_SMEM(smem);
  const int row = blockIdx.y;
  const int rows = rowStarts[batch];
  if (row >= rows) return;  // the same for every CTA of a row
  const int p = batch_pos_of_row(rowStarts, batch, row);
  const int slot = slots[p];
  const int n = slot < 0 ? 0 : selCount[row];
  const int32_t* selRow = sel + (size_t)row * selWidth;
  const uint8_t* kv = static_cast<const uint8_t*>(kvCache);
  const Pages pg{blockTable, pagesPerSeq, pageRows};
  (void)positions;
#if DSA_HAS_CLUSTER
  const int lat = kvLora + rope;
  const bool f32 = kvDtype == kF32;
  if (heads == kSaHeads && kvLora == kSaKL && (rope == 64 || rope == 0) && Coop::size() == 4 && gridDim.x == 4 &&
      dynamic_smem_bytes() >= (uint32_t)sa_fast_bytes(lat, f32)) {
    if (n <= 0) {
      // Nothing selected: CTA c writes zeros over its column quarter.
      const int colBase = Coop::rank() * (kSaKL / 4);
      for (int e = threadIdx.x; e < kSaHeads * (kSaKL / 4); e += kSaThreads) {
        const int h = e / (kSaKL / 4), c = e - h * (kSaKL / 4);
        metrale::store_element(olat, ((size_t)row * kSaHeads + h) * kSaKL + colBase + c, 0.f, olatDtype);
      }
      return;
    }
    if (lat == 576) {
      if (f32) attn_fast<576, true>(qlat, kv, selRow, n, olat, olatDtype, row, slot, pg, scale, smem);
      else attn_fast<576, false>(qlat, kv, selRow, n, olat, olatDtype, row, slot, pg, scale, smem);
    } else {
      if (f32) attn_fast<512, true>(qlat, kv, selRow, n, olat, olatDtype, row, slot, pg, scale, smem);
      else attn_fast<512, false>(qlat, kv, selRow, n, olat, olatDtype, row, slot, pg, scale, smem);
    }
    return;
  }
#endif
  if (dynamic_smem_bytes() < (uint32_t)((kvLora + rope + 32 + max(n, 0)) * 4)) __trap();
  attn_generic(qlat, kv, selRow, n, olat, olatDtype, row, slot, heads, kvLora, rope, pg, kvDtype, scale, smem);
}
