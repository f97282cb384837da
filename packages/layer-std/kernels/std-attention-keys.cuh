// How a decode row's keys are cut into chunks and where each chunk's partial record lies, shared by
// the split-KV decode kernels (std-attention.cu on CUDA cores, std-attention-decode.cu on tensor
// cores) and std_attn_combine; the same rule as keyChunksOf in src/key-chunks.ts. Also the two
// kernels' walk over a CTA's rows, chunks and head groups (for_each_chunk).
#pragma once
#include "std-common.cuh"

namespace stdk {

/** Keys per tile of std_attn_decode, and its warps (DECODE_TILE_KEYS, DECODE_WARPS in src/key-chunks.ts). */
constexpr int kDecodeTileKeys = 16;
constexpr int kDecodeWarps = 4;
/** Chunk sizes are multiples of kChunkAlign keys: whole tiles for every warp of std_attn_decode. */
constexpr int kChunkAlign = kDecodeTileKeys * kDecodeWarps;
/** A row's keys are cut into chunks of at least kMinChunk keys (a tile for each warp), at most kMaxChunks (src/key-chunks.ts has both). */
constexpr int kMinChunk = kChunkAlign;
constexpr int kMaxChunks = 64;

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
