// Messages between the engine thread (grammar-host.ts) and a grammar host thread
// (grammar-host-worker.ts), and the layout of the shared mask slot each constraint owns.
import type { GrammarSpec } from './grammar-spec.js';

export interface GrammarHostData {
  /** The served tokenizer.json. */
  readonly tokenizerPath: string;
  /** Logit row width (config.vocab_size). */
  readonly vocabSize: number;
  /** Tokens that end a generation: allowed where the grammar is complete. */
  readonly stopTokenIds: readonly number[];
}

/** Bring matcher `id` to a new state (roll back, then accept), then write its next mask into its slot, tagged `seq`. */
export interface MaskRequest {
  readonly id: number;
  readonly seq: number;
  readonly rollback: number;
  readonly accept: readonly number[];
}

export type ToHost =
  /** Check and compile a grammar (cached by its text); answered by 'compiled'. */
  | { readonly t: 'compile'; readonly key: number; readonly spec: GrammarSpec }
  /** A matcher `id` at the start of an already compiled grammar, writing its masks into `slot`; answered by 'opened'. */
  | { readonly t: 'open'; readonly key: number; readonly id: number; readonly spec: GrammarSpec; readonly slot: SharedArrayBuffer }
  /** Masks for every constrained row of a step that this host serves, in one message. */
  | { readonly t: 'masks'; readonly reqs: readonly MaskRequest[] }
  | { readonly t: 'close'; readonly id: number };

export type FromHost =
  | { readonly t: 'compiled'; readonly key: number; readonly error?: string }
  /** `evicted`: the grammar left the host's cache since it compiled; compile it again. */
  | { readonly t: 'opened'; readonly key: number; readonly error?: string; readonly evicted?: boolean };

/**
 * A constraint's mask slot, an Int32Array over a SharedArrayBuffer: the host writes the mask and
 * then stores the request's `seq` in SLOT_SEQ (and notifies); the engine thread waits on that word.
 */
export const SLOT_SEQ = 0;
/** 0: the mask is valid; 1: the request failed, its reason is in the error bytes. */
export const SLOT_STATUS = 1;
export const SLOT_ERROR_BYTES = 2;
export const SLOT_HEADER_WORDS = 4;
export const SLOT_ERROR_CAPACITY = 1024;

/** Words of a mask over `vocabSize` tokens (bit t & 31 of word t >> 5). */
export const maskWords = (vocabSize: number): number => Math.ceil(vocabSize / 32);

/** A new slot for masks over `vocabSize` tokens. */
export function newMaskSlot(vocabSize: number): SharedArrayBuffer {
  return new SharedArrayBuffer((SLOT_HEADER_WORDS + maskWords(vocabSize)) * 4 + SLOT_ERROR_CAPACITY);
}

/** The error bytes of a slot (after the mask words). */
export function slotErrorBytes(slot: SharedArrayBuffer, vocabSize: number): Uint8Array {
  return new Uint8Array(slot, (SLOT_HEADER_WORDS + maskWords(vocabSize)) * 4, SLOT_ERROR_CAPACITY);
}
