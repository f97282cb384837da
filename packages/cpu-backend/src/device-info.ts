import os from 'node:os';
import type { DeviceInfo } from '@metrale/core';

/** The CPU reference device as a `DeviceInfo`; `totalMemory` is the arena's limit. */
export function cpuDeviceInfo(totalMemory: number = os.totalmem()): DeviceInfo {
  return Object.freeze({
    index: 0,
    name: 'metrale CPU reference device',
    computeCapability: Object.freeze([0, 0] as const),
    totalMemory,
    multiprocessors: os.availableParallelism(),
    l2CacheBytes: 0,
  });
}
