// probe(): whether CUDA can be used here and, if not, why — without throwing and without
// creating a context. Each step names the first thing missing: the addon, the driver library,
// cuInit, devices.
import type { BackendProbe, DeviceInfo } from '@metrale/core';
import { loadAddon, type NativeDeviceInfo } from './addon.js';

export interface CudaProbe extends BackendProbe {
  /** cuDriverGetVersion (e.g. 13000 for CUDA 13.0) when the driver could be asked. */
  readonly driverVersion?: number;
}

export function toDeviceInfo(d: NativeDeviceInfo): DeviceInfo {
  return Object.freeze({
    index: d.index,
    name: d.name,
    computeCapability: Object.freeze([d.major, d.minor] as const),
    totalMemory: d.totalMemory,
    multiprocessors: d.multiprocessors,
    l2CacheBytes: d.l2CacheBytes,
  });
}

function describe(d: DeviceInfo): string {
  const gib = (d.totalMemory / 2 ** 30).toFixed(1);
  const l2 = (d.l2CacheBytes / 2 ** 20).toFixed(0);
  return `${d.name} (sm_${d.computeCapability[0]}${d.computeCapability[1]}, ${gib} GiB, ${d.multiprocessors} SMs, L2 ${l2} MiB)`;
}

function unavailable(reason: string, driverVersion?: number): CudaProbe {
  return Object.freeze({ available: false, reason, devices: Object.freeze([]), ...(driverVersion ? { driverVersion } : {}) });
}

export function probe(): CudaProbe {
  try {
    const load = loadAddon();
    if (!load.ok) return unavailable(load.reason);
    const addon = load.addon;
    const driver = addon.loadDriver();
    if (!driver.ok) return unavailable(`libcuda.so.1 not found (no NVIDIA driver): ${driver.error}`);
    const init = addon.init();
    if (init.result === 100) return unavailable(`no CUDA devices (cuInit: ${init.code}: ${init.text})`);
    if (init.result !== 0) return unavailable(`cuInit failed: ${init.code}: ${init.text}`);
    const driverVersion = addon.driverVersion();
    const count = addon.deviceCount();
    if (count === 0) return unavailable('no CUDA devices', driverVersion);
    const devices = Object.freeze(Array.from({ length: count }, (_, i) => toDeviceInfo(addon.deviceInfo(i))));
    const version = `${Math.floor(driverVersion / 1000)}.${(driverVersion % 1000) / 10}`;
    return Object.freeze({
      available: true,
      reason: `CUDA driver ${version}, ${count} device(s): ${devices.map(describe).join('; ')}`,
      devices,
      driverVersion,
    });
  } catch (error) {
    return unavailable(`CUDA probe failed: ${(error as Error).message}`);
  }
}

/**
 * The addon's check of its own numeric constants against the names the loaded driver (and
 * cuBLASLt, once a backend loaded it) gives them; `checked` is 0 where no driver is loaded.
 */
export function selfCheck(): { ok: boolean; checked: number; problems: string[] } {
  const load = loadAddon();
  if (!load.ok) return { ok: false, checked: 0, problems: [load.reason] };
  load.addon.loadDriver();
  return load.addon.selfCheck();
}
