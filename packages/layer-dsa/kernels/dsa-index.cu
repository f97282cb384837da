// dsa_index_score: the lightning indexer's scores of a block of rows against their slot's keys.
// Layouts and semantics: ../KERNELS.md; CPU twin: ../src/dsa-index.cpu.ts (indexScoreCpu).
//
//   scores[(r − rowBase)·scoreStride + j] = scale · Σ_g w[r][g] · max(0, q_I[r][g] · key_j)   for j < n(t_r)
//
// Launch (src/dsa-launch.ts indexScoreLaunch): grid [G, batch], 256 threads, dynamic shared memory
// as indexScoreLaunch sizes it (fast path: 128 KiB bf16 / 98 KiB fp8, so one CTA per SM, and
// G·batch about the multiprocessor count: one wave of long-lived CTAs). CTA (x, p) scores the keys of batch position p's slot in tiles
// x, x + G, x + 2G, … up to the largest candidate count among p's rows of the block: every key is
// read once per sequence and scored against all of that sequence's rows (decode: 1, verify: k,
// prefill: up to the block). Entries past a row's own candidate count are not written.
//
// Fast path (d_I = 128, 8 ≤ H_I ≤ 32 with H_I % 8 = 0, bf16 or fp8 keys): tensor cores. Tiles of
// 128 keys stream through a 4-stage cp.async ring (fp8 tiles are widened to bf16 in shared
// memory: exact, E4M3 values are bf16 values); each warp owns a (row, set of 16-key m-tiles) pair;
// the row's q_I (rounded to bf16, which KERNELS.md allows) stays in registers as the MMA's B
// operand (H_I columns), keys are the A operand (ldmatrix from XOR-swizzled rows), f32
// accumulation; ReLU, the head weights and the per-key fp8 scale are applied to the f32
// accumulators. Bytes: n · 256 (bf16) or n · 132 (fp8) per sequence, read once.
// Generic path (any shape, f32 keys): f32 FMA over a shared-memory tile; exact to f32 rounding.
// qb is in the rows' type (FLOAT_DTYPE_CODE qbDtype), read as f32 values; xa (the head weights) is f32.
#include "dsa-common.cuh"

