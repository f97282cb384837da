// Per-row DSA kernels: dsa_mla_append, dsa_index_append, dsa_pool_append, dsa_ring_store,
// dsa_q_rope. Layouts and semantics: ../KERNELS.md; CPU twins: ../src/dsa-append.cpu.ts.
// xa and the ring are f32; qr (written by dsa_mla_append) and qb (read and, for the indexer heads,
// rotated in place by dsa_q_rope) are in the rows' type, FLOAT_DTYPE_CODE `qrDtype` / `qbDtype`:
// values are computed as below and rounded once where they are stored.
//
// Launch (src/dsa-launch.ts rowLaunch): one CTA per row of the step (any block size ≤ 256 that is a
// multiple of 32, 128 by default); CTAs loop over rows with a stride of gridDim.x, so any grid
// works. Rows ≥ rowStarts[batch] and rows of padding positions (slot −1) do nothing.
//
// Numerics: the norms, RoPE and the pool softmax are evaluated in double with the CPU twin's
// operation order (f64 throughout, f32 rounding where the twin calls Math.fround), so the f32
// values stored — and the bf16 / fp8 codes rounded from them — match the twin's except in the
// rare case of a value within an f64 rounding error of an f32 rounding boundary. RoPE angles are
// f32(invFreq[i] · t) (one IEEE f32 multiply), cos/sin are the f64 ones rounded to f32.
#include "dsa-common.cuh"

namespace dsa {

constexpr int kRowScratch = 2048;  // floats of per-row staging (index key, q rope chunk)

/** cos / sin of pair i at position t, rounded to f32 (KERNELS.md "RoPE"). */
__device__ __forceinline__ void rope_cs(const float* __restrict__ invFreq, int i, int t, double& c, double& s) {
  const float ang = __fmul_rn(invFreq[i], (float)t);
  // sincospi needs no Payne-Hanek reduction (no slow-path call); ang/π carries an error of about
  // |ang|·2^−53 (1e−11 at 10^5 rad), far below the f32 rounding the result gets.
  double sd, cd;
  sincospi(__ddiv_rn((double)ang, 3.141592653589793), &sd, &cd);
  c = (double)(float)cd;
  s = (double)(float)sd;
}

/** The rotated pair (a, b) of pair i at position t: (a·cos − b·sin, b·cos + a·sin) in f64. */
__device__ __forceinline__ void rope_rotate(double a, double b, int i, int t, const float* __restrict__ invFreq, double& o1, double& o2) {
  double c, s;
  rope_cs(invFreq, i, t, c, s);
  // a·c and b·s are exact in f64 (24-bit × 24-bit), so each line is one f64 rounding, as on the CPU.
  o1 = __dsub_rn(__dmul_rn(a, c), __dmul_rn(b, s));
  o2 = __dadd_rn(__dmul_rn(b, c), __dmul_rn(a, s));
}

/** Rotates pair i of `x` (dims values, layout flag `interleave`): returns (out[i], out[i + dims/2]) in f64. */
__device__ __forceinline__ void rope_pair(const float* x, int dims, int i, int t, const float* __restrict__ invFreq, int interleave,
                                          double& o1, double& o2) {
  const int half = dims >> 1;
  const double a = interleave ? (double)x[2 * i] : (double)x[i];
  const double b = interleave ? (double)x[2 * i + 1] : (double)x[half + i];
  rope_rotate(a, b, i, t, invFreq, o1, o2);
}

/** rope_pair over `dims` elements of a row-typed buffer from element `at` (FLOAT_DTYPE_CODE `code`). */
__device__ __forceinline__ void rope_pair_rows(const void* base, size_t at, int code, int dims, int i, int t, const float* __restrict__ invFreq,
                                               int interleave, double& o1, double& o2) {
  const int half = dims >> 1;
  const double a = (double)metrale::load_element(base, at + (interleave ? 2 * i : i), code);
  const double b = (double)metrale::load_element(base, at + (interleave ? 2 * i + 1 : half + i), code);
  rope_rotate(a, b, i, t, invFreq, o1, o2);
}

/**
 * e^x in f64 for x ≤ 0 (the pool softmax): Cody-Waite reduction x = k·ln2 + r, |r| ≤ ln2/2, and
 * the Taylor polynomial of degree 13 (remainder < 1e−17), so within about an ulp of the correctly
 * rounded value, like the twin's Math.exp. Inlined: CUDA's exp() costs this kernel register spills.
 */
__device__ __forceinline__ double exp_nonpos(double x) {
  if (x < -745.0) return 0.0;
  const double k = rint(x * 1.4426950408889634);
  const double r = fma(-k, 1.9082149292705877e-10, fma(-k, 0.6931471803691238, x));
  double p = 1.0 / 6227020800.0;  // 1/13!
  p = fma(p, r, 1.0 / 479001600.0);
  p = fma(p, r, 1.0 / 39916800.0);
  p = fma(p, r, 1.0 / 3628800.0);
  p = fma(p, r, 1.0 / 362880.0);
  p = fma(p, r, 1.0 / 40320.0);
  p = fma(p, r, 1.0 / 5040.0);
  p = fma(p, r, 1.0 / 720.0);
  p = fma(p, r, 1.0 / 120.0);
  p = fma(p, r, 1.0 / 24.0);
  p = fma(p, r, 1.0 / 6.0);
  p = fma(p, r, 0.5);
  p = fma(p, r, 1.0);
  p = fma(p, r, 1.0);
  const int ki = (int)k;
  if (ki < -1021) return p * __hiloint2double((ki + 1023 + 54) << 20, 0) * 5.551115123125783e-17;  // 2^−54
  return p * __hiloint2double((ki + 1023) << 20, 0);
}

/** Stores `n` f32 values from shared memory as one cache row of dtype `code` (fp8: + its scale). */
__device__ __forceinline__ void store_row(const float* vals, int n, int code, void* base, float* scales, size_t rowIndex, float* red) {
  if (code == kF32) {
    float* dst = static_cast<float*>(base) + rowIndex * (size_t)n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = vals[i];
  } else if (code == kBF16) {
    uint16_t* dst = static_cast<uint16_t*>(base) + rowIndex * (size_t)n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = f32_to_bf16_bits(vals[i]);
  } else {
    float amax = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) amax = fmaxf(amax, fabsf(vals[i]));
    amax = block_max_f(amax, red);
    const float scale = amax > 0.f ? __fdiv_rn(amax, 448.f) : 1.f;
    uint8_t* dst = static_cast<uint8_t*>(base) + rowIndex * (size_t)n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = f32_to_e4m3(__fdiv_rn(vals[i], scale));
    if (threadIdx.x == 0) scales[rowIndex] = scale;
  }
}

}  // namespace dsa

