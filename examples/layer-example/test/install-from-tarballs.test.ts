import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CONFORMANCE_CHECKS } from '@metrale/core/testing';
import { afterAll, describe, expect, it } from 'vitest';
import { pack } from './support/pack-workspace.js';

// A user's install: pack core, layer-std, the CPU backend and this plugin as the registry would serve them
// (`pnpm pack` rewrites workspace: ranges to versions), install the tarballs with plain npm into
// an empty project outside the workspace, and run the conformance kit there.
const work = mkdtempSync(join(tmpdir(), 'metrale-install-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe('installing the plugin from tarballs with npm', () => {
  it('installs core, layer-std, cpu-backend and the example outside the workspace and passes the conformance kit there', () => {
    const names = ['@metrale/core', '@metrale/layer-std', '@metrale/cpu-backend', '@metrale/layer-example'];
    const tarballs = Object.fromEntries(names.map((n) => [n, pack(n, join(work, 'tarballs'))]));
    const app = join(work, 'app');
    execFileSync('mkdir', ['-p', app]);
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'user-app', private: true, type: 'module', dependencies: Object.fromEntries(Object.entries(tarballs).map(([n, t]) => [n, `file:${t}`])) }));
    writeFileSync(
      join(app, 'check.mjs'),
      `import { CpuBackend } from '@metrale/cpu-backend';
import { MemoryWeightSource, tensorOf } from '@metrale/core';
import { runLayerConformance } from '@metrale/core/testing';
import plugin from '@metrale/layer-example';
const gain = Float32Array.from({ length: 8 }, (_, i) => 0.5 + i / 8);
const report = runLayerConformance(plugin, { backend: () => new CpuBackend(), config: { hidden_size: 8, sliding_window: 3 }, weights: new MemoryWeightSource('w', [tensorOf('gain', gain, [8])]) });
console.log(JSON.stringify({ passed: report.passed, checks: report.checks.length }));
`,
    );
    execFileSync('npm', ['install', '--no-audit', '--no-fund', '--loglevel=error'], { cwd: app, stdio: 'pipe', env: { ...process.env, npm_config_workspaces: 'false' } });
    const out = execFileSync('node', ['check.mjs'], { cwd: app, encoding: 'utf8' });
    expect(JSON.parse(out.trim().split('\n').pop()!)).toEqual({ passed: true, checks: CONFORMANCE_CHECKS.length });
  }, 300_000);
});
