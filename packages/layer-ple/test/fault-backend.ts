// A backend wrapper for tests: makes chosen captures fail the way CUDA fails them (a synchronise
// on the capturing stream invalidates the capture; endCapture reports it), and counts host →
// device copies made outside captures.
import type { GpuBackend, Graph, HostBuffer, Stream } from '@metrale/core';

export interface FaultControl {
  /** Fail the next capture (cleared once it has failed). */
  failNextCapture: boolean;
  failedCaptures: number;
  hostToDeviceBytes: number;
  hostToDeviceCopies: number;
}

export function controllableBackend(inner: GpuBackend): { gpu: GpuBackend; control: FaultControl } {
  const control: FaultControl = { failNextCapture: false, failedCaptures: 0, hostToDeviceBytes: 0, hostToDeviceCopies: 0 };
  const capturing = new Set<number>();
  const overrides: Partial<GpuBackend> = {
    copyToDeviceAsync(dst: bigint, src: HostBuffer, srcOffset: number, bytes: number, stream?: Stream) {
      if (!(stream && capturing.has(stream.id))) {
        control.hostToDeviceBytes += bytes;
        control.hostToDeviceCopies++;
      }
      inner.copyToDeviceAsync(dst, src, srcOffset, bytes, stream);
    },
    upload(dst: bigint, data: ArrayBufferView) {
      if (capturing.size === 0) {
        control.hostToDeviceBytes += data.byteLength;
        control.hostToDeviceCopies++;
      }
      inner.upload(dst, data);
    },
    beginCapture(stream: Stream) {
      inner.beginCapture(stream);
      capturing.add(stream.id);
    },
    endCapture(stream: Stream): Graph {
      capturing.delete(stream.id);
      if (control.failNextCapture) {
        control.failNextCapture = false;
        control.failedCaptures++;
        try {
          inner.synchronize(stream); // illegal while capturing: invalidates the capture
        } catch {
          // endCapture below reports the failed capture
        }
      }
      return inner.endCapture(stream);
    },
  };
  const gpu = new Proxy(inner, {
    get(target, prop) {
      if (Object.prototype.hasOwnProperty.call(overrides, prop)) return (overrides as Record<PropertyKey, unknown>)[prop];
      const value = Reflect.get(target, prop, target) as unknown;
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
  return { gpu, control };
}
