// The random-weight model shapes of the benches, by the name `--model` takes.
import { randomGemma3nModel } from './gemma3n-e4b.mjs';
import { randomQwen35MoeModel, DEFAULT_EXPERTS as QWEN35_EXPERTS } from './qwen3-5-moe.mjs';
import { random80bModel, DEFAULT_EXPERTS as QWEN3_NEXT_EXPERTS } from './qwen3-next-80b.mjs';

export { BLOCK, benchPrompt } from './shared.mjs';

/** Each shape's builder and, for a MoE, the experts kept when --experts is not given. */
export const MODELS = {
  'qwen3-next-80b': { build: random80bModel, experts: QWEN3_NEXT_EXPERTS },
  'qwen3.5-moe': { build: randomQwen35MoeModel, experts: QWEN35_EXPERTS },
  'gemma3n-e4b': { build: randomGemma3nModel },
};

/**
 * The model `name` (a key of MODELS) with `options` ({ dtype, experts, layers, tiny }): its config
 * (`config`, and `text` for the text model's fields), precision, weights, plan, bytes and decode floor.
 */
export function randomModel(name, { experts, ...options } = {}) {
  const shape = MODELS[name];
  if (!shape) throw new Error(`--model must be one of ${Object.keys(MODELS).join(', ')}, got ${name}`);
  if (experts !== undefined && shape.experts === undefined) throw new Error(`--experts applies to the MoE shapes, not ${name}`);
  return shape.build({ ...options, ...(shape.experts !== undefined ? { experts: experts ?? shape.experts } : {}) });
}
