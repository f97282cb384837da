import type { DevicePtr } from '../device/device-ptr.js';
import { InvalidArgumentError } from '../errors.js';
import type { GpuBackend, Stream } from '../device/gpu-backend.js';
import type { GdnCarryBinding } from './gdn-carry-binding.js';
import type { LayerGraphHooks } from './graph-hooks.js';
import type { TransformerLayer } from './layer.js';
import type { LayerState } from './layer-state.js';
import type { KvPageBinding, LayerSequenceCache } from './sequence-cache.js';
import type { GdnCarrySize, LayerWriteOnAccept } from './write-on-accept.js';

/** Every hook of the contract, with nothing optional. */
export type ResolvedHooks<S extends LayerState = LayerState> = Required<LayerGraphHooks<S>> & Required<LayerWriteOnAccept<S>> & Required<LayerSequenceCache<S>>;

/** The contract's defaults: do nothing, pass, and answer "not supported". */
export const defaultHooks: ResolvedHooks = Object.freeze({
  decodePrestage(_tokens: Int32Array, _state: LayerState, _gpu: GpuBackend, _stream: Stream): void {},
  decodePrestageRearm(_state: LayerState): void {},
  checkReplayRoom(_state: LayerState, _seqLen: number, _k: number): void {},
  syncReplayedStep(_state: LayerState, _seqLen: number, _k: number): void {},
  gdnWoaStashSeqFloats(): number | undefined {
    return undefined;
  },
  gdnWoaBind(_flag: DevicePtr, _stash: DevicePtr, _seqs: number): void {},
  gdnCarrySeqFloats(): GdnCarrySize | undefined {
    return undefined;
  },
  gdnCarryBind(_binding: GdnCarryBinding): void {},
  gdnVerifyRunBatched(_states: readonly LayerState[], _kk: number, _wyn: number, _wyTables: DevicePtr): boolean | undefined {
    return undefined;
  },
  gdnFoldAccepted(_gpu: GpuBackend, _slotTable: DevicePtr, _naTab: DevicePtr, _kRows: number, _n: number, _stream: Stream): boolean {
    return false;
  },
  kvPageBytes(_pageSize: number): number {
    return 0;
  },
  kvBind(_binding: KvPageBinding): void {},
  kvUnbind(): void {},
  stateSnapshotBytes(): number {
    return 0;
  },
  stateSnapshotBind(_count: number): void {},
  saveStateSnapshot(_state: LayerState, _index: number, _stream: Stream): void {},
  resumeAt(_state: LayerState, _length: number, _snapshot: number | undefined, _stream: Stream): void {
    throw new InvalidArgumentError('resumeAt: this layer cannot start a sequence at a cached prefix (it does not implement resumeAt)');
  },
});

const HOOK_NAMES = Object.keys(defaultHooks) as (keyof ResolvedHooks)[];

/**
 * The layer's hooks with the defaults filled in, bound to the layer. `implemented` says which
 * hooks the layer itself provides, so the driver can skip calling a default on its hot path.
 */
export function resolveHooks<S extends LayerState>(
  layer: TransformerLayer<S>,
): { hooks: ResolvedHooks<S>; implemented: ReadonlySet<keyof ResolvedHooks> } {
  const implemented = new Set<keyof ResolvedHooks>();
  const hooks: Record<string, unknown> = {};
  for (const name of HOOK_NAMES) {
    const own = (layer as unknown as Record<string, unknown>)[name];
    if (typeof own === 'function') {
      implemented.add(name);
      hooks[name] = (own as (...a: unknown[]) => unknown).bind(layer);
    } else if (own !== undefined) {
      throw new TypeError(`layer ${layer.type}: '${name}' must be a method or absent, got ${typeof own}`);
    } else {
      hooks[name] = (defaultHooks as unknown as Record<string, unknown>)[name];
    }
  }
  return { hooks: hooks as unknown as ResolvedHooks<S>, implemented };
}
