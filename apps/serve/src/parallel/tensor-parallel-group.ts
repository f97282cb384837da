import { MessageChannel, Worker } from 'node:worker_threads';
import {
  Checkpoint, DeviceError, ParallelConfigError, TensorParallelDriver, type Communicator, type GpuBackend, type ModelStack, type StepDriver, type WeightSource,
} from '@metrale/core';
import type { ServingRegistry } from '../plugins/build-registry.js';
import { buildRankStack, rankDriver, type RankSetup } from './rank-setup.js';
import type { RankWorkerData, RankWorkerMessage } from './rank-worker.js';

export interface TensorParallelGroup {
  readonly driver: TensorParallelDriver;
  /** Rank 0's stack (its vocabSize and stop tokens are the model's). */
  readonly stack: ModelStack;
  readonly size: number;
  /** Disposes every rank and ends the followers' threads. */
  dispose(): Promise<void>;
}

export interface StartGroupOptions {
  /** The follower script; default: rank-worker.js beside this module's bundle. */
  readonly workerUrl?: URL;
  /** Rank 0's weights (a view of the checkpoint's, e.g. counting bytes read); default the checkpoint's. */
  readonly weights?: WeightSource;
}

/**
 * Starts a tensor-parallel group of `size` ranks: rank 0 here, on `gpu` (the leader's thread, where
 * the engine loop runs), and ranks 1 … size − 1 each in a worker thread on its own device (rank r
 * on device r of the same backend kind), all building their shards of `checkpoint`'s model at once.
 * Returns when every rank is ready; a rank that fails to start fails the whole group, with its
 * error, and every thread is ended.
 */
export async function startTensorParallel(
  size: number, setup: RankSetup, registry: ServingRegistry, checkpoint: Checkpoint, gpu: GpuBackend, options: StartGroupOptions = {},
): Promise<TensorParallelGroup> {
  if (!gpu.createCommunicatorId || !gpu.joinCommunicator) {
    throw new ParallelConfigError(`--tensor-parallel-size ${size} needs collectives, which the ${gpu.kind} backend does not have`);
  }
  const commId = gpu.createCommunicatorId(size);
  const url = options.workerUrl ?? new URL('./rank-worker.js', import.meta.url);
  const followers = Array.from({ length: size - 1 }, (_, i) => {
    const rank = i + 1;
    const { port1, port2 } = new MessageChannel();
    const signal = new Int32Array(new SharedArrayBuffer(4));
    const workerData: RankWorkerData = { setup, rank, commId, port: port2, signal };
    const worker = new Worker(url, { workerData, transferList: [port2] });
    const ready = new Promise<number>((resolve, reject) => {
      worker.once('message', (m: RankWorkerMessage) => {
        if (m.t === 'ready') resolve(m.pages);
        else reject(rankError(rank, m.name, m.message));
      });
      worker.once('error', (e) => reject(rankError(rank, e.name, e.message)));
      worker.once('exit', (code) => reject(new DeviceError(`rank ${rank}`, `its thread exited (code ${code}) before it was ready`)));
    });
    // Handled below; without this a rejection while rank 0 builds would be reported as unhandled.
    ready.catch(() => undefined);
    return { rank, worker, port: port1, signal, ready };
  });
  const endThreads = async () => {
    for (const f of followers) f.port.close();
    await Promise.all(followers.map((f) => f.worker.terminate()));
  };
  let comm: Communicator | undefined;
  let stack: ModelStack | undefined;
  let local: StepDriver | undefined;
  try {
    comm = gpu.joinCommunicator(commId, 0);
    stack = buildRankStack(setup, registry, checkpoint, gpu, comm, options.weights);
    // Each rank's pool is sized from its own device's free memory, and every rank hands out pages
    // for the same calls: the leader's pool, which the engine loop plans with, is made no larger
    // than the smallest follower's, so no follower runs out of pages before the leader does.
    const followerPages = await Promise.all(followers.map((f) => f.ready));
    local = rankDriver(setup, stack, gpu, followerPages.length > 0 ? Math.min(...followerPages) : undefined);
  } catch (error) {
    comm?.abort(`rank 0 failed to start: ${(error as Error).message}`);
    local?.dispose();
    stack?.dispose();
    comm?.dispose();
    await endThreads();
    throw error;
  }
  const driver = new TensorParallelDriver({ local, comm, followers: followers.map((f) => ({ port: f.port, signal: f.signal })) });
  const c = comm;
  return {
    driver, stack, size,
    async dispose() {
      try {
        driver.dispose();
      } finally {
        stack.dispose();
        c.dispose();
        await Promise.all(followers.map((f) => new Promise<void>((resolve) => {
          f.worker.once('exit', () => resolve());
          // A follower that did not take the dispose command is ended.
          setTimeout(() => void f.worker.terminate(), 10_000).unref();
        })));
      }
    },
  };
}

/** A follower's start-up failure, keeping a metrale error's class (a `ParallelConfigError` stays one). */
function rankError(rank: number, name: string, message: string): Error {
  if (name === 'ParallelConfigError') return new ParallelConfigError(message);
  return new DeviceError(`rank ${rank}`, `${name}: ${message}`);
}
