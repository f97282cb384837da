import { CpuBackend } from '@metrale/cpu-backend';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  definePlugin, FixtureError, fixtureLimits, InvalidArgumentError, PluginError, PluginRegistry, readLayerFixture, runLayerFixture, tensorOf,
  type GpuBackend, type LayerFixture, type StepReport,
} from '../src/index.js';
import { affinePlugin, runningSumPlugin } from './fixture-support/test-plugins.js';
import { affineScenario, runningSumScenario, removeTempDirs, scenarioFiles, tempDir, writeFixture, type FixtureFiles, type Scenario } from './fixture-support/write-fixture.js';

afterAll(removeTempDirs);

let gpu: GpuBackend;
beforeEach(() => {
  gpu = new CpuBackend();
});
afterEach(() => gpu.dispose());

function registry(...plugins: ReturnType<typeof definePlugin>[]): PluginRegistry {
  const r = new PluginRegistry();
  for (const p of plugins.length ? plugins : [affinePlugin, runningSumPlugin]) r.register(p);
  return r;
}

function fixtureOf(files: FixtureFiles | Scenario): LayerFixture {
  const f = 'caseJson' in files ? files : scenarioFiles(files);
  return readLayerFixture(writeFixture(tempDir('run'), f));
}

describe('runLayerFixture: a stateless layer', () => {
  it('passes, replaying graphs for decode and verify', () => {
    const fixture = fixtureOf(affineScenario());
    const seen: StepReport[] = [];
    const report = runLayerFixture(fixture, { registry: registry(), gpu, onStep: (r) => seen.push(r) });
    expect(report).toMatchObject({ fixture: fixture.dir, family: 'affine', backend: 'cpu', tolerance: 1e-5, pass: true, rowFormat: { input: 'f32', output: 'f32' } });
    expect(report.worstRel).toBeLessThan(1e-6);
    expect(seen).toEqual(report.steps);
    expect(report.steps.map((s) => [s.step, s.op, s.rows, s.path])).toEqual([
      [0, 'prefill', 15, 'prefill'],
      [1, 'decode', 3, 'capture'],
      [2, 'verify', 12, 'capture'],
      [3, 'decode', 2, 'capture'],
      [4, 'verify', 6, 'capture'],
      [5, 'decode', 3, 'replay'],
      [6, 'prefill', 3, 'prefill'],
      [7, 'decode', 3, 'replay'],
    ]);
  });

  it('feeds each step its token ids', () => {
    const report = runLayerFixture(fixtureOf(affineScenario({ tokenScale: 0.25 })), { registry: registry(), gpu });
    expect(report.pass).toBe(true);
    expect(report.worstRel).toBeLessThan(1e-6);
  });

  it('converts rows to and from bf16 for a bf16 layer; the bound is then the caller\'s', () => {
    const fixture = fixtureOf(affineScenario({ rowDtype: 'bf16' }));
    const strict = runLayerFixture(fixture, { registry: registry(), gpu });
    expect(strict.rowFormat).toEqual({ input: 'bf16', output: 'bf16' });
    expect(strict.pass).toBe(false);
    expect(strict.worstRel).toBeGreaterThan(1e-4);
    expect(strict.worstRel).toBeLessThan(2e-2);
    const loose = runLayerFixture(fixture, { registry: registry(), gpu, tolerance: 2e-2 });
    expect(loose).toMatchObject({ pass: true, tolerance: 2e-2 });
  });

  it('fails a step whose expected value is wrong, with the right rel', () => {
    const files = scenarioFiles(affineScenario());
    const name = 'step3.output';
    const t = files.tensors.find((x) => x.name === name)!;
    const wrong = new Float32Array(t.data.slice().buffer);
    wrong[7]! += 1;
    files.tensors = files.tensors.map((x) => (x.name === name ? tensorOf(name, wrong, x.shape) : x));
    const report = runLayerFixture(fixtureOf(files), { registry: registry(), gpu });
    // The layer reproduces the original values, so ‖out − wrong‖ = 1 and rel = 1 / ‖wrong‖.
    const norm = Math.sqrt(wrong.reduce((a, v) => a + v * v, 0));
    expect(report.pass).toBe(false);
    expect(report.steps.filter((s) => !s.pass).map((s) => s.step)).toEqual([3]);
    expect(report.steps[3]!.rel).toBeCloseTo(1 / norm, 6);
    expect(report.worstRel).toBe(report.steps[3]!.rel);
  });

  it('never passes a NaN, whatever the tolerance', () => {
    const s = affineScenario();
    const weight = new Float32Array(5 * 6).fill(0.1);
    weight[3] = Number.NaN;
    const fixture = fixtureOf({ ...scenarioFiles(s), weights: [tensorOf('weight', weight, [5, 6]), s.weights[1]!] });
    const report = runLayerFixture(fixture, { registry: registry(), gpu, tolerance: 1e30 });
    expect(report.steps.every((r) => Number.isNaN(r.rel) && !r.pass)).toBe(true);
    expect(report.worstRel).toBeNaN();
    expect(report.pass).toBe(false);
  });
});

