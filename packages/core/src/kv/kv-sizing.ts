import type { GpuBackend } from '../device/gpu-backend.js';
import { InvalidArgumentError, KvCacheSizeError } from '../errors.js';
import { gib } from '../model/checkpoint-precision.js';

/** How much memory the KV cache may take: a number of bytes, or a share of the device's total memory left after everything else. */
export type KvMemory = { readonly bytes: number } | { readonly utilization: number };

/** Share of the budget snapshots of recurrent state may take, and how many per sequence slot at most. */
const SNAPSHOT_SHARE = 0.1;
const SNAPSHOTS_PER_SLOT = 2;

export interface KvSize {
  /** Bytes the cache may take. */
  readonly budget: number;
  readonly pages: number;
  readonly snapshots: number;
}

/**
 * The budget of `memory` on `gpu`: the bytes given, or (utilization u) what is free now less the
 * (1 − u) share of the device the cache must leave: so the process as a whole takes at most u of
 * the device once the cache is allocated. Call it after the weights and every fixed buffer are.
 */
export function kvBudget(gpu: GpuBackend, memory: KvMemory): number {
  if ('bytes' in memory) {
    if (!Number.isSafeInteger(memory.bytes) || memory.bytes < 0) throw new InvalidArgumentError(`kv cache: memory.bytes must be a non-negative integer, got ${memory.bytes}`);
    return memory.bytes;
  }
  const u = memory.utilization;
  if (!(u > 0 && u <= 1)) throw new InvalidArgumentError(`kv cache: the memory utilization must be in (0, 1], got ${u}`);
  if (!gpu.memoryInfo) throw new InvalidArgumentError(`kv cache: the ${gpu.kind} backend cannot report its free memory; give the cache a size in bytes`);
  const { free, total } = gpu.memoryInfo();
  const budget = Math.floor(free - (1 - u) * total);
  if (budget <= 0) {
    throw new KvCacheSizeError(
      `kv cache: ${gib(free)} of ${gpu.device.name}'s ${gib(total)} are free after the weights and buffers, ` +
        `and a utilization of ${u} leaves ${gib((1 - u) * total)} unused: nothing is left for the KV cache; ` +
        'raise the memory utilization, or lower the batch (--max-batch) or the precision',
    );
  }
  return budget;
}

/**
 * Pages and snapshot entries that fit `budget`: snapshots (when layers save recurrent state)
 * take up to a tenth of it, two per slot at most (or the count given); pages take the rest, no
 * more than every slot at full length can use.
 */
export function sizeKvCache(o: {
  budget: number; pageBytes: number; snapshotBytes: number; maxSeqs: number; pagesPerSeq: number; pageSize: number;
  /** A fixed number of snapshot entries instead of the share. */
  snapshots?: number;
}): KvSize {
  const share = o.snapshotBytes > 0 ? Math.min(SNAPSHOTS_PER_SLOT * o.maxSeqs, Math.floor((SNAPSHOT_SHARE * o.budget) / o.snapshotBytes)) : 0;
  const snapshots = o.snapshotBytes > 0 ? (o.snapshots ?? share) : 0;
  const most = o.maxSeqs * o.pagesPerSeq;
  const pages = o.pageBytes > 0 ? Math.min(most, Math.floor((o.budget - snapshots * o.snapshotBytes) / o.pageBytes)) : most;
  if (pages < 1) {
    throw new KvCacheSizeError(
      `kv cache: ${o.budget} bytes hold no page of ${o.pageSize} tokens (${o.pageBytes} bytes across the model's layers); ` +
        'give the cache more memory (--gpu-memory-utilization or --kv-cache-memory)',
    );
  }
  return { budget: o.budget, pages, snapshots };
}
