// A tokenizer thread of `metrale serve` (run by tinypool, see tokenizer-pool.ts): it loads the
// checkpoint's tokenizer and chat template once, then tokenizes, renders and decodes on request,
// so that a long prompt never holds the HTTP thread's event loop.
import { Checkpoint } from '@metrale/core';
import { Tinypool } from 'tinypool';
import { TextCodec } from '../generate/text-codec.js';
import type { TokenizerResult, TokenizerTask, TokenizerWorkerData } from './tokenizer-tasks.js';

function load(): TextCodec {
  const { dir } = Tinypool.workerData as TokenizerWorkerData;
  const checkpoint = Checkpoint.open(dir);
  try {
    const codec = TextCodec.fromCheckpoint(checkpoint);
    if (!codec) throw new Error(`${dir} has no tokenizer.json`);
    return codec;
  } finally {
    checkpoint.close();
  }
}

const codec = load();

const moved = (ids: readonly number[]): TokenizerResult => Tinypool.move(Int32Array.from(ids)) as unknown as Int32Array;

export default function run(task: TokenizerTask): TokenizerResult {
  switch (task.op) {
    case 'encode':
      return moved(codec.encode(task.text, task.addSpecialTokens));
    case 'chat': {
      let text: string;
      try {
        text = codec.renderChat(task.messages, task.addGenerationPrompt, task.tools);
      } catch (error) {
        return { templateError: (error as Error).message };
      }
      // The template wrote the special tokens itself.
      return moved(codec.encode(text, false));
    }
    case 'decode':
      return { text: codec.decode(task.ids) };
  }
}
