import type { DevicePtr } from '../device/device-ptr.js';
import type { GpuBackend } from '../device/gpu-backend.js';

/** A layer's device allocations: uploaded or zeroed when made, all freed together. */
export class DeviceMemory {
  readonly #allocations: DevicePtr[] = [];
  constructor(readonly gpu: GpuBackend) {}

  alloc(bytes: number): DevicePtr {
    const p = this.gpu.alloc(Math.max(4, bytes));
    this.#allocations.push(p);
    return p;
  }

  /** Synchronous upload, at construction time (never during capture). */
  upload(data: ArrayBufferView): DevicePtr {
    const p = this.alloc(data.byteLength);
    this.gpu.upload(p, data);
    return p;
  }

  zeroed(bytes: number): DevicePtr {
    const p = this.alloc(bytes);
    this.gpu.memsetAsync(p, 0, Math.max(4, bytes), this.gpu.defaultStream);
    return p;
  }

  /** Waits for the zeroing of `zeroed` buffers. */
  settle(): void {
    this.gpu.synchronize(this.gpu.defaultStream);
  }

  /** Frees `ptrs`, which this memory allocated (storage a layer replaces, such as a re-bound page pool). */
  release(...ptrs: readonly DevicePtr[]): void {
    for (const p of ptrs) {
      const i = this.#allocations.indexOf(p);
      if (i < 0) continue;
      this.#allocations.splice(i, 1);
      this.gpu.free(p);
    }
  }

  free(): void {
    for (const p of this.#allocations.splice(0)) this.gpu.free(p);
  }
}
