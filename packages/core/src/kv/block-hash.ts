import { createHash } from 'node:crypto';

/**
 * The content hashes of the full blocks of `tokens` (blocks of `pageSize` tokens), from block
 * `from` on: each hashes its parent's hash and its own token ids, so a hash names the whole
 * prefix up to the block's end, and two sequences share a block only when they share every token
 * before it. `parents` holds the hashes of blocks 0 … from − 1.
 */
export function blockHashes(tokens: ArrayLike<number>, pageSize: number, parents: readonly string[] = [], upTo = Math.floor(tokens.length / pageSize)): string[] {
  const out = parents.slice();
  const ids = new Int32Array(pageSize);
  for (let b = parents.length; b < upTo; b++) {
    for (let j = 0; j < pageSize; j++) ids[j] = tokens[b * pageSize + j]!;
    const h = createHash('sha256');
    h.update(b === 0 ? 'root' : out[b - 1]!);
    h.update(new Uint8Array(ids.buffer));
    out.push(h.digest('base64'));
  }
  return out;
}
