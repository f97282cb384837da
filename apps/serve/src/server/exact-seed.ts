import { parse } from 'lossless-json';

/**
 * A JSON number is read as a double, so a seed past 2^53 (vLLM takes any 64-bit one) would lose
 * its low bits and two different seeds would sample alike. A parsed body whose `seed` is such a
 * number is read again, exactly, and its seed becomes a bigint; every other body is left as parsed.
 */
export function withExactSeed(body: unknown, text: string | Uint8Array): unknown {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return body;
  const seed = (body as { seed?: unknown }).seed;
  if (typeof seed !== 'number' || !Number.isInteger(seed) || Number.isSafeInteger(seed)) return body;
  const source = typeof text === 'string' ? text : Buffer.from(text.buffer, text.byteOffset, text.byteLength).toString('utf8');
  const exact = (parse(source, null, (digits: string) => digits) as { seed?: unknown }).seed;
  // An integer written with an exponent or a fraction of zeros (1e19, 5.0) stays the double it is.
  return typeof exact === 'string' && /^-?\d+$/.test(exact) ? { ...body, seed: BigInt(exact) } : body;
}
