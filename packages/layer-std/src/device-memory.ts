// A layer's device allocations: core's `DeviceMemory`, which every plugin's layers share.
export { DeviceMemory } from '@metrale/core';
