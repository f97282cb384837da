// The public API of @metrale/cpu-backend: the reference device and its probe.
export { CpuBackend } from './cpu-backend.js';
export type { CpuBackendOptions } from './backend-options.js';
export type { CpuBackendStats } from './backend-stats.js';
export { probe } from './probe.js';
export type { CpuGroupOptions } from './shared-group.js';
