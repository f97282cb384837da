import { readFileSync } from 'node:fs';
import { WeightsError } from '@metrale/core';

/** A tokenizer's vocabulary as xgrammar's TokenizerInfo takes it. */
export interface TokenizerVocabulary {
  /** Every token id's encoded form (as tokenizer.json stores it), `''` for ids the tokenizer lacks. */
  readonly encoded: string[];
  /** How the encoded forms decode: GPT-2 byte-level BPE, SentencePiece byte fallback, or as they are. */
  readonly vocabType: 'byte_level' | 'byte_fallback' | 'raw';
  /** The tokenizer adds a space before the text (SentencePiece's ▁ prefix). */
  readonly prependSpace: boolean;
}

interface TokenizerJson {
  model?: { type?: string; vocab?: Record<string, number> | [string, number][] };
  added_tokens?: { id: number; content: string }[];
  decoder?: DecoderJson | null;
  pre_tokenizer?: { type?: string; prepend_scheme?: string; add_prefix_space?: boolean } | null;
}

interface DecoderJson {
  type?: string;
  decoders?: DecoderJson[];
  add_prefix_space?: boolean;
  prepend_scheme?: string;
}

const decoders = (d: DecoderJson | null | undefined): DecoderJson[] => (!d ? [] : d.type === 'Sequence' ? (d.decoders ?? []).flatMap(decoders) : [d]);

/**
 * The served tokenizer's vocabulary from its `tokenizer.json`, padded to `vocabSize` (the logits'
 * width, which a checkpoint may round up past the tokenizer's last id). The vocabulary type is read
 * off the decoder, as xgrammar's own `TokenizerInfo.from_huggingface` does.
 */
export function readTokenizerVocabulary(path: string, vocabSize: number): TokenizerVocabulary {
  let json: TokenizerJson;
  try {
    json = JSON.parse(readFileSync(path, 'utf8')) as TokenizerJson;
  } catch (cause) {
    throw new WeightsError(`cannot read the tokenizer for structured output: ${(cause as Error).message}`, path, { cause });
  }
  const encoded = new Array<string>(vocabSize).fill('');
  const vocab = json.model?.vocab;
  if (!vocab) throw new WeightsError('tokenizer.json has no model.vocab: structured output needs the vocabulary', path);
  // Unigram models list [piece, score] in id order; BPE and WordPiece map piece → id.
  const entries: [string, number][] = Array.isArray(vocab) ? vocab.map(([piece], id) => [piece, id]) : Object.entries(vocab);
  for (const [piece, id] of entries) if (id < vocabSize) encoded[id] = piece;
  for (const t of json.added_tokens ?? []) if (t.id < vocabSize) encoded[t.id] = t.content;
  const steps = decoders(json.decoder);
  const vocabType = steps.some((d) => d.type === 'ByteLevel') ? 'byte_level' : steps.some((d) => d.type === 'ByteFallback') ? 'byte_fallback' : 'raw';
  const metaspace = [...steps, ...(json.pre_tokenizer ? [json.pre_tokenizer as DecoderJson] : [])].find((d) => d.type === 'Metaspace');
  const prependSpace = metaspace !== undefined && (metaspace.add_prefix_space === true || metaspace.prepend_scheme === 'always' || metaspace.prepend_scheme === 'first');
  return { encoded, vocabType, prependSpace };
}
