import type { ResolvedHooks } from '../contract/default-hooks.js';
import { resolveHooks } from '../contract/default-hooks.js';
import type { GdnCarryBinding } from '../contract/gdn-carry-binding.js';
import type { TransformerLayer } from '../contract/layer.js';
import type { LayerState } from '../contract/layer-state.js';
import type { KvPageBinding } from '../contract/sequence-cache.js';
import type { GdnCarrySize } from '../contract/write-on-accept.js';
import type { DevicePtr } from '../device/device-ptr.js';
import type { GpuBackend, Stream } from '../device/gpu-backend.js';
import type { BlockState } from './block-state.js';

type Sub = { readonly layer: TransformerLayer<LayerState>; readonly index: number };

/**
 * The contract's hooks of a layer made of sub-layers, as methods to install on it: each forwards
 * to the sub-layers that implement the hook, with their own sub-state, and sizing answers
 * combine (sums, with each sub-layer bound to its own slice). Only hooks some sub-layer has are
 * returned, so the driver still skips a block whose parts all keep a default.
 */
export function compositeHooks(layers: readonly TransformerLayer<any>[]): Partial<ResolvedHooks<BlockState>> {
  const implemented = layers.map((l) => resolveHooks(l as TransformerLayer<LayerState>).implemented);
  const having = (hook: keyof ResolvedHooks): Sub[] =>
    layers.flatMap((layer, index) => (implemented[index]!.has(hook) ? [{ layer: layer as TransformerLayer<LayerState>, index }] : []));
  const hooks: Partial<ResolvedHooks<BlockState>> = {};

  const prestage = having('decodePrestage');
  if (prestage.length) {
    hooks.decodePrestage = (tokens: Int32Array, state: BlockState, g: GpuBackend, stream: Stream) => {
      for (const s of prestage) s.layer.decodePrestage!(tokens, state.parts[s.index]!, g, stream);
    };
  }
  const rearm = having('decodePrestageRearm');
  if (rearm.length) {
    hooks.decodePrestageRearm = (state: BlockState) => {
      for (const s of rearm) s.layer.decodePrestageRearm!(state.parts[s.index]!);
    };
  }
  const room = having('checkReplayRoom');
  if (room.length) {
    hooks.checkReplayRoom = (state: BlockState, seqLen: number, k: number) => {
      for (const s of room) s.layer.checkReplayRoom!(state.parts[s.index]!, seqLen, k);
    };
  }
  const sync = having('syncReplayedStep');
  if (sync.length) {
    hooks.syncReplayedStep = (state: BlockState, seqLen: number, k: number) => {
      for (const s of sync) s.layer.syncReplayedStep!(state.parts[s.index]!, seqLen, k);
    };
  }

  // Write-on-accept: the block's stash is its sub-layers' stashes side by side, each a
  // `seqs × own` slab (a sub-layer indexes its slab with its own per-sequence size).
  const woa = having('gdnWoaStashSeqFloats');
  const woaSizes = (): { sub: Sub; floats: number }[] =>
    woa.flatMap((sub) => {
      const floats = sub.layer.gdnWoaStashSeqFloats!();
      return floats === undefined ? [] : [{ sub, floats }];
    });
  if (woa.length) {
    hooks.gdnWoaStashSeqFloats = () => {
      const sizes = woaSizes();
      return sizes.length ? sizes.reduce((a, s) => a + s.floats, 0) : undefined;
    };
    hooks.gdnWoaBind = (flag: DevicePtr, stash: DevicePtr, seqs: number) => {
      let offset = 0;
      for (const { sub, floats } of woaSizes()) {
        sub.layer.gdnWoaBind?.(flag, stash + BigInt(4 * seqs * offset), seqs);
        offset += floats;
      }
    };
  }

  // Carried state: only when every sub-layer that can verify speculatively can also carry, or a
  // write-on-accept-only part would be left unbound in carried mode.
  const carry = having('gdnCarrySeqFloats');
  const carrySizes = (): { sub: Sub; size: GdnCarrySize }[] | undefined => {
    const sizes = carry.flatMap((sub) => {
      const size = sub.layer.gdnCarrySeqFloats!();
      return size === undefined ? [] : [{ sub, size }];
    });
    if (sizes.length === 0) return undefined;
    const carried = new Set(sizes.map((s) => s.sub.index));
    if (woaSizes().some((w) => !carried.has(w.sub.index))) return undefined;
    return sizes;
  };
  if (carry.length) {
    hooks.gdnCarrySeqFloats = () => {
      const sizes = carrySizes();
      if (!sizes) return undefined;
      // Rows per slot: the most any part asks for (parts share the row count, each its own columns).
      const rows = sizes.map((s) => s.size.convStashRows).filter((r): r is number => r !== undefined);
      return {
        stashSeqFloats: sizes.reduce((a, s) => a + s.size.stashSeqFloats, 0),
        convRowElems: sizes.reduce((a, s) => a + s.size.convRowElems, 0),
        ...(rows.length ? { convStashRows: Math.max(...rows) } : {}),
      };
    };
    hooks.gdnCarryBind = (binding: GdnCarryBinding) => {
      const sizes = carrySizes() ?? [];
      let stashOffset = 0;
      let convOffset = 0;
      for (const { sub, size } of sizes) {
        sub.layer.gdnCarryBind?.(
          Object.freeze({
            ...binding,
            stash: binding.stash + BigInt(4 * binding.seqs * stashOffset),
            stashSeqFloats: size.stashSeqFloats,
            convStash: binding.convStash + BigInt(4 * binding.seqs * binding.convStashRows * convOffset),
            convRowElems: size.convRowElems,
          }),
        );
        stashOffset += size.stashSeqFloats;
        convOffset += size.convRowElems;
      }
    };
  }

  // Paged caches and recurrent state: each part keeps its own storage under the shared page
  // indices and snapshot entries; the block's sizes are the sums.
  const paged = having('kvPageBytes');
  if (paged.length) {
    hooks.kvPageBytes = (pageSize: number) => paged.reduce((a, s) => a + s.layer.kvPageBytes!(pageSize), 0);
    hooks.kvBind = (binding: KvPageBinding) => {
      for (const s of paged) s.layer.kvBind?.(binding);
    };
  }
  const unbinding = having('kvUnbind');
  if (unbinding.length) {
    hooks.kvUnbind = () => {
      for (const s of unbinding) s.layer.kvUnbind!();
    };
  }
  const saving = having('saveStateSnapshot');
  if (saving.length) {
    hooks.stateSnapshotBytes = () => saving.reduce((a, s) => a + (s.layer.stateSnapshotBytes?.() ?? 0), 0);
    hooks.stateSnapshotBind = (count: number) => {
      for (const s of saving) s.layer.stateSnapshotBind?.(count);
    };
    hooks.saveStateSnapshot = (state: BlockState, index: number, stream: Stream) => {
      for (const s of saving) s.layer.saveStateSnapshot!(state.parts[s.index]!, index, stream);
    };
  }
  // A block resumes at a cached prefix only when every part can.
  if (having('resumeAt').length === layers.length) {
    hooks.resumeAt = (state: BlockState, length: number, snapshot: number | undefined, stream: Stream) => {
      layers.forEach((l, i) => l.resumeAt!(state.parts[i]!, length, snapshot, stream));
    };
  }

  const batched = having('gdnVerifyRunBatched');
  if (batched.length) {
    hooks.gdnVerifyRunBatched = (states: readonly BlockState[], kk: number, wyn: number, wyTables: DevicePtr) => {
      let answer: boolean | undefined;
      for (const s of batched) {
        const a = s.layer.gdnVerifyRunBatched!(states.map((st) => st.parts[s.index]!), kk, wyn, wyTables);
        if (a !== undefined) answer = (answer ?? true) && a;
      }
      return answer;
    };
  }
  const fold = having('gdnFoldAccepted');
  if (fold.length) {
    hooks.gdnFoldAccepted = (g: GpuBackend, slotTable: DevicePtr, naTab: DevicePtr, kRows: number, n: number, stream: Stream) => {
      let any = false;
      for (const s of fold) any = s.layer.gdnFoldAccepted!(g, slotTable, naTab, kRows, n, stream) || any;
      return any;
    };
  }
  return hooks;
}
