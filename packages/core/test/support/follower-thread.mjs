// A follower rank for the tensor-parallel driver tests: core's and the CPU backend's dist, one
// rank-sum layer, a step driver, and the leader's commands until it says dispose.
import { parentPort, workerData } from 'node:worker_threads';
import * as core from '../../dist/index.js';
import { CpuBackend } from '../../../cpu-backend/dist/index.js';
import { makeRankSumLayer, RANK_SUM_LIMITS } from './rank-sum-layer.mjs';

const { commId, rank, port, signal, fail } = workerData;
const gpu = new CpuBackend();
const comm = gpu.joinCommunicator(commId, rank);
const layer = makeRankSumLayer(core, gpu, comm, fail);
const driver = new core.StepDriver({ gpu, layers: [layer], limits: RANK_SUM_LIMITS });
core.serveRankCommands({
  driver, comm, port, signal,
  onDispose: () => {
    layer.dispose();
    gpu.dispose();
  },
});
parentPort.postMessage('ready');
