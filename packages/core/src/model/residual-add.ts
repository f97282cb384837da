import type { DevicePtr } from '../device/device-ptr.js';
import type { FloatDtype } from '../device/dtype.js';
import type { GpuBackend, Stream } from '../device/gpu-backend.js';

/**
 * `out[i] = a[i] + b[i]` over `count` values of `dtype` (summed in f32, rounded once), enqueued on
 * `stream`; `out` may alias `a` or `b`. Core holds no kernel: a layer package supplies this
 * (`@metrale/layer-std` exports one), and the decoder block calls it with addresses and a count
 * that are fixed per graph key.
 */
export interface ResidualAdd {
  add(gpu: GpuBackend, stream: Stream, a: DevicePtr, b: DevicePtr, out: DevicePtr, count: number, dtype: FloatDtype): void;
}
