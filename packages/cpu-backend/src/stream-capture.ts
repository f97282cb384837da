import { CaptureError, DeviceError, type Stream } from '@metrale/core';
import type { GraphNode } from './graph-node.js';

export const CAPTURE_UNSUPPORTED = 'CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED';
export const CAPTURE_INVALIDATED = 'CUDA_ERROR_STREAM_CAPTURE_INVALIDATED';
const ILLEGAL_STATE = 'CUDA_ERROR_ILLEGAL_STATE';

interface Recording {
  readonly nodes: GraphNode[];
  /** The first forbidden call made while this capture was active. */
  invalidatedBy: string | undefined;
}

/**
 * Stream capture with CUDA's thread-local mode. JavaScript runs on one thread, so every active
 * capture belongs to the calling thread: a forbidden call anywhere invalidates all of them.
 */
export class StreamCaptures {
  readonly #active = new Map<Stream, Recording>();
  begun = 0;
  failed = 0;

  get active(): boolean { return this.#active.size > 0; }

  isCapturing(stream: Stream): boolean {
    return this.#active.has(stream);
  }

  begin(call: string, stream: Stream): void {
    if (this.#active.has(stream)) throw new DeviceError(call, `stream ${stream.id} is already capturing`, ILLEGAL_STATE);
    this.#active.set(stream, { nodes: [], invalidatedBy: undefined });
    this.begun++;
  }

  /** Ends a capture: its nodes, or a `CaptureError` naming the first forbidden call. */
  end(call: string, stream: Stream): GraphNode[] {
    const rec = this.#active.get(stream);
    if (!rec) throw new DeviceError(call, `stream ${stream.id} is not capturing`, ILLEGAL_STATE);
    this.#active.delete(stream);
    if (rec.invalidatedBy !== undefined) {
      this.failed++;
      throw new CaptureError(`${CAPTURE_INVALIDATED}: ${rec.invalidatedBy} during capture`);
    }
    return rec.nodes;
  }

  /**
   * Records `node` when `stream` is capturing and returns true; returns false when the caller
   * should run the work now. Work on an invalidated capture is refused, as the driver refuses it.
   */
  record(call: string, stream: Stream, node: GraphNode): boolean {
    const rec = this.#active.get(stream);
    if (!rec) return false;
    if (rec.invalidatedBy !== undefined) {
      throw new DeviceError(call, `the capture on stream ${stream.id} was invalidated by ${rec.invalidatedBy}`, CAPTURE_INVALIDATED);
    }
    rec.nodes.push(node);
    return true;
  }

  /** A call CUDA forbids during capture: when one is active, invalidate it and throw. */
  forbid(call: string): void {
    if (this.#active.size === 0) return;
    for (const rec of this.#active.values()) rec.invalidatedBy ??= call;
    const streams = [...this.#active.keys()].map((s) => s.id).join(', ');
    throw new DeviceError(call, `not permitted while a stream capture is active (stream ${streams}); the capture is now invalidated`, CAPTURE_UNSUPPORTED);
  }

  clear(): void {
    this.#active.clear();
  }
}