using namespace dsa;

/**
 * qr = RMSNorm(q_a)·qaNorm in qrDtype; the cache row of (slot, t) = [RMSNorm(kv_a)·kvaNorm | RoPE(k_rope, t)] in kvDtype.
 * (A minimum of one CTA per SM in the launch bounds lets ptxas keep the row's values in registers;
 * without it, it spills one to reach its default occupancy target.)
 */
extern "C" __global__ void __launch_bounds__(256, 1) dsa_mla_append(
    const float* __restrict__ xa, void* __restrict__ qr, void* __restrict__ kvCache, const float* __restrict__ qaNorm,
    const float* __restrict__ kvaNorm, const float* __restrict__ invFreq, const int32_t* __restrict__ slots,
    const int32_t* __restrict__ rowStarts, const int32_t* __restrict__ positions, int batch, int xaWidth, int qLora, int kvLora,
    int rope, int ropeInterleave, int kvDtype, int qrDtype, const int32_t* __restrict__ blockTable, int pagesPerSeq, int pageRows, float eps) {
  DSA_SHARED(double, dred, 32);
  const int rows = rowStarts[batch];
  const int lat = kvLora + rope;
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    const int p = batch_pos_of_row(rowStarts, batch, row);
    const int slot = slots[p];
    if (slot < 0) continue;
    const int t = positions[row];
    const float* x = xa + (size_t)row * xaWidth;

    double ss = 0.0;
    for (int i = threadIdx.x; i < qLora; i += blockDim.x) ss += (double)x[i] * (double)x[i];
    ss = block_sum_d(ss, dred);
    double inv = 1.0 / sqrt(ss / (double)qLora + (double)eps);
    const size_t qo = (size_t)row * qLora;
    for (int i = threadIdx.x; i < qLora; i += blockDim.x)
      metrale::store_element(qr, qo + i, (float)__dmul_rn(__dmul_rn((double)x[i], inv), (double)qaNorm[i]), qrDtype);

    const float* kv = x + qLora;
    ss = 0.0;
    for (int i = threadIdx.x; i < kvLora; i += blockDim.x) ss += (double)kv[i] * (double)kv[i];
    ss = block_sum_d(ss, dred);
    inv = 1.0 / sqrt(ss / (double)kvLora + (double)eps);
    const size_t cacheRow = paged_row(blockTable, pagesPerSeq, pageRows, slot, t);
    const int half = rope >> 1;
    if (kvDtype == kF32) {
      float* dst = static_cast<float*>(kvCache) + cacheRow * lat;
      for (int i = threadIdx.x; i < kvLora; i += blockDim.x) dst[i] = (float)__dmul_rn(__dmul_rn((double)kv[i], inv), (double)kvaNorm[i]);
      for (int i = threadIdx.x; i < half; i += blockDim.x) {
        double o1, o2;
        rope_pair(kv + kvLora, rope, i, t, invFreq, ropeInterleave, o1, o2);
        dst[kvLora + i] = (float)o1;
        dst[kvLora + half + i] = (float)o2;
      }
    } else {
      uint16_t* dst = static_cast<uint16_t*>(kvCache) + cacheRow * lat;
      for (int i = threadIdx.x; i < kvLora; i += blockDim.x)
        dst[i] = f32_to_bf16_bits((float)__dmul_rn(__dmul_rn((double)kv[i], inv), (double)kvaNorm[i]));
      for (int i = threadIdx.x; i < half; i += blockDim.x) {
        double o1, o2;
        rope_pair(kv + kvLora, rope, i, t, invFreq, ropeInterleave, o1, o2);
        dst[kvLora + i] = f32_to_bf16_bits((float)o1);
        dst[kvLora + half + i] = f32_to_bf16_bits((float)o2);
      }
    }
  }
}