describe('runLayerFixture: a stateful layer', () => {
  it('passes: history carries across steps and rejected verify rows leave no trace', () => {
    const report = runLayerFixture(fixtureOf(runningSumScenario()), { registry: registry(), gpu });
    expect(report.pass).toBe(true);
    expect(report.worstRel).toBeLessThan(1e-6);
    expect(report.steps.some((s) => s.path === 'replay')).toBe(true);
  });

  it('passes when a batch is padded to its bucket (padding rows are not compared)', () => {
    // Five sequences: buckets 1, 2, 4, 5, so batches of three run padded to four.
    const steps = [
      { op: 'prefill', seqs: [0, 1, 2, 3, 4], lengths: [2, 3, 1, 4, 2] },
      { op: 'verify', seqs: [0, 2, 4], k: 2, accepted: [1, 0, 2] },
      { op: 'decode', seqs: [1, 3, 4] },
      { op: 'verify', seqs: [4, 3, 2, 1, 0], k: 3, accepted: [3, 0, 1, 2, 0] },
      { op: 'decode', seqs: [4, 0, 2] },
      { op: 'verify', seqs: [0, 2, 4], k: 2, accepted: [2, 1, 0] },
    ] as const;
    const report = runLayerFixture(fixtureOf(runningSumScenario({ sequences: 5, steps })), { registry: registry(), gpu });
    expect(report.pass).toBe(true);
    expect(report.steps.map((s) => [s.rows, s.path])).toEqual([
      [12, 'prefill'], [6, 'capture'], [3, 'capture'], [15, 'capture'], [3, 'replay'], [6, 'replay'],
    ]);
  });

  it('passes eagerly with graphs off', () => {
    const report = runLayerFixture(fixtureOf(runningSumScenario()), { registry: registry(), gpu, graphs: false });
    expect(report.pass).toBe(true);
    expect(report.steps.map((s) => s.path)).toEqual(['prefill', 'eager', 'eager', 'eager', 'eager', 'eager', 'prefill', 'eager']);
  });

  it('fails a layer that keeps rejected verify rows, from the first step that sees them', () => {
    const report = runLayerFixture(fixtureOf(runningSumScenario({ leaky: true })), { registry: registry(), gpu });
    expect(report.pass).toBe(false);
    // Step 2 verifies (its own rows are right); step 3 decodes sequences 2 and 0, which had rejected rows.
    expect(report.steps.slice(0, 3).every((s) => s.pass)).toBe(true);
    expect(report.steps[3]!.pass).toBe(false);
    expect(report.steps[3]!.rel).toBeGreaterThan(0.1);
  });
});

describe('runLayerFixture: what it refuses', () => {
  it('a family no loaded plugin provides, naming the loaded ones', () => {
    const fixture = fixtureOf(runningSumScenario());
    expect(() => runLayerFixture(fixture, { registry: registry(affinePlugin), gpu })).toThrow(PluginError);
    expect(() => runLayerFixture(fixture, { registry: registry(affinePlugin), gpu })).toThrow(
      /^plugin running-sum: no loaded plugin provides layer type 'running-sum' \(the family in .*case\.json\); loaded: affine \(test-affine@0\.0\.1\)/,
    );
    expect(() => runLayerFixture(fixture, { registry: new PluginRegistry(), gpu })).toThrow(/no plugins are loaded/);
  });

  it('a layer whose row size matches neither f32 nor bf16 rows of the fixture', () => {
    const files = scenarioFiles(affineScenario());
    files.config.claimed_in_dim = 7;
    const fixture = fixtureOf(files);
    const run = () => runLayerFixture(fixture, { registry: registry(), gpu });
    expect(run).toThrow(FixtureError);
    expect(run).toThrow(/case\.safetensors: layer 'affine' reads 28-byte input rows, but the fixture's input rows are 6 wide \(24 bytes as f32, 12 as bf16\)/);
  });

  it('a tolerance that is not a positive number', () => {
    const fixture = fixtureOf(affineScenario());
    expect(() => runLayerFixture(fixture, { registry: registry(), gpu, tolerance: 0 })).toThrow(InvalidArgumentError);
    expect(() => runLayerFixture(fixture, { registry: registry(), gpu, tolerance: Number.NaN })).toThrow(/tolerance must be a positive number/);
  });

  it('disposes the layer when a step throws', () => {
    let disposed = 0;
    const failing = definePlugin({
      ...affinePlugin,
      create(ctx) {
        const layer = affinePlugin.create(ctx);
        let steps = 0;
        return {
          ...layer,
          forward(step) {
            if (++steps === 3) throw new Error('kernel exploded');
            layer.forward(step);
          },
          dispose() {
            disposed++;
            layer.dispose();
          },
        };
      },
    });
    const fixture = fixtureOf(affineScenario());
    expect(() => runLayerFixture(fixture, { registry: registry(failing), gpu, graphs: false })).toThrow(/kernel exploded/);
    expect(disposed).toBe(1);
  });
});

describe('fixtureLimits', () => {
  it('sizes the layer for the longest history, widest batch and k, and a one-chunk prefill', () => {
    // Sequence 1: 9 → 10 → 14 (+4 verify, all accepted) → verify k 3 reaches 17, keeps 1 → 15 → 16 → 19 → 20.
    expect(fixtureLimits(fixtureOf(affineScenario()))).toEqual({ maxSeqs: 3, maxSeqLen: 28, maxBatch: 3, maxK: 4, maxRows: 15 });
  });
});
