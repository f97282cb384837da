// Golden layer fixtures in a plugin's own tests: find the fixture directories a generator wrote
// and run each one through `runLayerFixture` with the plugin, as `metrale check-layer` does.
import { existsSync, readdirSync } from 'node:fs';
import { basename, join, posix } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { GpuBackend } from '../device/gpu-backend.js';
import type { LayerFixture } from '../fixture/layer-fixture.js';
import { readLayerFixture } from '../fixture/read-layer-fixture.js';
import { runLayerFixture, type LayerFixtureReport, type StepReport } from '../fixture/run-layer-fixture.js';
import type { MetralePlugin } from '../plugin/define-plugin.js';
import { PluginRegistry } from '../plugin/registry.js';

export interface FixtureDirectoriesOptions {
  /** An environment variable that, when set and not empty, names the directory to read instead (a fresh generator output). */
  readonly envVar?: string;
  /** The generator script, from the repository root (e.g. `tools/fixtures/gdn.py`); the `missing` message names it. */
  readonly generator: string;
  /** Where the `missing` message tells the generator to write (default: the directory read). */
  readonly out?: string;
}

export interface FixtureDirectories {
  /** The directory read: `$envVar` when set, else the one given. */
  readonly root: string;
  /** Its fixture directories, sorted; empty when it has none or does not exist. */
  readonly dirs: readonly string[];
  /** Why a test with no fixtures fails: names `root` and the generator command that writes them. */
  readonly missing: string;
}

/**
 * The fixture directories under `dir` (or under `$envVar`, when set): every subdirectory, sorted,
 * except hidden ones such as the generators' `.NAME.tmp` work directories. Having none is not an
 * error here: a test asserts `dirs.length > 0` with `missing` as its message, so that no fixtures
 * is a failure, never a pass.
 */
export function fixtureDirectories(dir: string | URL, options: FixtureDirectoriesOptions): FixtureDirectories {
  const fromEnv = options.envVar ? process.env[options.envVar] : undefined;
  const root = fromEnv || (dir instanceof URL ? fileURLToPath(dir) : dir);
  const dirs = existsSync(root)
    ? readdirSync(root, { withFileTypes: true })
        .filter((e) => e.isDirectory() && !e.name.startsWith('.'))
        .map((e) => join(root, e.name))
        .sort()
    : [];
  const missing =
    `no golden fixtures in ${root}: run "python3 ${options.generator} --out ${options.out ?? root}" ` +
    `on a machine with PyTorch and transformers (${posix.dirname(options.generator)}/README.md), then commit the directories it writes`;
  return { root, dirs, missing };
}

export interface CheckLayerFixtureOptions {
  /**
   * The plugins to run the fixture with, in order, each in its own registry on a fresh backend;
   * a function is given the fixture (e.g. to size a cache from `fixtureLimits(fixture)`).
   */
  readonly plugins: readonly MetralePlugin[] | ((fixture: LayerFixture) => readonly MetralePlugin[]);
  /** Makes a fresh backend for each run (e.g. `() => new CpuBackend()`); it is disposed after the run. */
  readonly backend: () => GpuBackend;
  /** The bound each step is held to, given the run's report (default: `report.tolerance`, case.json's `tolerance.rel`). */
  readonly bound?: (report: LayerFixtureReport) => number;
  /**
   * What goes to the console: 'summary' (default) prints each run's summary line, 'steps' also
   * prints one JSON line per step as it finishes, 'none' nothing. Failed captures are warned about
   * in every mode but 'none'.
   */
  readonly print?: 'none' | 'summary' | 'steps';
  /** Prefix of the warnings (e.g. `[layer-gdn gpu]`). */
  readonly label?: string;
}

/** One run of a fixture with one plugin. */
export interface LayerFixtureRun {
  /** The plugin's name. */
  readonly plugin: string;
  readonly report: LayerFixtureReport;
  /** The bound the steps were held to. */
  readonly bound: number;
  /** One line per step over `bound` (NaN is over every bound); empty when every step is within it. */
  readonly over: readonly string[];
}

/**
 * Reads the fixture in `dir` and runs it through `runLayerFixture` (graphs on, write-on-accept)
 * with each plugin, on a fresh backend each time, disposing the backend after the run. Returns
 * the fixture and one run per plugin; the caller asserts on them (`over` empty, `report.pass`, …).
 */
export function checkLayerFixture(dir: string, options: CheckLayerFixtureOptions): { fixture: LayerFixture; runs: LayerFixtureRun[] } {
  const fixture = readLayerFixture(dir);
  const plugins = typeof options.plugins === 'function' ? options.plugins(fixture) : options.plugins;
  const print = options.print ?? 'summary';
  const name = basename(dir);
  const runs: LayerFixtureRun[] = [];
  for (const plugin of plugins) {
    const registry = new PluginRegistry();
    registry.register(plugin);
    const gpu = options.backend();
    try {
      const onStep = print === 'steps' ? (s: StepReport) => console.log(JSON.stringify({ fixture: name, ...s })) : undefined;
      const report = runLayerFixture(fixture, { registry, gpu, ...(onStep ? { onStep } : {}) });
      const bound = options.bound ? options.bound(report) : report.tolerance;
      const over = stepsOver(report, bound);
      if (print !== 'none') {
        console.log(fixtureSummaryLine(report, bound));
        const failed = report.steps.filter((s) => s.path === 'capture-failed');
        if (failed.length > 0) {
          console.warn(`${options.label ? `${options.label} ` : ''}${name}: graph capture failed (ran eagerly) at steps ` +
            failed.map((s) => `${s.step}: ${s.captureError ?? 'no reason given'}`).join('; '));
        }
      }
      runs.push({ plugin: plugin.name, report, bound, over });
    } finally {
      gpu.dispose();
    }
  }
  return { fixture, runs };
}

/** One line per step of `report` that is over `bound` (NaN is over every bound). */
export function stepsOver(report: LayerFixtureReport, bound: number): string[] {
  return report.steps
    .filter((s) => !(s.rel <= bound))
    .map((s) => `step ${s.step} (${s.op}, ${s.rows} rows, ${s.path}): rel ${s.rel} > ${bound}`);
}

/** The JSON summary line of a fixture run at `bound`, for a test log. */
export function fixtureSummaryLine(report: LayerFixtureReport, bound: number): string {
  return JSON.stringify({
    fixture: basename(report.fixture), backend: report.backend, rows: report.rowFormat,
    steps: report.steps.length, worst_rel: report.worstRel, bound, pass: stepsOver(report, bound).length === 0,
  });
}
