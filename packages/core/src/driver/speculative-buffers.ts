import type { ResolvedHooks } from '../contract/default-hooks.js';
import type { SpeculationMode, TransformerLayer } from '../contract/layer.js';
import type { DevicePtr } from '../device/device-ptr.js';
import type { GpuBackend, HostBuffer, Stream } from '../device/gpu-backend.js';
import { PluginError } from '../errors.js';

interface Bound {
  readonly layer: TransformerLayer;
  readonly hooks: ResolvedHooks;
}

/**
 * The buffers of write-on-accept and carried-state verify. Sized from the layers' answers and
 * bound to each layer once, before the driver's first graph decision; never moved afterwards.
 */
export class SpeculativeBuffers {
  /** Layers bound for write-on-accept (folded after each accept). */
  readonly woaLayers: readonly Bound[];
  /** Layers bound for carried state (fold inside their next kernel). */
  readonly carryLayers: readonly Bound[];
  readonly #allocations: DevicePtr[] = [];
  /** u32[maxBatch]: accepted rows per batch position, read by gdnFoldAccepted. */
  readonly naTab: DevicePtr;
  /** u32[maxSeqs]: pending (accepted, not yet folded) rows per slot, carried mode. */
  readonly pendingRows: DevicePtr;
  readonly #staging: HostBuffer;
  readonly #naHost: Uint32Array;
  readonly #pendingHost: Uint32Array;

