import { mkdirSync } from 'node:fs';
import { basename, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { CpuBackend } from '@metrale/cpu-backend';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import type { GpuBackend } from '../src/index.js';
import { checkLayerFixture, faultInjectingBackend, fixtureDirectories } from '../src/testing/index.js';
import { fixtureSummaryLine, stepsOver } from '../src/testing/layer-fixtures.js';
import { affinePlugin, runningSumPlugin } from './fixture-support/test-plugins.js';
import { affineScenario, removeTempDirs, runningSumScenario, scenarioFiles, tempDir, writeFixture } from './fixture-support/write-fixture.js';

afterAll(removeTempDirs);
afterEach(() => {
  vi.restoreAllMocks();
  vi.unstubAllEnvs();
});

const ENV = 'METRALE_TEST_LAYER_FIXTURES_DIR';

describe('fixtureDirectories', () => {
  it('lists the fixture directories sorted, leaving out files and hidden work directories', () => {
    const root = tempDir('dirs');
    for (const d of ['b-case', 'a-case', '.c-case.tmp']) mkdirSync(join(root, d));
    writeFixture(join(root, 'c-case'), scenarioFiles(affineScenario()));
    const found = fixtureDirectories(root, { generator: 'tools/fixtures/x.py' });
    expect(found.root).toBe(root);
    expect(found.dirs).toEqual(['a-case', 'b-case', 'c-case'].map((d) => join(root, d)));
    expect(fixtureDirectories(pathToFileURL(root + '/'), { generator: 'tools/fixtures/x.py' }).dirs).toEqual(found.dirs);
  });

  it('reads $envVar instead when it is set, and the given directory when it is empty', () => {
    const root = tempDir('dirs');
    const other = tempDir('dirs');
    mkdirSync(join(other, 'only'));
    vi.stubEnv(ENV, other);
    expect(fixtureDirectories(root, { envVar: ENV, generator: 'g.py' })).toMatchObject({ root: other, dirs: [join(other, 'only')] });
    vi.stubEnv(ENV, '');
    expect(fixtureDirectories(root, { envVar: ENV, generator: 'g.py' })).toMatchObject({ root, dirs: [] });
  });

  it('finds none in a missing directory, and says which generator writes them', () => {
    const root = join(tempDir('dirs'), 'nothing-here');
    const found = fixtureDirectories(root, { generator: 'tools/fixtures/gdn.py', out: 'packages/layer-gdn/fixtures' });
    expect(found.dirs).toEqual([]);
    expect(found.missing).toBe(
      `no golden fixtures in ${root}: run "python3 tools/fixtures/gdn.py --out packages/layer-gdn/fixtures" ` +
        'on a machine with PyTorch and transformers (tools/fixtures/README.md), then commit the directories it writes',
    );
    expect(fixtureDirectories(root, { generator: 'gen.py' }).missing).toContain(`run "python3 gen.py --out ${root}"`);
  });
});

describe('checkLayerFixture', () => {
  const quiet = () => vi.spyOn(console, 'log').mockImplementation(() => {});

  it('runs the fixture with each plugin on a fresh backend, disposes it, and prints a summary line per run', () => {
    const log = quiet();
    const dir = writeFixture(tempDir('check'), scenarioFiles(affineScenario()));
    const made: GpuBackend[] = [];
    const disposed: GpuBackend[] = [];
    const backend = () => {
      const gpu = new CpuBackend();
      const dispose = gpu.dispose.bind(gpu);
      gpu.dispose = () => {
        disposed.push(gpu);
        dispose();
      };
      made.push(gpu);
      return gpu;
    };
    const { fixture, runs } = checkLayerFixture(dir, { plugins: (f) => (f.family === 'affine' ? [affinePlugin, affinePlugin] : []), backend });
    expect(fixture.family).toBe('affine');
    expect(runs).toHaveLength(2);
    for (const run of runs) {
      expect(run).toMatchObject({ plugin: affinePlugin.name, bound: 1e-5, over: [] });
      expect(run.report.pass).toBe(true);
      expect(run.report.steps).toHaveLength(fixture.steps.length);
    }
    expect(made).toHaveLength(2);
    expect(disposed).toEqual(made);
    expect(log.mock.calls.map((c) => c[0])).toEqual(runs.map((r) => fixtureSummaryLine(r.report, r.bound)));
  });

  it('holds the steps to the given bound and lists the ones over it; prints steps and warns as asked', () => {
    const log = quiet();
    const dir = writeFixture(tempDir('check'), scenarioFiles(runningSumScenario({ leaky: true })));
    const { runs } = checkLayerFixture(dir, { plugins: [runningSumPlugin], backend: () => new CpuBackend(), print: 'steps' });
    const [run] = runs;
    expect(run!.report.pass).toBe(false);
    expect(run!.over.length).toBeGreaterThan(0);
    expect(run!.over).toEqual(stepsOver(run!.report, run!.bound));
    expect(run!.over[0]).toMatch(/^step \d+ \((prefill|decode|verify), \d+ rows, [a-z-]+\): rel .+ > 0\.00001$/);
    expect(log).toHaveBeenCalledTimes(run!.report.steps.length + 1);
    expect(JSON.parse(log.mock.calls[0]![0] as string)).toMatchObject({ fixture: basename(dir), step: 0 });

    const loose = checkLayerFixture(dir, { plugins: [runningSumPlugin], backend: () => new CpuBackend(), bound: () => Infinity, print: 'none' });
    expect(loose.runs[0]!.bound).toBe(Infinity);
    expect(loose.runs[0]!.over).toEqual([]);
    expect(log).toHaveBeenCalledTimes(run!.report.steps.length + 1);
  });

  it('warns, with the label, about the steps whose graph capture failed', () => {
    quiet();
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
    const dir = writeFixture(tempDir('check'), scenarioFiles(affineScenario()));
    const backend = () => faultInjectingBackend(new CpuBackend(), { failCaptures: true }).gpu;
    const { runs } = checkLayerFixture(dir, { plugins: [affinePlugin], backend, label: '[test gpu]' });
    const failed = runs[0]!.report.steps.filter((s) => s.path === 'capture-failed');
    expect(failed.length).toBeGreaterThan(0);
    expect(runs[0]!.over).toEqual([]);
    expect(warn).toHaveBeenCalledTimes(1);
    expect(warn.mock.calls[0]![0]).toMatch(new RegExp(`^\\[test gpu\\] ${basename(dir)}: graph capture failed \\(ran eagerly\\) at steps ${failed[0]!.step}: `));
  });

  it('counts NaN as over every bound', () => {
    const report = { fixture: '/x/case', steps: [{ step: 0, op: 'decode', rows: 1, rel: NaN, pass: false, path: 'eager' }] } as never;
    expect(stepsOver(report, Infinity)).toEqual(['step 0 (decode, 1 rows, eager): rel NaN > Infinity']);
  });
});
