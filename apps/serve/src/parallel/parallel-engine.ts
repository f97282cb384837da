import { DeviceError, EngineLoop, NgramProposer, checkModelFits, type Checkpoint, type GpuBackend } from '@metrale/core';
import { countingWeights, kvMemory, servingLimits, type Engine, type EngineSetup, type ModelInfo } from '../engine/build-engine.js';
import type { ServingRegistry } from '../plugins/build-registry.js';
import { startTensorParallel } from './tensor-parallel-group.js';

/**
 * `buildEngine` for `--tensor-parallel-size` > 1: each device's share of the weights is checked
 * against it, the group starts (rank 0 on `gpu`, the others on threads of their own), and the
 * engine loop drives the group as one driver. `onProgress` counts rank 0's reads.
 */
export async function buildParallelEngine(
  setup: EngineSetup, info: ModelInfo, checkpoint: Checkpoint, gpu: GpuBackend, registry: ServingRegistry,
  onProgress?: (loaded: number, total: number) => void,
): Promise<Engine> {
  const size = setup.tensorParallelSize ?? 1;
  const limits = servingLimits(setup, info.maxModelLen);
  const adapter = registry.architectures.forConfig(checkpoint.config, `${checkpoint.dir}/config.json`);
  const deviceWeightBytes = checkModelFits(
    checkpoint, gpu, info.precision, { size, ...(adapter.shardRule ? { rule: adapter.shardRule(checkpoint.config) } : {}) }, adapter.unreadTensors?.(checkpoint.config),
  );
  const group = await startTensorParallel(size, {
    modelDir: checkpoint.dir, backend: gpu.kind === 'cuda' ? 'cuda' : 'cpu', precision: info.precision, limits, graphs: setup.graphs,
    prefillLastRows: true, expertParallel: setup.expertParallel === true, plugins: setup.plugins,
    // No snapshots: prefix caching is off under tensor parallelism.
    kvCache: { pageSize: setup.blockSize ?? 16, memory: kvMemory(setup, gpu), snapshots: 0 },
  }, registry, checkpoint, gpu, { weights: countingWeights(checkpoint.weights, info.weightBytes / size, onProgress) });
  try {
    const loop = new EngineLoop({
      driver: group.driver,
      vocabSize: group.stack.vocabSize,
      prefillChunk: setup.prefillChunk,
      prefixCaching: false,
      ...(setup.spec ? { speculation: { proposer: new NgramProposer(setup.spec), k: setup.spec.k, adaptive: setup.spec.adaptive } } : {}),
    });
    const fault = () => (group.driver.broken ? new DeviceError('tensor-parallel group', group.driver.broken) : undefined);
    return { loop, stack: group.stack, limits, deviceWeightBytes, kv: { ...group.driver.kvInfo, prefixCaching: loop.prefixCaching }, dispose: () => group.dispose(), fault };
  } catch (error) {
    await group.dispose();
    throw error;
  }
}
