// gpuLaneDevice (src/testing/gpu-lane.ts): the device a plugin's GPU lane runs on — a stand-in
// module when the lane's variable names one, else the CUDA backend's probe, else why not.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { gpuLaneDevice } from '../src/testing/index.js';

const ENV = 'METRALE_TEST_LANE_DEVICE_MODULE';
afterEach(() => {
  delete process.env[ENV];
});

describe('gpuLaneDevice', () => {
  it('takes the stand-in module the variable names, and says it is one', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'lane-'));
    const mod = join(dir, 'stand-in.mjs');
    writeFileSync(mod, "export function createDevice() { return { kind: 'stand-in' }; }\n");
    process.env[ENV] = mod;
    const d = await gpuLaneDevice({ loadCuda: () => Promise.reject(new Error('not used')), standInEnv: ENV });
    expect(d).toMatchObject({ available: true, standIn: true });
    expect(d.reason).toContain(mod);
    expect(d.create!()).toEqual({ kind: 'stand-in' });
  });

  it('reports the CUDA probe, not a stand-in, when the variable is unset', async () => {
    const probe = { available: false, reason: 'no NVIDIA driver (libcuda.so.1 not found)', devices: [] };
    const d = await gpuLaneDevice({ loadCuda: async () => ({ probe: () => probe, CudaBackend: { create: () => { throw new Error('no'); } } }), standInEnv: ENV });
    expect(d).toMatchObject({ available: false, standIn: false, reason: probe.reason });
  });

  it('says what to do when the CUDA backend cannot be loaded', async () => {
    const d = await gpuLaneDevice({ loadCuda: () => Promise.reject(new Error('Cannot find module')), standInEnv: ENV });
    expect(d.available).toBe(false);
    expect(d.standIn).toBe(false);
    expect(d.reason).toMatch(/could not be loaded \(Cannot find module\); build the workspace first/);
  });
});
