import {
  Checkpoint, StepDriver, buildModelStack, type Communicator, type GpuBackend, type KvCacheOptions, type LayerLimits, type ModelStack, type Precision, type WeightSource,
} from '@metrale/core';
import { PrefillLastRowsHead } from '../engine/prefill-head.js';
import type { ServingRegistry } from '../plugins/build-registry.js';
import type { RegistrySetup } from '../plugins/load-registry.js';

/** How every rank of a tensor-parallel group builds its shard (plain data: it crosses to each rank's thread). */
export interface RankSetup {
  readonly modelDir: string;
  /** The leader's backend kind: every rank runs on the same one, rank r on device r. */
  readonly backend: 'cpu' | 'cuda';
  readonly precision: Precision;
  readonly limits: LayerLimits;
  readonly graphs: boolean;
  /** Wrap the lm head to compute only each prefilled sequence's last row (as the leader does). */
  readonly prefillLastRows: boolean;
  readonly expertParallel: boolean;
  readonly plugins: RegistrySetup;
  /**
   * Every rank's KV page pool options: the same on every rank, so the same calls need the same pages
   * on each; the leader's pool is then capped at the smallest follower's (its devices may have had
   * different memory free).
   */
  readonly kvCache: KvCacheOptions;
}

export interface RankModel {
  readonly stack: ModelStack;
  readonly driver: StepDriver;
}

/**
 * Rank `comm.rank`'s shard of the model: the adapter builds the rank's layers
 * (`ModelBuildContext.parallel`), with the same head wrapping on every rank, so every rank runs the
 * same collectives in the same order.
 */
export function buildRankStack(
  setup: RankSetup, registry: ServingRegistry, checkpoint: Checkpoint, gpu: GpuBackend, comm: Communicator, weights?: WeightSource,
): ModelStack {
  const adapter = registry.architectures.forConfig(checkpoint.config, `${checkpoint.dir}/config.json`);
  try {
    return buildModelStack(adapter, {
      gpu, config: checkpoint.config, weights: weights ?? checkpoint.weights, limits: setup.limits, precision: setup.precision, plugins: registry.layers,
      parallel: { rank: comm.rank, size: comm.size, comm, expertParallel: setup.expertParallel },
    }, { dir: checkpoint.dir });
  } finally {
    checkpoint.close();
  }
}

/**
 * A rank's step driver over its stack, with the same options on every rank; `maxPages` caps its
 * page pool (the leader's: see startTensorParallel).
 */
export function rankDriver(setup: RankSetup, stack: ModelStack, gpu: GpuBackend, maxPages?: number): StepDriver {
  const layers = setup.prefillLastRows ? PrefillLastRowsHead.wrapLast(stack.layers) : stack.layers;
  return new StepDriver({ gpu, layers, limits: setup.limits, graphs: setup.graphs, kvCache: maxPages === undefined ? setup.kvCache : { ...setup.kvCache, maxPages } });
}

/** A follower's shard and driver (`buildRankStack`, then `rankDriver` with its pool sized from its own memory). */
export function buildRankModel(
  setup: RankSetup, registry: ServingRegistry, checkpoint: Checkpoint, gpu: GpuBackend, comm: Communicator, weights?: WeightSource,
): RankModel {
  const stack = buildRankStack(setup, registry, checkpoint, gpu, comm, weights);
  try {
    return { stack, driver: rankDriver(setup, stack, gpu) };
  } catch (error) {
    stack.dispose();
    throw error;
  }
}