/** k = LayerNorm(xa k-part)·w + b, RoPE on k[0:idxRope]; mode 0: the key cache row of (slot, t); mode 1: back into xa (f32). */
extern "C" __global__ void __launch_bounds__(256) dsa_index_append(
    float* __restrict__ xa, void* __restrict__ idxCache, float* __restrict__ idxScales, const float* __restrict__ kNormWeight,
    const float* __restrict__ kNormBias, const float* __restrict__ invFreq, const int32_t* __restrict__ slots,
    const int32_t* __restrict__ rowStarts, const int32_t* __restrict__ positions, int batch, int xaWidth, int kOff, int dI,
    int idxRope, int ropeInterleave, int idxDtype, const int32_t* __restrict__ blockTable, int pagesPerSeq, int pageRows, int mode, float eps) {
  DSA_SHARED(double, dred, 32);
  DSA_SHARED(float, fred, 32);
  DSA_SHARED(float, k, kRowScratch);
  DSA_SHARED(float, kr, kRowScratch);
  if (dI > kRowScratch) __trap();
  const int rows = rowStarts[batch];
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    const int p = batch_pos_of_row(rowStarts, batch, row);
    const int slot = slots[p];
    if (slot < 0) continue;
    const int t = positions[row];
    float* x = xa + (size_t)row * xaWidth + kOff;

    double s = 0.0;
    for (int i = threadIdx.x; i < dI; i += blockDim.x) s += (double)x[i];
    const double mean = block_sum_d(s, dred) / (double)dI;
    s = 0.0;
    for (int i = threadIdx.x; i < dI; i += blockDim.x) {
      const double d = (double)x[i] - mean;
      s += d * d;
    }
    const double var = block_sum_d(s, dred) / (double)dI;
    const double inv = 1.0 / sqrt(var + (double)eps);
    for (int i = threadIdx.x; i < dI; i += blockDim.x)
      k[i] = (float)__dadd_rn(__dmul_rn(__dmul_rn(__dsub_rn((double)x[i], mean), inv), (double)kNormWeight[i]), (double)kNormBias[i]);
    __syncthreads();
    // RoPE of k[0:idxRope]: every pair is read before any is written back.
    const int half = idxRope >> 1;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
      double o1, o2;
      rope_pair(k, idxRope, i, t, invFreq, ropeInterleave, o1, o2);
      kr[i] = (float)o1;
      kr[half + i] = (float)o2;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < idxRope; i += blockDim.x) k[i] = kr[i];
    __syncthreads();
    if (mode == 1) {
      for (int i = threadIdx.x; i < dI; i += blockDim.x) x[i] = k[i];
    } else {
      store_row(k, dI, idxDtype, idxCache, idxScales, paged_row(blockTable, pagesPerSeq, pageRows, slot, t), fred);
    }
    __syncthreads();
  }
}

