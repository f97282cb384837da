// How a decode or verify row's keys are cut into the chunks of split-KV attention: the rule of
// kernels/std-attention-keys.cuh (kMinChunk, kMaxChunks, kChunkAlign, key_chunks), which the
// kernels, their CPU twins and the layer's launches must all follow, and the decode kernel's tiles
// and warps it is made of (the launch's shared memory and the twin's warp order take them too).

/** Keys per tile of std.attn_decode, and its warps (kDecodeTileKeys, kDecodeWarps in kernels/std-attention-keys.cuh). */
export const DECODE_TILE_KEYS = 16;
export const DECODE_WARPS = 4;
/** Chunk sizes are multiples of this many keys: whole tiles for every warp of std.attn_decode. */
export const KEY_CHUNK_ALIGN = DECODE_TILE_KEYS * DECODE_WARPS;
/** A row's keys are cut into chunks of at least this many keys: a tile for each warp. */
export const MIN_KEY_CHUNK = KEY_CHUNK_ALIGN;
/** The most chunks a row is cut into. */
export const MAX_KEY_CHUNKS = 64;

/** key_chunks: `n` chunks of `size` keys (a multiple of KEY_CHUNK_ALIGN; the last shorter) for a row of `len` keys, at most `maxChunks`. */
export function keyChunksOf(len: number, maxChunks: number): { readonly n: number; readonly size: number } {
  const want = Math.max(1, Math.min(maxChunks, Math.ceil(len / MIN_KEY_CHUNK)));
  const size = Math.ceil(Math.ceil(len / want) / KEY_CHUNK_ALIGN) * KEY_CHUNK_ALIGN;
  return { n: Math.ceil(len / size), size };
}
