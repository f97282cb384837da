// A follower rank whose device has half the KV memory of the leader's: rank-worker.js with the
// group's setup changed before it reads it (tensor-parallel-kv.test.ts).
import { workerData } from 'node:worker_threads';

const kv = workerData.setup.kvCache;
workerData.setup = { ...workerData.setup, kvCache: { ...kv, memory: { bytes: Math.floor(kv.memory.bytes / 2) } } };
await import('../../dist/rank-worker.js');
