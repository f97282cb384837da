/** A device address. Pointer arithmetic is plain bigint arithmetic; 0n is null. */
export type DevicePtr = bigint;

export const NULL_PTR: DevicePtr = 0n;

/** `base + bytes`, with a check that the offset is a non-negative safe integer. */
export function offsetPtr(base: DevicePtr, bytes: number): DevicePtr {
  if (!Number.isSafeInteger(bytes) || bytes < 0) throw new RangeError(`offsetPtr: byte offset ${bytes} is not a non-negative integer`);
  return base + BigInt(bytes);
}