/** glm5_next: the key of every pool a row of this step completes ((t + 1) mod P = 0), into the pool cache. */
extern "C" __global__ void __launch_bounds__(256) dsa_pool_append(
    const float* __restrict__ xa, const float* __restrict__ ring, void* __restrict__ poolCache, float* __restrict__ poolScales,
    const float* __restrict__ ape, const int32_t* __restrict__ slots, const int32_t* __restrict__ seqLens,
    const int32_t* __restrict__ rowStarts, const int32_t* __restrict__ positions, int batch, int xaWidth, int kOff, int gOff, int dI,
    int kpool, int ringLen, int idxDtype, const int32_t* __restrict__ blockTable, int pagesPerSeq, int pageRows) {
  DSA_SHARED(float, fred, 32);
  DSA_SHARED(float, key, kRowScratch);
  if (dI > kRowScratch) __trap();
  const int rows = rowStarts[batch];
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    const int p = batch_pos_of_row(rowStarts, batch, row);
    const int slot = slots[p];
    if (slot < 0) continue;
    const int t = positions[row];
    if ((t + 1) % kpool != 0) continue;
    const int j = (t + 1) / kpool - 1;
    const int seqLen = seqLens[p];
    const int first = t - kpool + 1;
    const int xaRow0 = rowStarts[p] - seqLen;  // row of position m ≥ seqLen: xaRow0 + m
    const float* ringSlot = ring + (size_t)slot * ringLen * 2 * dI;
    for (int c = threadIdx.x; c < dI; c += blockDim.x) {
      // Member i at position m = first + i: this step's row (m ≥ seqLen) or the slot's ring.
      double mx = -INFINITY;
      for (int i = 0; i < kpool; i++) {
        const int m = first + i;
        const float g = m >= seqLen ? xa[(size_t)(xaRow0 + m) * xaWidth + gOff + c] : ringSlot[(size_t)(m % ringLen) * 2 * dI + dI + c];
        mx = fmax(mx, (double)__fadd_rn(g, ape[i * dI + c]));
      }
      double z = 0.0;
      for (int i = 0; i < kpool; i++) {
        const int m = first + i;
        const float g = m >= seqLen ? xa[(size_t)(xaRow0 + m) * xaWidth + gOff + c] : ringSlot[(size_t)(m % ringLen) * 2 * dI + dI + c];
        z = __dadd_rn(z, exp_nonpos(__dsub_rn((double)__fadd_rn(g, ape[i * dI + c]), mx)));
      }
      double acc = 0.0;
      for (int i = 0; i < kpool; i++) {
        const int m = first + i;
        const size_t xo = (size_t)(xaRow0 + m) * xaWidth, ro = (size_t)(m % ringLen) * 2 * dI;
        const float g = m >= seqLen ? xa[xo + gOff + c] : ringSlot[ro + dI + c];
        const float kv = m >= seqLen ? xa[xo + kOff + c] : ringSlot[ro + c];
        const float w = (float)__ddiv_rn(exp_nonpos(__dsub_rn((double)__fadd_rn(g, ape[i * dI + c]), mx)), z);
        acc = __dadd_rn(acc, __dmul_rn((double)w, (double)kv));
      }
      key[c] = (float)acc;
    }
    __syncthreads();
    store_row(key, dI, idxDtype, poolCache, poolScales, paged_row(blockTable, pagesPerSeq, pageRows, slot, j), fred);
    __syncthreads();
  }
}

