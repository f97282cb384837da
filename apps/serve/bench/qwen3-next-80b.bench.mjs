// The decode bench of the Qwen3-Next-80B-shaped model, by the name docs/benchmarks.md's records
// cite: decode.bench.mjs with its default --model qwen3-next-80b (the same options and JSON).
//
//   node bench/qwen3-next-80b.bench.mjs [--backend cuda] [--dtype bf16|fp8|f32] [--experts 64]
//        [--batches 1,8,64] [--steps 64] [--prompt 128] [--spec 4] [--eager] [--layer-times]
//        [--tiny] [--out FILE]
await import('./decode.bench.mjs');
