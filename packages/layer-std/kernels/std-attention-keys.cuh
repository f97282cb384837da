// How a decode row's keys are cut into chunks and where each chunk's partial record lies, shared by
// the split-KV decode kernels (std-attention.cu on CUDA cores, std-attention-decode.cu on tensor
// cores) and std_attn_combine; the same rule as keyChunksOf in src/attention.cpu.ts.
#pragma once
#include "std-common.cuh"

namespace stdk {

/** A row's keys are cut into chunks of at least kMinChunk keys, at most kMaxChunks (attention-kernels.ts has both). */
constexpr int kMinChunk = 128;
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

}  // namespace stdk
