// The contract's capture rules, kept on the TypeScript side: a call CUDA forbids during a capture
// (allocation, synchronous copies, synchronization) invalidates every active capture, and
// endCapture then throws CaptureError with the first reason. The driver enforces the same for the
// calls it sees; these rules also cover what never reaches it (an allocation served by the pool)
// and keep the CUDA backend's behaviour identical to the CPU backend's.
import { DeviceError } from '@metrale/core';

export class CaptureTracker {
  /** stream id -> why its capture was invalidated ('' while it is still valid). */
  readonly #active = new Map<number, string>();

  get active(): boolean {
    return this.#active.size > 0;
  }

  has(stream: number): boolean {
    return this.#active.has(stream);
  }

  begin(stream: number): void {
    this.#active.set(stream, '');
  }

  /** Why the stream's capture was invalidated; '' when it is valid or not capturing. */
  invalidatedBy(stream: number): string {
    return this.#active.get(stream) ?? '';
  }

  /** Stops tracking the stream; returns why its capture was invalidated, '' if it was not. */
  end(stream: number): string {
    const reason = this.#active.get(stream) ?? '';
    this.#active.delete(stream);
    return reason;
  }

  /** Records the first reason on every active capture. */
  invalidate(reason: string): void {
    for (const [stream, previous] of this.#active) if (!previous) this.#active.set(stream, reason);
  }

  /** Throws (and invalidates) when a capture is active: `call` does something CUDA forbids then. */
  forbid(call: string, what: string): void {
    if (!this.active) return;
    const reason = `${call} during capture: CUDA forbids ${what} while a stream is capturing`;
    this.invalidate(reason);
    throw new DeviceError(call, `${reason}; the capture is invalidated and endCapture will throw CaptureError`, 'CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED');
  }

  clear(): void {
    this.#active.clear();
  }
}
