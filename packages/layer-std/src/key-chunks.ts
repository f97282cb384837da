// How a decode or verify row's keys are cut into the chunks of split-KV attention: the rule of
// kernels/std-attention-keys.cuh (kMinChunk, kMaxChunks, kChunkAlign, key_chunks), which the
// kernels, their CPU twins and the layer's launches must all follow.

/** A row's keys are cut into chunks of at least this many keys (a tile of 16 for each of std.attn_decode's 4 warps). */
export const MIN_KEY_CHUNK = 64;
/** The most chunks a row is cut into. */
export const MAX_KEY_CHUNKS = 64;
/** Chunk sizes are multiples of this many keys: whole tiles for every warp of std.attn_decode. */
export const KEY_CHUNK_ALIGN = 64;

/** key_chunks: `n` chunks of `size` keys (a multiple of KEY_CHUNK_ALIGN; the last shorter) for a row of `len` keys, at most `maxChunks`. */
export function keyChunksOf(len: number, maxChunks: number): { readonly n: number; readonly size: number } {
  const want = Math.max(1, Math.min(maxChunks, Math.ceil(len / MIN_KEY_CHUNK)));
  const size = Math.ceil(Math.ceil(len / want) / KEY_CHUNK_ALIGN) * KEY_CHUNK_ALIGN;
  return { n: Math.ceil(len / size), size };
}
