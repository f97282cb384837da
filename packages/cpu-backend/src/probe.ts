import type { BackendProbe } from '@metrale/core';
import { cpuDeviceInfo } from './device-info.js';

/** Reports the CPU backend: always available, one device. Never throws. */
export function probe(): BackendProbe {
  return Object.freeze({
    available: true,
    reason: 'CPU reference device (always available)',
    devices: Object.freeze([cpuDeviceInfo()]),
  });
}
