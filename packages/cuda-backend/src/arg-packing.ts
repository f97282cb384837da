// Kernel arguments travel to cuLaunchKernel as one buffer: each parameter at its own offset,
// aligned to its size (4 or 8 bytes), as the C ABI lays out a kernel's parameter list. C++ points
// `void* kernelParams[i]` at `buffer + offset[i]` once per kernel (native/device.cc), so a launch
// only writes values.
import { InvalidArgumentError, type Kernel, type KernelParam, type KernelParamType } from '@metrale/core';

/** Bytes before the parameters in the launch record: the u32 header words (native/device.h). */
export const LAUNCH_HEADER_BYTES = 64;
/** Launch header word 9, bit 0: the kernel may start early (LaunchConfig.earlyStart; native/device.h). */
export const LAUNCH_EARLY_START = 1;
/** The parameter area of the launch record: CUDA's classic 4 KiB kernel-parameter limit. */
export const LAUNCH_PARAM_BYTES = 4096;

export const PARAM_BYTES: Readonly<Record<KernelParamType, 4 | 8>> = {
  ptr: 8, i64: 8, u64: 8, f64: 8, i32: 4, u32: 4, f32: 4,
};

export interface ArgLayout {
  readonly params: readonly KernelParam[];
  /** Byte offset of each parameter from the start of the parameter area. */
  readonly offsets: Uint32Array;
  /** Bytes the parameters span. */
  readonly bytes: number;
}

/** Offsets of a kernel's parameters, in declaration order, each aligned to its own size. */
export function layoutArgs(kernel: Pick<Kernel, 'name' | 'paramList'>): ArgLayout {
  const offsets = new Uint32Array(kernel.paramList.length);
  let at = 0;
  kernel.paramList.forEach((param, i) => {
    const size = PARAM_BYTES[param.type];
    at = Math.ceil(at / size) * size;
    offsets[i] = at;
    at += size;
  });
  if (at > LAUNCH_PARAM_BYTES) {
    throw new InvalidArgumentError(`kernel ${kernel.name}: its parameters take ${at} bytes, more than CUDA's ${LAUNCH_PARAM_BYTES}`);
  }
  return { params: kernel.paramList, offsets, bytes: at };
}

/**
 * Writes validated arguments (validateKernelArgs) little-endian into `view` at `base` + each
 * parameter's offset.
 */
export function packArgs(layout: ArgLayout, args: Readonly<Record<string, unknown>>, view: DataView, base: number): void {
  const { params, offsets } = layout;
  for (let i = 0; i < params.length; i++) {
    const { name, type } = params[i]!;
    const at = base + offsets[i]!;
    const value = args[name];
    switch (type) {
      case 'ptr':
      case 'u64':
        view.setBigUint64(at, value as bigint, true);
        break;
      case 'i64':
        view.setBigInt64(at, value as bigint, true);
        break;
      case 'i32':
        view.setInt32(at, value as number, true);
        break;
      case 'u32':
        view.setUint32(at, value as number, true);
        break;
      case 'f32':
        view.setFloat32(at, value as number, true);
        break;
      case 'f64':
        view.setFloat64(at, value as number, true);
        break;
    }
  }
}

/** The packed parameter bytes of one launch, on their own (for tests and tools). */
export function packArgsToBytes(kernel: Pick<Kernel, 'name' | 'paramList'>, args: Readonly<Record<string, unknown>>): Uint8Array {
  const layout = layoutArgs(kernel);
  const bytes = new Uint8Array(layout.bytes);
  packArgs(layout, args, new DataView(bytes.buffer), 0);
  return bytes;
}
