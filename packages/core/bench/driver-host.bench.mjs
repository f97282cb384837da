// Host time of one decode step through the step driver on the replay path: 48 layers, batch 64,
// kernels that do nothing. Bar (docs/performance.md): ≤ 50 µs per step. Measured twice: on the
// CPU reference backend (whose graph replay runs the 48 no-op kernels on the host), and on a
// backend whose device calls return at once (the driver's own cost).
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defineKernel, StepDriver } from '@metrale/core';
import { CpuBackend } from '../../cpu-backend/dist/index.js';

const LAYERS = 48;
const BATCH = 64;
const STEPS = 2000;
const ROUNDS = 15;

const noop = defineKernel({ name: 'bench.noop', params: { input: 'ptr', output: 'ptr', slots: 'ptr' }, cpu: () => {} });

/** A layer with a host-tracked length (room check and sync, as DSA) and one no-op kernel. */
class BenchLayer {
  type = 'bench';
  inputRowBytes = 16;
  outputRowBytes = 16;
  constructor(gpu) { this.gpu = gpu; }
  openState(slot) { return { slot, length: 0 }; }
  closeState() {}
  checkReplayRoom(state, seqLen, k) { if (seqLen + k > 1 << 30) throw new Error('room'); }
  syncReplayedStep(state, seqLen, k) { state.length = seqLen + k; }
  forward(step) {
    for (let p = 0; p < step.batch; p++) { const s = step.host.states[p]; if (s) s.length = step.host.seqLens[p] + 1; }
    this.gpu.launch(noop, { grid: step.rows, block: 32, stream: step.stream }, { input: step.input, output: step.output, slots: step.tables.slots });
  }
  dispose() {}
}

/** Device calls that return at once: what remains is the driver's own host work. */
function instantBackend() {
  const cpu = new CpuBackend();
  return new Proxy(cpu, {
    get(target, prop) {
      if (prop === 'launchGraph' || prop === 'copyToDeviceAsync' || prop === 'recordEvent' || prop === 'synchronizeEvent') return () => {};
      const v = Reflect.get(target, prop, target);
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
}

function measure(gpu) {
  const layers = Array.from({ length: LAYERS }, () => new BenchLayer(gpu));
  const limits = { maxSeqs: BATCH, maxSeqLen: 1 << 20, maxBatch: BATCH, maxK: 1, maxRows: BATCH };
  const driver = new StepDriver({ gpu, layers, limits });
  const seqs = Array.from({ length: BATCH }, () => driver.open());
  const tokens = new Int32Array(BATCH).map((_, i) => (i * 7919) % 1000);
  const input = { seqs, tokens };
  for (let i = 0; i < 200; i++) driver.decode(input); // capture, then warm replays
  const perStep = [];
  for (let r = 0; r < ROUNDS; r++) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < STEPS; i++) driver.decode(input);
    perStep.push(Number(process.hrtime.bigint() - t0) / 1000 / STEPS);
  }
  const path = driver.decode(input).path;
  driver.dispose();
  perStep.sort((a, b) => a - b);
  return { medianUs: perStep[Math.floor(ROUNDS / 2)], minUs: perStep[0], maxUs: perStep[ROUNDS - 1], path };
}

const results = {
  date: new Date().toISOString(),
  node: process.version,
  shape: { layers: LAYERS, batch: BATCH, steps: STEPS, rounds: ROUNDS },
  barUs: 50,
  cpuReference: measure(new CpuBackend()),
  driverOnly: measure(instantBackend()),
};
console.log('driver host time per decode step (replay path, 48 layers, batch 64)');
console.log('backend            median µs   min µs   max µs   path     bar 50 µs');
for (const [name, r] of [['cpu reference', results.cpuReference], ['driver only', results.driverOnly]]) {
  console.log(`${name.padEnd(18)} ${r.medianUs.toFixed(1).padStart(9)} ${r.minUs.toFixed(1).padStart(8)} ${r.maxUs.toFixed(1).padStart(8)}   ${r.path.padEnd(7)}  ${r.medianUs <= 50 ? 'met' : 'MISSED'}`);
}
const out = process.env.METRALE_BENCH_OUT ?? join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'bench-results', 'core-driver-host.json');
mkdirSync(dirname(out), { recursive: true });
writeFileSync(out, JSON.stringify(results, null, 2) + '\n');
console.log(`written ${out}`);
