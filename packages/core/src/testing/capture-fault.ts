import type { DevicePtr } from '../device/device-ptr.js';
import type { GpuBackend, Graph, HostBuffer, Stream } from '../device/gpu-backend.js';

/** Counts of what a step asked of the device outside capture, compared across paths. */
export interface TransferCounts {
  /** Bytes copied host → device (asynchronous and synchronous), not counting recorded graph nodes. */
  hostToDeviceBytes: number;
  hostToDeviceCopies: number;
}

/** What `faultInjectingBackend` counts: the transfers, and the captures it made fail. */
export interface FaultCounts extends TransferCounts {
  failedCaptures: number;
}

export interface FaultInjectionOptions {
  /**
   * Which captures fail: every one (true), none (false), or each one for which the function,
   * asked once as the capture ends, returns true (e.g. only the capture of a chosen step).
   */
  readonly failCaptures: boolean | ((stream: Stream) => boolean);
}

/**
 * Wraps a backend so that captures fail the way CUDA fails them: a forbidden synchronous call
 * is made inside the capture (and its error swallowed, as a layer would not see it), so
 * `endCapture` reports the invalidated capture. Also counts host → device transfers, so a layer
 * that uploads again on re-arm is caught.
 */
export function faultInjectingBackend(inner: GpuBackend, options: FaultInjectionOptions): { gpu: GpuBackend; counts: FaultCounts } {
  const counts: FaultCounts = { hostToDeviceBytes: 0, hostToDeviceCopies: 0, failedCaptures: 0 };
  const fails = typeof options.failCaptures === 'function' ? options.failCaptures : () => options.failCaptures === true;
  const capturing = new Set<number>();
  const overrides: Partial<GpuBackend> = {
    copyToDeviceAsync(dst: DevicePtr, src: HostBuffer, srcOffset: number, bytes: number, stream?: Stream) {
      if (!(stream && capturing.has(stream.id))) {
        counts.hostToDeviceBytes += bytes;
        counts.hostToDeviceCopies++;
      }
      inner.copyToDeviceAsync(dst, src, srcOffset, bytes, stream);
    },
    upload(dst: DevicePtr, data: ArrayBufferView) {
      if (capturing.size === 0) {
        counts.hostToDeviceBytes += data.byteLength;
        counts.hostToDeviceCopies++;
      }
      inner.upload(dst, data);
    },
    beginCapture(stream: Stream) {
      inner.beginCapture(stream);
      capturing.add(stream.id);
    },
    endCapture(stream: Stream): Graph {
      capturing.delete(stream.id);
      if (fails(stream)) {
        counts.failedCaptures++;
        try {
          // Synchronising a capturing stream is illegal in CUDA and invalidates the capture.
          inner.synchronize(stream);
        } catch {
          // The backend reports it here too; endCapture below reports the failed capture.
        }
      }
      return inner.endCapture(stream);
    },
  };
  // A Proxy, not a prototype chain: backends keep private fields that only the real instance has.
  const gpu = new Proxy(inner, {
    get(target, prop) {
      if (Object.prototype.hasOwnProperty.call(overrides, prop)) return (overrides as Record<PropertyKey, unknown>)[prop];
      const value = Reflect.get(target, prop, target) as unknown;
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
  return { gpu, counts };
}
