import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Checkpoint } from '@metrale/core';
import { afterAll, describe, expect, it } from 'vitest';
import { EMBEDDED_CONFIG, ensureEmbeddedModel, moveIntoPlace, writeEmbeddedModel } from '../../src/embedded/embedded-model.js';
import { TextCodec } from '../../src/generate/text-codec.js';

const cache = mkdtempSync(join(tmpdir(), 'metrale-embedded-'));
afterAll(() => rmSync(cache, { recursive: true, force: true }));

describe('the embedded model', () => {
  it('is written once, reused, identical byte for byte, and rewritten when damaged', () => {
    const first = ensureEmbeddedModel(cache);
    expect(first.created).toBe(true);
    const weights = readFileSync(join(first.dir, 'model.safetensors'));
    const again = ensureEmbeddedModel(cache);
    expect(again).toMatchObject({ dir: first.dir, created: false });
    // A second cache gets the same bytes: the weights come from a fixed seed, not the machine.
    const other = mkdtempSync(join(tmpdir(), 'metrale-embedded-'));
    try {
      expect(readFileSync(join(ensureEmbeddedModel(other).dir, 'model.safetensors')).equals(weights)).toBe(true);
    } finally {
      rmSync(other, { recursive: true, force: true });
    }
    // A truncated weight file does not verify: the next start writes the model again.
    writeFileSync(join(first.dir, 'model.safetensors'), weights.subarray(0, 1000));
    const repaired = ensureEmbeddedModel(cache);
    expect(repaired.created).toBe(true);
    expect(readFileSync(join(first.dir, 'model.safetensors')).equals(weights)).toBe(true);
  });

  it('keeps the copy a second server put in place first (it may be reading it) and replaces only a damaged one', () => {
    const { dir } = ensureEmbeddedModel(cache);
    // The first server's copy, marked: a second server that wrote its own meanwhile must not replace it.
    writeFileSync(join(dir, 'in-use'), '1');
    const tmp = `${dir}.tmp-test`;
    writeEmbeddedModel(tmp);
    moveIntoPlace(tmp, dir);
    expect(existsSync(join(dir, 'in-use'))).toBe(true);
    rmSync(tmp, { recursive: true, force: true });
    rmSync(join(dir, 'in-use'));
    // A damaged copy is replaced by the new one.
    writeFileSync(join(dir, 'config.json'), '{');
    rmSync(join(dir, 'tokenizer.json'));
    writeEmbeddedModel(tmp);
    moveIntoPlace(tmp, dir);
    expect(existsSync(join(dir, 'tokenizer.json'))).toBe(true);
    expect(existsSync(tmp)).toBe(false);
    expect(ensureEmbeddedModel(cache).created).toBe(false);
  });

  it('is an ordinary checkpoint with a real tokenizer and chat template', () => {
    const { dir } = ensureEmbeddedModel(cache);
    const checkpoint = Checkpoint.open(dir);
    try {
      expect(checkpoint.config.model_type).toBe('qwen3_next');
      expect(checkpoint.config.layer_types).toEqual(EMBEDDED_CONFIG.layer_types);
      const codec = TextCodec.fromCheckpoint(checkpoint)!;
      expect(codec.hasChatTemplate).toBe(true);
      const ids = codec.encode('Hello, world');
      expect(codec.decode(ids)).toBe('Hello, world');
      expect(codec.chat('hi')).toContain('<|im_start|>user');
    } finally {
      checkpoint.close();
    }
  });
});