namespace dsa {

constexpr int kIsThreads = 256;
constexpr int kIsTile = 128;   // keys per fast-path tile
constexpr int kIsStages = 4;
constexpr int kIsGenTile = 64;  // keys per generic-path tile

__host__ __device__ constexpr int is_fast_bytes(bool fp8) {
  return fp8 ? kIsStages * kIsTile * 128 + kIsStages * kIsTile * 4 + kIsTile * 256 : kIsStages * kIsTile * 256;
}

struct ScoreArgs {
  const void* qb;
  const float* xa;
  const uint8_t* keys;
  const float* keyScales;
  float* scores;
  const int32_t* blockTable;
  int rowBase, qbWidth, qIOff, xaWidth, wOff, idxHeads, dI, pagesPerSeq, pageRows, scoreStride, idxDtype, qbDtype;
  float scale;
};

/** Cache row of key j of `slot` (paged: KERNELS.md). */
__device__ __forceinline__ size_t key_row(const ScoreArgs& A, int slot, int j) {
  return paged_row(A.blockTable, A.pagesPerSeq, A.pageRows, slot, j);
}

/** Element i of row r's indexer queries (H_I · d_I values from qIOff) as f32. */
__device__ __forceinline__ float query_at(const ScoreArgs& A, int r, int i) {
  return metrale::load_element(A.qb, (size_t)r * A.qbWidth + A.qIOff + i, A.qbDtype);
}

/** One row of the block as a warp sees it. */
struct RowInfo {
  int r;   // absolute row
  int n;   // candidates
};

template <int NT, bool FP8>
__device__ __forceinline__ void score_fast(const ScoreArgs& A, const int32_t* __restrict__ positions, int kpool, int slot, int r0, int R,
                                           int nmax, uint8_t* smem) {
  constexpr int KB = FP8 ? 128 : 256;  // bytes per key row in the cache
  constexpr int CH = KB / 16;          // 16-byte chunks per key row
  const int tiles = (nmax + kIsTile - 1) / kIsTile;
  if ((int)blockIdx.x >= tiles) return;
  const int G = gridDim.x;
  const int myCount = (tiles - (int)blockIdx.x + G - 1) / G;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;

  uint8_t* const stage0 = smem;
  float* const scl0 = reinterpret_cast<float*>(smem + kIsStages * kIsTile * KB);
  uint8_t* const conv = smem + kIsStages * kIsTile * KB + kIsStages * kIsTile * 4;

  auto load_tile = [&](int k, int s) {
    const int key0 = ((int)blockIdx.x + k * G) * kIsTile;
    uint8_t* st = stage0 + s * kIsTile * KB;
#pragma unroll
    for (int i = 0; i < kIsTile * CH / kIsThreads; i++) {
      const int c = tid + i * kIsThreads;
      const int key = c / CH, ch = c % CH;
      const bool ok = key0 + key < nmax;
      const uint8_t* src = ok ? A.keys + key_row(A, slot, key0 + key) * KB + ch * 16 : A.keys;
      const int dstOff = FP8 ? key * KB + ch * 16 : key * KB + ((ch ^ (key & 7)) << 4);
      cp_async16(smem_u32(st + dstOff), src, ok ? 16 : 0);
    }
    if (FP8 && tid < kIsTile) {
      const bool ok = key0 + tid < nmax;
      cp_async4(smem_u32(scl0 + s * kIsTile + tid), ok ? A.keyScales + key_row(A, slot, key0 + tid) : A.keyScales, ok ? 4 : 0);
    }
  };

#pragma unroll
  for (int k = 0; k < kIsStages - 1; k++) {
    if (k < myCount) load_tile(k, k);
    cp_async_commit();
  }

  // Warp roles: up to 8 rows share the warps (each warp a row and every (8/rows')-th m-tile);
  // more rows: warp w takes rows w, w + 8, … with all 8 m-tiles.
  int rowFirst, mtFirst, mtStep;
  if (R <= 8) {
    const int rp = R <= 1 ? 1 : R <= 2 ? 2 : R <= 4 ? 4 : 8;
    const int wpr = 8 / rp;
    rowFirst = warp / wpr;
    mtFirst = warp % wpr;
    mtStep = wpr;
  } else {
    rowFirst = warp;
    mtFirst = 0;
    mtStep = 1;
  }

  uint32_t bq[NT][8][2];
  float wv[NT][2];
  int loaded = -1, rowN = 0, rowAbs = 0;

  for (int k = 0; k < myCount; k++) {
    cp_async_wait<kIsStages - 2>();
    __syncthreads();
    if (k + kIsStages - 1 < myCount) load_tile(k + kIsStages - 1, (k + kIsStages - 1) % kIsStages);
    cp_async_commit();
    const int s = k % kIsStages;
    const int key0 = ((int)blockIdx.x + k * G) * kIsTile;
    uint32_t tileU32;
    if (FP8) {
      // Widen the fp8 tile to bf16 (swizzled like a bf16 tile).
      const uint8_t* st = stage0 + s * kIsTile * KB;
#pragma unroll
      for (int i = 0; i < kIsTile * 16 / kIsThreads; i++) {
        const int c = tid + i * kIsThreads;  // (key, 16-byte bf16 chunk = 8 codes)
        const int key = c >> 4, ch = c & 15;
        const uint2 codes = *reinterpret_cast<const uint2*>(st + key * 128 + ch * 8);
        const uint2 lo = e4m3x4_to_bf16x4(codes.x), hi = e4m3x4_to_bf16x4(codes.y);
        *reinterpret_cast<uint4*>(conv + key * 256 + ((ch ^ (key & 7)) << 4)) = make_uint4(lo.x, lo.y, hi.x, hi.y);
      }
      __syncthreads();
      tileU32 = smem_u32(conv);
    } else {
      tileU32 = smem_u32(stage0 + s * kIsTile * KB);
    }
    const float* scl = scl0 + s * kIsTile;

    for (int ri = rowFirst; ri < R; ri += 8) {
      if (ri != loaded) {
        loaded = ri;
        rowAbs = r0 + ri;
        rowN = (positions[rowAbs] + 1) / kpool;
        const float* w = A.xa + (size_t)rowAbs * A.xaWidth + A.wOff;
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
          const int qh = (nt * 8 + g) * 128;
#pragma unroll
          for (int ks = 0; ks < 8; ks++) {
            const int c = qh + ks * 16 + 2 * t;
            bq[nt][ks][0] = pack_bf16x2(query_at(A, rowAbs, c), query_at(A, rowAbs, c + 1));
            bq[nt][ks][1] = pack_bf16x2(query_at(A, rowAbs, c + 8), query_at(A, rowAbs, c + 9));
          }
          wv[nt][0] = w[nt * 8 + 2 * t];
          wv[nt][1] = w[nt * 8 + 2 * t + 1];
        }
      }
      float* out = A.scores + (size_t)(rowAbs - A.rowBase) * A.scoreStride;
      for (int mt = mtFirst; mt < kIsTile / 16; mt += mtStep) {
        if (key0 + mt * 16 >= rowN) break;
        float acc[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; nt++) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
        const int arow = mt * 16 + (lane & 15);
#pragma unroll
        for (int ks = 0; ks < 8; ks++) {
          uint32_t a0, a1, a2, a3;
          const int chunk = 2 * ks + (lane >> 4);
          ldmatrix_x4(tileU32 + arow * 256 + ((chunk ^ (arow & 7)) << 4), a0, a1, a2, a3);
#pragma unroll
          for (int nt = 0; nt < NT; nt++) mma_bf16_16816(acc[nt], a0, a1, a2, a3, bq[nt][ks][0], bq[nt][ks][1]);
        }
        // acc[nt] = (key g: heads 8nt+2t, +1 | key g+8: the same heads)
        float s0 = 0.f, s1 = 0.f;
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
          s0 += wv[nt][0] * fmaxf(acc[nt][0], 0.f) + wv[nt][1] * fmaxf(acc[nt][1], 0.f);
          s1 += wv[nt][0] * fmaxf(acc[nt][2], 0.f) + wv[nt][1] * fmaxf(acc[nt][3], 0.f);
        }
        s0 += __shfl_xor_sync(0xffffffffu, s0, 1);
        s0 += __shfl_xor_sync(0xffffffffu, s0, 2);
        s1 += __shfl_xor_sync(0xffffffffu, s1, 1);
        s1 += __shfl_xor_sync(0xffffffffu, s1, 2);
        if (t == 0) {
          const int j0 = key0 + mt * 16 + g, j1 = j0 + 8;
          float f0 = A.scale, f1 = A.scale;
          if (FP8) {
            f0 *= scl[mt * 16 + g];
            f1 *= scl[mt * 16 + g + 8];
          }
          if (j0 < rowN) out[j0] = s0 * f0;
          if (j1 < rowN) out[j1] = s1 * f1;
        }
      }
    }
  }
  cp_async_wait<0>();
}

