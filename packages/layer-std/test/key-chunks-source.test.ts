// The split-KV cut is written twice, in kernels/std-attention-keys.cuh (what the kernels run) and in
// src/key-chunks.ts (what the launches and the CPU twins run); a mismatch shows only on a GPU. This
// reads the header's constants and holds them to the TypeScript ones, and checks that the header
// derives the alignment and the minimum chunk from the tiles and warps as the TypeScript does.
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { KEY_CHUNK_ALIGN, MAX_KEY_CHUNKS, MIN_KEY_CHUNK } from '@metrale/layer-std';
import { describe, expect, it } from 'vitest';

const header = readFileSync(join(dirname(fileURLToPath(import.meta.url)), '..', 'kernels', 'std-attention-keys.cuh'), 'utf8');

/** The right-hand side of `constexpr int NAME = …;` in the header. */
function constant(name: string): string {
  const m = header.match(new RegExp(`constexpr int ${name} = ([^;]+);`));
  expect(m, `kernels/std-attention-keys.cuh defines ${name}`).not.toBeNull();
  return m![1]!.trim();
}

describe('split-KV key chunks: the kernel header and src/key-chunks.ts agree', () => {
  it('tile keys × warps is the alignment, the alignment is the minimum chunk, and the chunk cap is the same', () => {
    const tileKeys = Number(constant('kDecodeTileKeys'));
    const warps = Number(constant('kDecodeWarps'));
    expect(tileKeys * warps).toBe(KEY_CHUNK_ALIGN);
    expect(constant('kChunkAlign')).toBe('kDecodeTileKeys * kDecodeWarps');
    expect(constant('kMinChunk')).toBe('kChunkAlign');
    expect(MIN_KEY_CHUNK).toBe(KEY_CHUNK_ALIGN);
    expect(Number(constant('kMaxChunks'))).toBe(MAX_KEY_CHUNKS);
  });
});
