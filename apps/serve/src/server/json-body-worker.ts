// The thread that parses large JSON request bodies for `metrale serve` (run by tinypool, see
// json-body.ts), with the same poisoning checks as fastify's own JSON parser.
import sjson from 'secure-json-parse';
import { withExactSeed } from './exact-seed.js';

export type ParsedBody = { readonly value: unknown } | { readonly invalid: true };

export default function parse(bytes: Uint8Array): ParsedBody {
  try {
    const text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    return { value: withExactSeed(sjson.parse(text, undefined, { protoAction: 'error', constructorAction: 'error' }), bytes) };
  } catch {
    return { invalid: true };
  }
}
