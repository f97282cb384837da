// @metrale/core/testing: what a layer author runs in their own tests.
export type { ConformanceOptions, ConformanceReport, CheckResult, CheckStatus } from './conformance.js';
export { runLayerConformance, CONFORMANCE_CHECKS } from './conformance.js';
export { faultInjectingBackend } from './capture-fault.js';
export type { TransferCounts } from './capture-fault.js';
export { relativeError } from './compare.js';
