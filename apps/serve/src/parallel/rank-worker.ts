// One follower rank of a tensor-parallel group, in its own thread: its device (rank r on device r),
// its shard of the model and its step driver; it applies the leader's commands (serveRankCommands)
// until told to dispose. It reports 'ready' or 'failed' to the thread that started it.
import { parentPort, workerData, type MessagePort } from 'node:worker_threads';
import { Checkpoint, serveRankCommands, type CommunicatorId, type Communicator, type GpuBackend } from '@metrale/core';
import { selectBackend } from '../backends/select-backend.js';
import { loadRegistry } from '../plugins/load-registry.js';
import { buildRankModel, type RankSetup } from './rank-setup.js';

export interface RankWorkerData {
  readonly setup: RankSetup;
  readonly rank: number;
  readonly commId: CommunicatorId;
  readonly port: MessagePort;
  readonly signal: Int32Array;
}

/** 'ready' carries the pages of the follower's KV pool (sized from its own device's memory). */
export type RankWorkerMessage = { readonly t: 'ready'; readonly pages: number } | { readonly t: 'failed'; readonly name: string; readonly message: string };

const parent = parentPort;
if (!parent) throw new Error('rank-worker.js runs as a worker thread of a tensor-parallel leader');
const data = workerData as RankWorkerData;

async function main(): Promise<void> {
  let gpu: GpuBackend | undefined;
  let comm: Communicator | undefined;
  try {
    const registry = await loadRegistry(data.setup.plugins);
    gpu = await selectBackend(data.setup.backend, data.rank);
    if (!gpu.joinCommunicator) throw new Error(`the ${gpu.kind} backend has no collectives`);
    comm = gpu.joinCommunicator(data.commId, data.rank);
    const { stack, driver } = buildRankModel(data.setup, registry, Checkpoint.open(data.setup.modelDir), gpu, comm);
    const g = gpu, c = comm;
    serveRankCommands({
      driver, comm, port: data.port, signal: data.signal,
      onDispose: () => {
        stack.dispose();
        c.dispose();
        g.dispose();
      },
    });
    parent!.postMessage({ t: 'ready', pages: driver.kvInfo.pages } satisfies RankWorkerMessage);
  } catch (error) {
    // The others may already wait in a collective for this rank.
    comm?.abort(`rank ${data.rank} failed to start: ${(error as Error).message}`);
    try {
      gpu?.dispose();
    } catch {
      // Already failing: the first error is the one to report.
    }
    parent!.postMessage({ t: 'failed', name: (error as Error).name ?? 'Error', message: (error as Error).message ?? String(error) } satisfies RankWorkerMessage);
    data.port.close();
  }
}

void main();
