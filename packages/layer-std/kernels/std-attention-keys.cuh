// How a decode row's keys are cut into chunks and where each chunk's partial record lies, shared by
// the split-KV decode kernels (std-attention.cu on CUDA cores, std-attention-decode.cu on tensor
// cores) and std_attn_combine; the same rule as keyChunksOf in src/key-chunks.ts. Also the two
// kernels' walk over a CTA's rows, chunks and head groups (for_each_chunk).
#pragma once
#include "std-common.cuh"

namespace stdk {

/** A row's keys are cut into chunks of at least kMinChunk keys, at most kMaxChunks (src/key-chunks.ts has both). */
constexpr int kMinChunk = 64;
constexpr int kMaxChunks = 64;
/** Chunk sizes are multiples of kChunkAlign keys: whole tiles for every warp of std_attn_decode. */
constexpr int kChunkAlign = 64;

__device__ __forceinline__ int qkv_width(int heads, int kvHeads, int d, int gated, int ownKv) {
  return heads * d * (gated ? 2 : 1) + (ownKv ? 2 * kvHeads * d : 0);
}

/** The first key a row at `pos` sees: the window's start, or 0. */
__device__ __forceinline__ int first_key(int pos, int window) { return window > 0 ? max(0, pos - window + 1) : 0; }

/** The cut of a row's `len` keys: `n` chunks of `size` keys (a multiple of kChunkAlign; the last shorter). */
struct KeyChunks {
  int n;
  int size;
};

/**
 * Chunks of at least kMinChunk keys, at most `maxChunks` (the launch's `chunks`): a function of the
 * row's key count only, so a row's result never depends on the batch or the grid.
 */
__device__ __forceinline__ KeyChunks key_chunks(int len, int maxChunks) {
  const int want = max(1, min(maxChunks, (len + kMinChunk - 1) / kMinChunk));
  const int size = ((len + want - 1) / want + kChunkAlign - 1) / kChunkAlign * kChunkAlign;
  return {(len + size - 1) / size, size};
}

/** One partial record of (row, head, chunk) in `partials`: max score m (log2 units: s · scale · log2 e), Σ 2^(s − m), then d sums of 2^(s − m)·v. */
__device__ __forceinline__ size_t partial_offset(int row, int heads, int h, int maxChunks, int c, int d) {
  return (((size_t)row * heads + h) * maxChunks + c) * (size_t)(d + 2);
}

/**
 * How the chunk records of one (row, head) merge (std_attn_combine, and std_attn_decode's last CTA of
 * a row's kv head): M the records' max, w_c = 2^(m_c − M), L = Σ_c sum_c · w_c, and each output
 * value Σ_c acc_c · w_c (chunks in order) / L. One definition, so both give a record set the same bits.
 */
struct ChunkWeights {
  float L;
  /** w_c of chunks lane and lane + 32 (0 past the row's chunks). */
  float lo, hi;
};

/**
 * The weights of a (row, head)'s n ≤ kMaxChunks records at `rec` (stride d + 2 floats), by one warp:
 * lane l reads chunks l and l + 32 through L2 (other CTAs of the launch may have written them), M by
 * the xor butterfly, L as the lane's two products in order, then the xor butterfly. Every lane gets L.
 */
__device__ __forceinline__ ChunkWeights chunk_weights(const float* rec, int n, int d, int lane) {
  const size_t R = (size_t)d + 2;
  const bool has0 = lane < n, has1 = lane + 32 < n;
  const float m0 = has0 ? __ldcg(rec + lane * R) : -INFINITY, s0 = has0 ? __ldcg(rec + lane * R + 1) : 0.f;
  const float m1 = has1 ? __ldcg(rec + (lane + 32) * R) : -INFINITY, s1 = has1 ? __ldcg(rec + (lane + 32) * R + 1) : 0.f;
  float M = fmaxf(m0, m1);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
  const float w0 = has0 ? exp2f(m0 - M) : 0.f, w1 = has1 ? exp2f(m1 - M) : 0.f;
  float L = __fmaf_rn(s1, w1, __fmul_rn(s0, w0));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) L = __fadd_rn(L, __shfl_xor_sync(0xffffffffu, L, o));
  return {L, w0, w1};
}

/**
 * K output values of one (row, head) from its n records at `rec`: element e[k] (< d) is Σ_c acc_c ·
 * w[c] in chunk order (f32 fma), / L, × σ(gate) when gated (`gate`: the head's gate row, or 0), into
 * `out` (the head's output row). Elements past d are skipped; the loads of a chunk are issued together.
 */
template <int K, typename T>
__device__ __forceinline__ void merge_values(const float* rec, int n, int d, const int (&e)[K], const float* w, float L,
                                             const T* __restrict__ gate, T* __restrict__ out) {
  const size_t R = (size_t)d + 2;
  float o[K];
#pragma unroll
  for (int k = 0; k < K; k++) o[k] = 0.f;
  for (int c = 0; c < n; c++) {
    const float wc = w[c];
#pragma unroll
    for (int k = 0; k < K; k++) {
      if (e[k] < d) o[k] = __fmaf_rn(__ldcg(rec + c * R + 2 + e[k]), wc, o[k]);
    }
  }
#pragma unroll
  for (int k = 0; k < K; k++) {
    if (e[k] < d) store_value(out, e[k], __fdiv_rn(o[k], L) * (gate ? sigmoid(ldg_value(gate, e[k])) : 1.f));
  }
}

/** One pass of a split-KV CTA: heads h0 … h0 + ng − 1 of `row` over keys a … a + nkeys − 1 of kv head kvh, chunk c of the row's nChunks. */
struct ChunkPass {
  int row, h0, ng, kvh, a, nkeys, c, nChunks;
};

/**
 * The walk of a split-KV CTA of grid [rows, kvHeads, splits]: rows blockIdx.x, + gridDim.x, …; a
 * padding row (slot < 0) gets its group's zeros from the CTAs of z = 0, any other its chunks z, z +
 * splits, … and in each the group's heads HG at a time, as pass(ChunkPass, the row's page table).
 * Barriers are the pass's.
 */
template <int HG, typename T, typename Fn>
__device__ __forceinline__ void for_each_chunk(const int32_t* __restrict__ blockTable, const int32_t* __restrict__ slots,
                                               const int32_t* __restrict__ rowStarts, const int32_t* __restrict__ positions, int batch,
                                               int heads, int kvHeads, int d, int maxPages, int window, int maxChunks, T* __restrict__ out,
                                               Fn&& pass) {
  const int rows = rowStarts[batch];
  const int group = heads / kvHeads;
  const int kvh = blockIdx.y;
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    const int p = batch_pos_of_row(rowStarts, batch, row);
    const int slot = slots[p];
    const int pos = positions[row];
    if (slot < 0) {
      if (blockIdx.z == 0) {
        for (int i = threadIdx.x; i < group * d; i += blockDim.x) store_value(out, ((size_t)row * heads + kvh * group) * d + i, 0.f);
      }
      continue;
    }
    const int32_t* table = blockTable + (size_t)slot * maxPages;
    const int lo = first_key(pos, window);
    const KeyChunks ch = key_chunks(pos - lo + 1, maxChunks);
    for (int c = blockIdx.z; c < ch.n; c += gridDim.z) {
      const int a = lo + c * ch.size;
      const int nkeys = min(ch.size, pos + 1 - a);
      for (int g0 = 0; g0 < group; g0 += HG) pass(ChunkPass{row, kvh * group + g0, min(HG, group - g0), kvh, a, nkeys, c, ch.n}, table);
    }
  }
}

}  // namespace stdk