  constructor(
    private readonly gpu: GpuBackend,
    layers: readonly Bound[],
    mode: SpeculationMode,
    limits: { maxSeqs: number; maxBatch: number; maxK: number },
    slotTable: DevicePtr,
    stream: Stream,
  ) {
    const { maxSeqs, maxBatch, maxK } = limits;
    const alloc = (bytes: number): DevicePtr => {
      const p = gpu.alloc(Math.max(bytes, 4));
      this.#allocations.push(p);
      return p;
    };
    this.#staging = gpu.allocHost(4 * (maxBatch + maxSeqs + 1));
    const b = this.#staging.bytes;
    this.#naHost = new Uint32Array(b.buffer, b.byteOffset, maxBatch);
    this.#pendingHost = new Uint32Array(b.buffer, b.byteOffset + 4 * maxBatch, maxSeqs);
    const one = new Uint32Array(b.buffer, b.byteOffset + 4 * (maxBatch + maxSeqs), 1);
    one[0] = 1;
    this.naTab = alloc(4 * maxBatch);
    this.pendingRows = alloc(4 * maxSeqs);
    gpu.memsetAsync(this.naTab, 0, 4 * maxBatch, stream);
    gpu.memsetAsync(this.pendingRows, 0, 4 * maxSeqs, stream);

    const carry: { l: Bound; size: { stashSeqFloats: number; convRowElems: number; convStashRows?: number } }[] = [];
    const woa: { l: Bound; floats: number }[] = [];
    for (const l of layers) {
      if (mode === 'carried') {
        const size = l.hooks.gdnCarrySeqFloats();
        if (size !== undefined) {
          checkCount(l.layer, 'gdnCarrySeqFloats().stashSeqFloats', size.stashSeqFloats);
          checkCount(l.layer, 'gdnCarrySeqFloats().convRowElems', size.convRowElems);
          if (size.convStashRows !== undefined) checkCount(l.layer, 'gdnCarrySeqFloats().convStashRows', size.convStashRows);
          carry.push({ l, size });
          continue;
        }
      }
      if (mode !== 'none') {
        const floats = l.hooks.gdnWoaStashSeqFloats();
        if (floats !== undefined) {
          checkCount(l.layer, 'gdnWoaStashSeqFloats()', floats);
          woa.push({ l, floats });
        }
      }
    }

    if (woa.length > 0) {
      // One slab sized from the largest answer: every layer gets the same stride.
      const stride = Math.max(...woa.map((w) => w.floats));
      const flag = alloc(4);
      gpu.copyToDeviceAsync(flag, this.#staging, one.byteOffset - b.byteOffset, 4, stream);
      const slab = alloc(4 * stride * maxSeqs * woa.length);
      woa.forEach((w, i) => w.l.hooks.gdnWoaBind(flag, slab + BigInt(4 * stride * maxSeqs * i), maxSeqs));
    }
    if (carry.length > 0) {
      const stashSeqFloats = Math.max(...carry.map((c) => c.size.stashSeqFloats));
      const convRowElems = Math.max(...carry.map((c) => c.size.convRowElems));
      // Conv input rows per slot: maxK unless a layer asks for more (e.g. a ring of 2 · maxK).
      const convStashRows = Math.max(...carry.map((c) => c.size.convStashRows ?? maxK));
      const flag = alloc(4);
      gpu.copyToDeviceAsync(flag, this.#staging, one.byteOffset - b.byteOffset, 4, stream);
      for (const c of carry) {
        const stash = alloc(4 * stashSeqFloats * maxSeqs);
        const convStash = alloc(4 * convStashRows * convRowElems * maxSeqs);
        c.l.hooks.gdnCarryBind(
          Object.freeze({
            flag, stash, stashSeqFloats, pendingRows: this.pendingRows, slotTable, convStash, convRowElems, convStashRows, maxK, seqs: maxSeqs,
            maxBatch,
          }),
        );
      }
    }
    // The staging's flag word is read by the copies above; wait before it can be reused.
    gpu.synchronize(stream);
    this.woaLayers = woa.map((w) => w.l);
    this.carryLayers = carry.map((c) => c.l);
  }

  get active(): boolean {
    return this.woaLayers.length > 0 || this.carryLayers.length > 0;
  }

  /**
   * After acceptance: write-on-accept layers fold the accepted prefix now; carried layers get the
   * counts in `pendingRows` and fold inside their next kernel.
   */
  accept(slotTable: DevicePtr, slots: Int32Array, accepted: readonly number[], batch: number, k: number, stream: Stream): void {
    if (this.woaLayers.length > 0) {
      this.#naHost.fill(0, 0, batch);
      for (let i = 0; i < accepted.length; i++) this.#naHost[i] = accepted[i]!;
      this.gpu.copyToDeviceAsync(this.naTab, this.#staging, 0, 4 * batch, stream);
      for (const l of this.woaLayers) l.hooks.gdnFoldAccepted(this.gpu, slotTable, this.naTab, k, batch, stream);
    }
    if (this.carryLayers.length > 0) {
      for (let i = 0; i < accepted.length; i++) this.#pendingHost[slots[i]!] = accepted[i]!;
      this.#uploadPending(stream);
    }
    // Both stagings are read by the copies just enqueued.
    this.gpu.synchronize(stream);
  }

  /**
   * Slots whose pending rows the step's kernels just folded (every layer read the same counts,
   * so no kernel may clear them): zero them on the host and, in stream order, on the device.
   */
  folded(slots: Int32Array, count: number, stream: Stream): void {
    if (this.carryLayers.length === 0) return;
    let changed = false;
    for (let i = 0; i < count; i++) {
      const slot = slots[i]!;
      if (slot >= 0 && this.#pendingHost[slot] !== 0) {
        this.#pendingHost[slot] = 0;
        changed = true;
      }
    }
    if (changed) {
      this.#uploadPending(stream);
      // The staging is read by that copy; the next accept rewrites it.
      this.gpu.synchronize(stream);
    }
  }

  /** Pending rows of a slot, carried mode (0 when none or not carried). */
  pendingOf(slot: number): number {
    return this.carryLayers.length > 0 ? this.#pendingHost[slot]! : 0;
  }

  /** A slot was opened or closed: nothing may stay pending for it. */
  clearSlot(slot: number, stream: Stream): void {
    if (this.carryLayers.length === 0 || this.#pendingHost[slot] === 0) return;
    this.#pendingHost[slot] = 0;
    this.#uploadPending(stream);
    this.gpu.synchronize(stream);
  }

  #uploadPending(stream: Stream): void {
    const off = this.#pendingHost.byteOffset - this.#staging.bytes.byteOffset;
    this.gpu.copyToDeviceAsync(this.pendingRows, this.#staging, off, this.#pendingHost.byteLength, stream);
  }

  dispose(): void {
    for (const p of this.#allocations) this.gpu.free(p);
    this.gpu.freeHost(this.#staging);
  }
}

function checkCount(layer: TransformerLayer, what: string, n: number): void {
  if (!Number.isSafeInteger(n) || n <= 0) throw new PluginError(layer.type, `${what} must be a positive integer, got ${n}`);
}
