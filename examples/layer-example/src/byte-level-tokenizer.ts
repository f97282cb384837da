/** The special tokens, after the 256 byte tokens: ids 256, 257, 258. */
export const SPECIAL_TOKENS = ['<|endoftext|>', '<|im_start|>', '<|im_end|>'] as const;

/** ChatML, as Qwen's templates write it. */
export const CHAT_TEMPLATE =
  "{% for message in messages %}{{ '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/** GPT-2's printable stand-in for each byte, as byte-level BPE vocabularies spell bytes. */
function byteCharacters(): string[] {
  const printable = (b: number) => (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  const chars: string[] = [];
  let shifted = 0;
  for (let b = 0; b < 256; b++) chars.push(String.fromCharCode(printable(b) ? b : 256 + shifted++));
  return chars;
}

/**
 * A `tokenizer.json` for byte-level BPE without merges: every byte is one token (id = the byte),
 * so any text encodes and a vocabulary of 259 is enough for a tiny model to chat.
 */
export function byteLevelTokenizer(): Record<string, unknown> {
  const vocab = Object.fromEntries(byteCharacters().map((c, b) => [c, b]));
  const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: SPECIAL_TOKENS.map((content, i) => ({ id: 256 + i, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })),
    normalizer: null,
    pre_tokenizer: byteLevel,
    post_processor: null,
    decoder: byteLevel,
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab, merges: [] },
  };
}
