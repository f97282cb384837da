import { CpuBackend } from '@metrale/cpu-backend';
import { describe, expect, it } from 'vitest';
import type { Stream } from '../src/index.js';
import { faultInjectingBackend } from '../src/testing/index.js';

/** Captures an empty graph on `stream`; true when endCapture reported the capture invalidated. */
function captureFails(gpu: CpuBackend | ReturnType<typeof faultInjectingBackend>['gpu'], stream: Stream): boolean {
  gpu.beginCapture(stream);
  try {
    gpu.destroyGraph(gpu.endCapture(stream));
    return false;
  } catch {
    return true;
  }
}

describe('faultInjectingBackend', () => {
  it('fails every capture, none, or the ones a function picks, and counts them', () => {
    const inner = new CpuBackend();
    try {
      const stream = inner.createStream();
      const all = faultInjectingBackend(inner, { failCaptures: true });
      expect([captureFails(all.gpu, stream), captureFails(all.gpu, stream)]).toEqual([true, true]);
      expect(all.counts.failedCaptures).toBe(2);

      const none = faultInjectingBackend(inner, { failCaptures: false });
      expect(captureFails(none.gpu, stream)).toBe(false);
      expect(none.counts.failedCaptures).toBe(0);

      let failNext = false;
      const picked = faultInjectingBackend(inner, {
        failCaptures: (s) => {
          expect(s).toBe(stream);
          const fail = failNext;
          failNext = false;
          return fail;
        },
      });
      const seen: boolean[] = [];
      for (const f of [false, true, false]) {
        failNext = f;
        seen.push(captureFails(picked.gpu, stream));
      }
      expect(seen).toEqual([false, true, false]);
      expect(picked.counts).toMatchObject({ failedCaptures: 1, hostToDeviceBytes: 0, hostToDeviceCopies: 0 });
    } finally {
      inner.dispose();
    }
  });

  it('counts host → device copies made outside captures only', () => {
    const inner = new CpuBackend();
    try {
      const { gpu, counts } = faultInjectingBackend(inner, { failCaptures: false });
      const ptr = gpu.alloc(64);
      const host = gpu.allocHost(64);
      const stream = gpu.createStream();
      gpu.upload(ptr, new Float32Array(4));
      gpu.copyToDeviceAsync(ptr, host, 0, 8, stream);
      gpu.beginCapture(stream);
      gpu.copyToDeviceAsync(ptr, host, 0, 32, stream);
      gpu.destroyGraph(gpu.endCapture(stream));
      expect(counts).toEqual({ hostToDeviceBytes: 24, hostToDeviceCopies: 2, failedCaptures: 0 });
      gpu.freeHost(host);
      gpu.free(ptr);
    } finally {
      inner.dispose();
    }
  });
});
