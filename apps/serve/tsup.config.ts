import { defineConfig } from 'tsup';

export default defineConfig({
  // index: the programmatic API; cli: the `metrale` executable (bin), which keeps its shebang;
  // engine-worker: the serving engine's thread, loaded by path (engine-client.ts); tokenizer-worker
  // and json-body-worker: the server's tokenizer and large-body threads, likewise; rank-worker: a
  // follower rank of a tensor-parallel group (parallel/tensor-parallel-group.ts); grammar-host-worker:
  // a thread that compiles grammars and runs their matchers (structured/grammar-pool.ts).
  entry: {
    index: 'src/index.ts', cli: 'src/cli.ts', 'engine-worker': 'src/engine/engine-worker.ts',
    'tokenizer-worker': 'src/tokenizer/tokenizer-worker.ts', 'json-body-worker': 'src/server/json-body-worker.ts',
    'rank-worker': 'src/parallel/rank-worker.ts', 'grammar-host-worker': 'src/structured/grammar-host-worker.ts',
  },
  format: ['esm'],
  // Types only for the API; the executable has none to offer.
  dts: { entry: 'src/index.ts' },
  sourcemap: true,
  clean: true,
  target: 'node20',
});
