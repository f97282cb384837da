// The one engine loop (continuous batching over the step driver) that serves, generates and benchmarks.
export type { EngineRequest, FinishReason, TokenEvent, EngineStepReport } from './engine-request.js';
export type { EngineLoopOptions } from './engine-loop.js';
export type { DeviceTokenPicker, PickedTokens, SampledRow, SampledTokens } from './device-token-picker.js';
export { ARGMAX_ROW, sampledRow } from './device-token-picker.js';
export { EngineLoop } from './engine-loop.js';
export { RequestSampler } from './request-sampler.js';
export type { GenerateRequest, GenerateOutput, GenerateStats, SpeculationStats } from './generate-all.js';
export { generateAll } from './generate-all.js';
export type { TokenConstraint } from './token-constraint.js';
export { ConstraintDeadEndError, maskLogitsRow } from './token-constraint.js';
