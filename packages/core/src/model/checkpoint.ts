import { existsSync, readFileSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { WeightsError } from '../errors.js';
import { CheckpointWeights } from './checkpoint-weights.js';

const INDEX = 'model.safetensors.index.json';
const SINGLE = 'model.safetensors';

/**
 * A Hugging Face checkpoint directory as `save_pretrained` writes it: `config.json` and the
 * weights, in `model.safetensors` or in shards listed by `model.safetensors.index.json`, and
 * optionally the tokenizer and generation files.
 */
export class Checkpoint {
  readonly dir: string;
  readonly config: Readonly<Record<string, unknown>>;
  readonly weights: CheckpointWeights;

  private constructor(dir: string, config: Record<string, unknown>, weights: CheckpointWeights) {
    this.dir = dir;
    this.config = config;
    this.weights = weights;
  }

  /** Reads config.json and the safetensors headers; tensor data is read when asked for. */
  static open(dir: string): Checkpoint {
    const root = resolve(dir);
    if (!existsSync(root) || !statSync(root).isDirectory()) throw new WeightsError(`not a checkpoint directory (it does not exist or is not a directory)`, root);
    const config = readJson(join(root, 'config.json'), 'the model config');
    if (typeof config !== 'object' || config === null || Array.isArray(config)) throw new WeightsError('expected a JSON object', join(root, 'config.json'));
    const index = join(root, INDEX);
    let weights: CheckpointWeights;
    if (existsSync(index)) weights = CheckpointWeights.sharded(index, root, readJson(index, 'the shard index'));
    else if (existsSync(join(root, SINGLE))) weights = CheckpointWeights.single(join(root, SINGLE), root);
    else throw new WeightsError(`no weights: neither ${SINGLE} nor ${INDEX} is in the directory`, root);
    return new Checkpoint(root, config as Record<string, unknown>, weights);
  }

  /** Path of a file of the checkpoint, or undefined when it is absent. */
  file(name: string): string | undefined {
    const p = join(this.dir, name);
    return existsSync(p) ? p : undefined;
  }

  /** A JSON file of the checkpoint (tokenizer_config.json, generation_config.json), or undefined. */
  json(name: string): Record<string, unknown> | undefined {
    const p = this.file(name);
    return p ? (readJson(p, name) as Record<string, unknown>) : undefined;
  }

  close(): void {
    this.weights.close();
  }
}

function readJson(path: string, what: string): unknown {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (cause) {
    throw new WeightsError(`cannot read ${what}: ${(cause as NodeJS.ErrnoException).code ?? (cause as Error).message}`, path, { cause });
  }
  try {
    return JSON.parse(text) as unknown;
  } catch (cause) {
    throw new WeightsError(`${what} is not valid JSON: ${(cause as Error).message}`, path, { cause });
  }
}
