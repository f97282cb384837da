import { DeviceError } from '@metrale/core';

export const INVALID_HANDLE = 'CUDA_ERROR_INVALID_HANDLE';

/** The shape every opaque handle of the interface has (`Stream`, `GpuEvent`, `Graph`, `GraphExec`). */
export interface Handle {
  readonly backend: string;
  readonly id: number;
}

/**
 * Live handles of one kind and the state behind each. Handles are looked up by identity, so a
 * destroyed handle, a copy, or another backend's handle with the same id is rejected.
 */
export class HandleTable<H extends Handle, S> {
  readonly #live = new Map<Handle, S>();
  #nextId: number;

  constructor(
    private readonly what: string,
    firstId = 1,
  ) {
    this.#nextId = firstId;
  }

  get size(): number { return this.#live.size; }

  /** Makes a frozen handle `{ backend: 'cpu', id, ...extra }` and registers its state. */
  add(state: S, extra?: Omit<H, keyof Handle>): H {
    const handle = Object.freeze({ backend: 'cpu', id: this.#nextId++, ...extra }) as unknown as H;
    this.#live.set(handle, state);
    return handle;
  }

  get(call: string, handle: H): S {
    const state = this.#live.get(handle);
    if (state === undefined) {
      const id = (handle as Partial<Handle> | undefined)?.id;
      throw new DeviceError(call, `${this.what} ${String(id)} is not a live ${this.what} of this cpu backend (destroyed, or made by another backend)`, INVALID_HANDLE);
    }
    return state;
  }

  delete(call: string, handle: H): S {
    const state = this.get(call, handle);
    this.#live.delete(handle);
    return state;
  }

  clear(): void {
    this.#live.clear();
  }
}