/** Any shape and key type: a tile of 64 keys in shared memory as f32 (transposed), f32 dot products. */
__device__ __forceinline__ void score_generic(const ScoreArgs& A, const int32_t* __restrict__ positions, int kpool, int slot, int r0, int R,
                                              int nmax, uint8_t* smem) {
  const int tiles = (nmax + kIsGenTile - 1) / kIsGenTile;
  const int tid = threadIdx.x;
  const int kk = tid % kIsGenTile, part = tid / kIsGenTile;  // 4 parts split the heads
  constexpr int LD = kIsGenTile + 1;
  float* kt = reinterpret_cast<float*>(smem);  // [dI][LD]
  float* red = kt + (size_t)A.dI * LD;         // [4][kIsGenTile]
  const int dI = A.dI;
  for (int ti = blockIdx.x; ti < tiles; ti += gridDim.x) {
    const int key0 = ti * kIsGenTile;
    __syncthreads();
    for (int e = tid; e < kIsGenTile * dI; e += blockDim.x) {
      const int key = e / dI, i = e - key * dI;
      const int j = key0 + key;
      float v = 0.f;
      if (j < nmax) {
        const size_t row = key_row(A, slot, j);
        if (A.idxDtype == kF32) v = reinterpret_cast<const float*>(A.keys)[row * dI + i];
        else if (A.idxDtype == kBF16) v = bf16_bits_to_f32(reinterpret_cast<const uint16_t*>(A.keys)[row * dI + i]);
        else v = e4m3_to_f32(A.keys[row * dI + i]) * A.keyScales[row];
      }
      kt[i * LD + key] = v;
    }
    __syncthreads();
    for (int ri = 0; ri < R; ri++) {
      const int r = r0 + ri;
      const int n = (positions[r] + 1) / kpool;
      const float* w = A.xa + (size_t)r * A.xaWidth + A.wOff;
      float acc = 0.f;
      for (int h = part; h < A.idxHeads; h += 4) {
        float dot = 0.f;
        for (int i = 0; i < dI; i++) dot = fmaf(query_at(A, r, h * dI + i), kt[i * LD + kk], dot);
        if (dot > 0.f) acc = fmaf(w[h], dot, acc);
      }
      red[part * kIsGenTile + kk] = acc;
      __syncthreads();
      if (part == 0) {
        const int j = key0 + kk;
        const float s = ((red[kk] + red[kIsGenTile + kk]) + red[2 * kIsGenTile + kk]) + red[3 * kIsGenTile + kk];
        if (j < n) A.scores[(size_t)(r - A.rowBase) * A.scoreStride + j] = s * A.scale;
      }
      __syncthreads();
    }
  }
}

}  // namespace dsa

