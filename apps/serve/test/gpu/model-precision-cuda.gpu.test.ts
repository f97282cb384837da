// The model fixtures' logprobs against HF in each data path, on CUDA (support/model-precision.ts).
import { probe } from '@metrale/cuda-backend';
import { describeModelPrecision } from '../support/model-precision.js';

const cuda = probe();
if (!cuda.available) console.warn(`[serve gpu] model precision skipped: ${cuda.reason}`);
describeModelPrecision('cuda', cuda.available ? '' : cuda.reason);
