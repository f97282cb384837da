import { defaultHooks, resolveHooks } from '../contract/default-hooks.js';
import type { TransformerLayer } from '../contract/layer.js';
import type { CheckResult } from './conformance.js';

/**
 * Hooks a layer leaves out must behave as the contract's defaults, and the ones it provides must
 * come in consistent groups with answers of the right kind.
 */
export function checkDefaultHooks(layer: TransformerLayer): Omit<CheckResult, 'check'> {
  const problems: string[] = [];
  let implemented: ReadonlySet<string>;
  try {
    implemented = resolveHooks(layer).implemented;
  } catch (error) {
    return { status: 'fail', detail: (error as Error).message };
  }
  const has = (n: string) => implemented.has(n);
  if (has('gdnWoaBind') !== has('gdnWoaStashSeqFloats')) problems.push('gdnWoaBind and gdnWoaStashSeqFloats come together');
  if (has('gdnCarryBind') !== has('gdnCarrySeqFloats')) problems.push('gdnCarryBind and gdnCarrySeqFloats come together');
  if (has('gdnFoldAccepted') && !has('gdnWoaStashSeqFloats') && !has('gdnCarrySeqFloats')) problems.push('gdnFoldAccepted without a write-on-accept or carry size');
  if (has('decodePrestageRearm') && !has('decodePrestage')) problems.push('decodePrestageRearm without decodePrestage');
  if (has('kvBind') !== has('kvPageBytes')) problems.push('kvBind and kvPageBytes come together');
  if (has('kvUnbind') && !has('kvBind')) problems.push('kvUnbind without kvBind (nothing bound to free)');
  const snapshotHooks = ['stateSnapshotBytes', 'stateSnapshotBind', 'saveStateSnapshot'].filter(has);
  if (snapshotHooks.length !== 0 && snapshotHooks.length !== 3) problems.push('stateSnapshotBytes, stateSnapshotBind and saveStateSnapshot come together');
  if (snapshotHooks.length && !has('resumeAt')) problems.push('saveStateSnapshot without resumeAt (a saved state nobody restores)');
  const pageBytes = layer.kvPageBytes?.(16);
  if (pageBytes !== undefined && !(Number.isSafeInteger(pageBytes) && pageBytes >= 0)) problems.push(`kvPageBytes(16) must be a non-negative integer, got ${pageBytes}`);
  const stateBytes = layer.stateSnapshotBytes?.();
  if (stateBytes !== undefined && !(Number.isSafeInteger(stateBytes) && stateBytes > 0)) problems.push(`stateSnapshotBytes() must be a positive integer, got ${stateBytes}`);
  const woa = layer.gdnWoaStashSeqFloats?.();
  if (woa !== undefined && !(Number.isSafeInteger(woa) && woa > 0)) problems.push(`gdnWoaStashSeqFloats() must be undefined or a positive integer, got ${woa}`);
  const carry = layer.gdnCarrySeqFloats?.();
  if (carry !== undefined && !(Number.isSafeInteger(carry.stashSeqFloats) && carry.stashSeqFloats > 0 && Number.isSafeInteger(carry.convRowElems) && carry.convRowElems > 0)) {
    problems.push(`gdnCarrySeqFloats() must be undefined or positive sizes, got ${JSON.stringify(carry)}`);
  }
  // The defaults themselves: nothing happens, and every query answers "not supported".
  const d = defaultHooks;
  if (d.gdnWoaStashSeqFloats() !== undefined || d.gdnCarrySeqFloats() !== undefined || d.gdnVerifyRunBatched([], 1, 0, 0n) !== undefined) {
    problems.push('a default write-on-accept query answered other than "not supported"');
  }
  if (d.gdnFoldAccepted(undefined as never, 0n, 0n, 1, 0, undefined as never) !== false) problems.push('the default gdnFoldAccepted did not return false');
  if (problems.length) return { status: 'fail', detail: problems.join('; ') };
  const list = [...implemented].sort();
  return { status: 'pass', detail: list.length ? `implements ${list.join(', ')}; the rest keep their defaults` : 'implements no hooks; all keep their defaults' };
}