using namespace dsa;

extern "C" __global__ void __launch_bounds__(kIsThreads, 1) dsa_index_score(
    const void* __restrict__ qb, const float* __restrict__ xa, const void* __restrict__ keys, const float* __restrict__ keyScales,
    float* __restrict__ scores, const int32_t* __restrict__ slots, const int32_t* __restrict__ rowStarts,
    const int32_t* __restrict__ positions, int batch, int rowBase, int rowCount, int qbWidth, int qIOff, int xaWidth, int wOff,
    int idxHeads, int dI, int kpool, const int32_t* __restrict__ blockTable, int pagesPerSeq, int pageRows, int scoreStride, int idxDtype,
    int qbDtype, float scale) {
  DSA_DYNAMIC_SMEM(smem);
  const int p = blockIdx.y;
  if (p >= batch) return;
  const int slot = slots[p];
  if (slot < 0) return;
  const int r0 = max(rowStarts[p], rowBase);
  const int r1 = min(min(rowStarts[p + 1], rowBase + rowCount), rowStarts[batch]);
  const int R = r1 - r0;
  if (R <= 0) return;
  int nmax = 0;
  for (int r = r0; r < r1; r++) nmax = max(nmax, (positions[r] + 1) / kpool);
  nmax = min(nmax, pagesPerSeq * pageRows);
  if (nmax <= 0) return;

  const ScoreArgs A{qb, xa, static_cast<const uint8_t*>(keys), keyScales, scores, blockTable, rowBase, qbWidth, qIOff, xaWidth, wOff,
                    idxHeads, dI, pagesPerSeq, pageRows, scoreStride, idxDtype, qbDtype, scale};
  const uint32_t dyn = dynamic_smem_bytes();
  const bool fastShape = dI == 128 && idxHeads >= 8 && idxHeads <= 32 && idxHeads % 8 == 0 && (idxDtype == kBF16 || idxDtype == kFP8);
  if (fastShape && dyn >= (uint32_t)is_fast_bytes(idxDtype == kFP8)) {
    const int nt = idxHeads / 8;
    if (idxDtype == kBF16) {
      if (nt == 4) score_fast<4, false>(A, positions, kpool, slot, r0, R, nmax, smem);
      else if (nt == 3) score_fast<3, false>(A, positions, kpool, slot, r0, R, nmax, smem);
      else if (nt == 2) score_fast<2, false>(A, positions, kpool, slot, r0, R, nmax, smem);
      else score_fast<1, false>(A, positions, kpool, slot, r0, R, nmax, smem);
    } else {
      if (nt == 4) score_fast<4, true>(A, positions, kpool, slot, r0, R, nmax, smem);
      else if (nt == 3) score_fast<3, true>(A, positions, kpool, slot, r0, R, nmax, smem);
      else if (nt == 2) score_fast<2, true>(A, positions, kpool, slot, r0, R, nmax, smem);
      else score_fast<1, true>(A, positions, kpool, slot, r0, R, nmax, smem);
    }
    return;
  }
  if (dyn < (uint32_t)(dI * (kIsGenTile + 1) * 4 + 4 * kIsGenTile * 4)) __trap();
  score_generic(A, positions, kpool, slot, r0, R, nmax, smem);
}