/** glm5_next: ring[slot][t mod R] = [key | gate] (f32) for the last R rows of each sequence's step. */
extern "C" __global__ void __launch_bounds__(256) dsa_ring_store(
    const float* __restrict__ xa, float* __restrict__ ring, const int32_t* __restrict__ slots, const int32_t* __restrict__ rowStarts,
    const int32_t* __restrict__ positions, int batch, int xaWidth, int kOff, int gOff, int dI, int ringLen) {
  const int rows = rowStarts[batch];
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    const int p = batch_pos_of_row(rowStarts, batch, row);
    const int slot = slots[p];
    if (slot < 0) continue;
    if (row < rowStarts[p + 1] - ringLen) continue;
    const int t = positions[row];
    const float* x = xa + (size_t)row * xaWidth;
    float* dst = ring + ((size_t)slot * ringLen + (t % ringLen)) * 2 * dI;
    for (int c = threadIdx.x; c < dI; c += blockDim.x) {
      dst[c] = x[kOff + c];
      dst[dI + c] = x[gOff + c];
    }
  }
}

/**
 * RoPE of each MLA head's q_rope into qlat[…, kvLora:] (f32), and of each indexer head's first
 * idxRope channels in place (qb is in qbDtype).
 */
extern "C" __global__ void __launch_bounds__(256) dsa_q_rope(
    void* __restrict__ qb, float* __restrict__ qlat, const float* __restrict__ invFreq, const int32_t* __restrict__ slots,
    const int32_t* __restrict__ rowStarts, const int32_t* __restrict__ positions, int batch, int qbWidth, int heads, int nope,
    int rope, int kvLora, int idxHeads, int dI, int idxRope, int ropeInterleave, int idxRopeInterleave, int qbDtype) {
  DSA_SHARED(float, stage, kRowScratch);
  const int rows = rowStarts[batch];
  const int lat = kvLora + rope;
  const int qIOff = heads * (nope + rope);
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    const int p = batch_pos_of_row(rowStarts, batch, row);
    const int slot = slots[p];
    if (slot < 0) continue;
    const int t = positions[row];
    const size_t qo = (size_t)row * qbWidth;
    if (rope > 0) {
      const int half = rope >> 1;
      for (int e = threadIdx.x; e < heads * half; e += blockDim.x) {
        const int h = e / half, i = e - h * half;
        double o1, o2;
        rope_pair_rows(qb, qo + h * (nope + rope) + nope, qbDtype, rope, i, t, invFreq, ropeInterleave, o1, o2);
        float* dst = qlat + ((size_t)row * heads + h) * lat + kvLora;
        dst[i] = (float)o1;
        dst[half + i] = (float)o2;
      }
    }
    if (idxRope > 0 && idxHeads > 0) {
      // In place: a chunk of heads is rotated into shared memory, then written back.
      const int half = idxRope >> 1;
      const int chunk = max(1, kRowScratch / idxRope);
      for (int g0 = 0; g0 < idxHeads; g0 += chunk) {
        const int g1 = min(idxHeads, g0 + chunk);
        for (int e = threadIdx.x; e < (g1 - g0) * half; e += blockDim.x) {
          const int gl = e / half, i = e - gl * half;
          double o1, o2;
          rope_pair_rows(qb, qo + qIOff + (g0 + gl) * dI, qbDtype, idxRope, i, t, invFreq, idxRopeInterleave, o1, o2);
          stage[gl * idxRope + i] = (float)o1;
          stage[gl * idxRope + half + i] = (float)o2;
        }
        __syncthreads();
        for (int e = threadIdx.x; e < (g1 - g0) * idxRope; e += blockDim.x) {
          const int gl = e / idxRope, i = e - gl * idxRope;
          metrale::store_element(qb, qo + qIOff + (g0 + gl) * dI + i, stage[e], qbDtype);
        }
        __syncthreads();
      }
    }
  }
}
