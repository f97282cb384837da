// The golden fixtures of this package: packages/layer-dsa/fixtures/<case>/, written from the
// Hugging Face modules by tools/fixtures/dsa.py (see tools/fixtures/README.md) and committed.
import { existsSync, readdirSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { LayerFixtureReport } from '@metrale/core';

/** The committed fixtures; METRALE_DSA_FIXTURES_DIR points the tests at a fresh generator output instead. */
export const FIXTURES_DIR = process.env.METRALE_DSA_FIXTURES_DIR || join(dirname(fileURLToPath(import.meta.url)), '..', 'fixtures');

export const MISSING_FIXTURES =
  `no golden fixtures in ${FIXTURES_DIR}: run "python3 tools/fixtures/dsa.py --out packages/layer-dsa/fixtures" ` +
  'on a machine with PyTorch and transformers (tools/fixtures/README.md), then commit the directories it writes';

/** Fixture directories, sorted; the generator's `.NAME.tmp` work directories are not fixtures. */
export function fixtureDirs(): string[] {
  if (!existsSync(FIXTURES_DIR)) return [];
  return readdirSync(FIXTURES_DIR, { withFileTypes: true })
    .filter((e) => e.isDirectory() && !e.name.startsWith('.'))
    .map((e) => join(FIXTURES_DIR, e.name))
    .sort();
}

/** One line per step that is over `bound` (NaN is over every bound). */
export function stepsOver(report: LayerFixtureReport, bound: number): string[] {
  return report.steps
    .filter((s) => !(s.rel <= bound))
    .map((s) => `step ${s.step} (${s.op}, ${s.rows} rows, ${s.path}): rel ${s.rel} > ${bound}`);
}

/** The summary line `metrale check-layer` prints, for the test log. */
export function summaryLine(report: LayerFixtureReport, bound: number): string {
  return JSON.stringify({
    fixture: basename(report.fixture), backend: report.backend, rows: report.rowFormat,
    steps: report.steps.length, worst_rel: report.worstRel, bound, pass: stepsOver(report, bound).length === 0,
  });
}
