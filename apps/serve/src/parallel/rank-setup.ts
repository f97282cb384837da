import {
  Checkpoint, StepDriver, type Communicator, type GpuBackend, type KvCacheOptions, type LayerLimits, type ModelStack, type Precision, type WeightSource,
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
  /** Every rank's KV page pool: the same options on every rank, so the same calls need the same pages. */
  readonly kvCache: KvCacheOptions;
}

export interface RankModel {
  readonly stack: ModelStack;
  readonly driver: StepDriver;
}

/**
 * Rank `comm.rank`'s shard of the model and its step driver: the adapter builds the rank's layers
 * (`ModelBuildContext.parallel`), with the same head wrapping and driver options on every rank, so
 * every rank runs the same collectives in the same order.
 */
export function buildRankModel(
  setup: RankSetup, registry: ServingRegistry, checkpoint: Checkpoint, gpu: GpuBackend, comm: Communicator, weights?: WeightSource,
): RankModel {
  const adapter = registry.architectures.forConfig(checkpoint.config, `${checkpoint.dir}/config.json`);
  let stack: ModelStack;
  try {
    stack = adapter.build({
      gpu, config: checkpoint.config, weights: weights ?? checkpoint.weights, limits: setup.limits, precision: setup.precision, plugins: registry.layers,
      parallel: { rank: comm.rank, size: comm.size, comm, expertParallel: setup.expertParallel },
    });
  } finally {
    checkpoint.close();
  }
  try {
    const layers = setup.prefillLastRows ? PrefillLastRowsHead.wrapLast(stack.layers) : stack.layers;
    return { stack, driver: new StepDriver({ gpu, layers, limits: setup.limits, graphs: setup.graphs, kvCache: setup.kvCache }) };
  } catch (error) {
    stack.dispose();
    throw error;
  }
}
