// The model fixtures' logprobs against HF in each data path, on the CPU backend (support/model-precision.ts).
import { describeModelPrecision } from './support/model-precision.js';

describeModelPrecision('cpu');
