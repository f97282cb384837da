import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { WeightsError } from '@metrale/core';
import { afterEach, describe, expect, it } from 'vitest';
import { samplingDefaults } from '../src/engine/generation-defaults.js';

const dirs: string[] = [];
function folder(config?: unknown): string {
  const dir = mkdtempSync(join(tmpdir(), 'metrale-gencfg-'));
  dirs.push(dir);
  if (config !== undefined) writeFileSync(join(dir, 'generation_config.json'), typeof config === 'string' ? config : JSON.stringify(config));
  return dir;
}
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe("generation_config.json's sampling defaults", () => {
  it("takes vLLM's six fields (max_new_tokens as max_tokens) and nothing else", () => {
    const dir = folder({ temperature: 0.6, top_p: 0.95, top_k: 20, min_p: 0, repetition_penalty: 1.05, max_new_tokens: 512, do_sample: false, eos_token_id: [1, 2], typical_p: 0.5 });
    expect(samplingDefaults('auto', dir)).toEqual({ temperature: 0.6, top_p: 0.95, top_k: 20, min_p: 0, repetition_penalty: 1.05, max_tokens: 512 });
  });

  it("'vllm' has none; a checkpoint without the file has none; a folder given without one is an error", () => {
    const dir = folder({ temperature: 0.6 });
    expect(samplingDefaults('vllm', dir)).toEqual({});
    expect(samplingDefaults('auto', folder())).toEqual({});
    expect(samplingDefaults(dir, folder())).toEqual({ temperature: 0.6 });
    expect(() => samplingDefaults(folder(), dir)).toThrow(WeightsError);
  });

  it('refuses a value a request could not send, naming the file and the field', () => {
    expect(() => samplingDefaults('auto', folder({ top_p: 0 }))).toThrow(/generation_config\.json: top_p must be in \(0, 1\], got 0/);
    expect(() => samplingDefaults('auto', folder({ repetition_penalty: -1 }))).toThrow(/repetition_penalty/);
    expect(() => samplingDefaults('auto', folder({ max_new_tokens: 2.5 }))).toThrow(/max_new_tokens must be a positive integer/);
    expect(() => samplingDefaults('auto', folder({ temperature: '0.7' }))).toThrow(/temperature/);
    expect(() => samplingDefaults('auto', folder('{ not json'))).toThrow(/cannot read the sampling defaults/);
  });
});
