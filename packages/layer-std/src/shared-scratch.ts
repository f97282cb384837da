import { InvalidArgumentError, type DevicePtr, type GpuBackend } from '@metrale/core';

/**
 * Scratch a layer needs only inside its own forward (intermediates it writes and reads before it
 * returns), shared by every layer of a model that asks for it on the same backend: one buffer, as
 * large as the largest request, instead of one per layer. Layers of a model run one after another
 * on one stream, so they never use it at once. The buffer grows while layers are built; once a
 * forward has read it, a layer built later (another model) gets a buffer of its own, so pointers
 * a graph holds stay valid. Two models built on one backend before either runs share it: run
 * them one at a time.
 */
export interface ScratchLease {
  /** The buffer: read it in each forward, never keep it from construction (a later layer may grow it until a forward reads it). */
  readonly ptr: DevicePtr;
  release(): void;
}

interface Pool {
  bytes: number;
  ptr: DevicePtr;
  refs: number;
  /** A forward has read the pointer (a graph may hold it): the buffer no longer moves. */
  sealed: boolean;
}

const pools = new WeakMap<GpuBackend, Map<string, Pool>>();

/** A lease of at least `bytes` of the scratch named `name` on `gpu`. */
export function acquireScratch(gpu: GpuBackend, name: string, bytes: number): ScratchLease {
  let byName = pools.get(gpu);
  if (!byName) pools.set(gpu, (byName = new Map()));
  const want = Math.max(4, bytes);
  let pool = byName.get(name);
  if (!pool || pool.sealed) {
    pool = { bytes: want, ptr: gpu.alloc(want), refs: 0, sealed: false };
    byName.set(name, pool);
  } else if (pool.bytes < want) {
    // Allocations happen here, at construction, never in a forward (which may be captured).
    const grown = gpu.alloc(want);
    gpu.free(pool.ptr);
    pool.ptr = grown;
    pool.bytes = want;
  }
  pool.refs++;
  const p = pool;
  const map = byName;
  let released = false;
  return {
    get ptr(): DevicePtr {
      if (released) throw new InvalidArgumentError(`scratch '${name}': read after its layer released it`);
      p.sealed = true;
      return p.ptr;
    },
    release() {
      if (released) return;
      released = true;
      if (--p.refs > 0) return;
      gpu.free(p.ptr);
      if (map.get(name) === p) map.delete(name);
    },
  };
}
