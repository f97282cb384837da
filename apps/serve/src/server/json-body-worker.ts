// The thread that parses large JSON request bodies for `metrale serve` (run by tinypool, see
// json-body.ts), with the same poisoning checks as fastify's own JSON parser.
import sjson from 'secure-json-parse';

export type ParsedBody = { readonly value: unknown } | { readonly invalid: true };

export default function parse(bytes: Uint8Array): ParsedBody {
  try {
    return { value: sjson.parse(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength), undefined, { protoAction: 'error', constructorAction: 'error' }) };
  } catch {
    return { invalid: true };
  }
}
