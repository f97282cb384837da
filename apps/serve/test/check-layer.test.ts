import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tensorOf } from '@metrale/core';
import { afterAll, describe, expect, it } from 'vitest';
import { AFFINE_PLUGIN, metrale, type CliRun } from './support/run-cli.js';
import { removeAffineFixtures, rewriteTensors, writeAffineFixture } from './support/write-affine-fixture.js';

afterAll(removeAffineFixtures);

/** What `metrale doctor` says of CUDA on this machine. */
function cudaProbe(): { available: boolean; reason: string } {
  const doctor = JSON.parse(metrale(['doctor', '--json']).stdout) as { backends: { name: string; available: boolean; reason: string }[] };
  return doctor.backends.find((b) => b.name === 'cuda')!;
}

function checkLayer(dir: string, ...args: string[]): CliRun {
  return metrale(['check-layer', dir, '--plugin', AFFINE_PLUGIN, ...args]);
}

/** One stderr line, naming `file`, matching `problem`, with no stack trace; exit code 1. */
function expectOneLineError(r: CliRun, file: string, problem: RegExp): void {
  expect(r.code).toBe(1);
  const lines = r.stderr.trim().split('\n');
  expect(lines).toHaveLength(1);
  expect(lines[0]).toMatch(/^error: /);
  expect(lines[0]).toContain(file);
  expect(lines[0]).toMatch(problem);
  expect(r.stdout).toBe('');
}

describe('metrale check-layer: a good fixture', () => {
  it('prints one JSON line per step and the summary, and exits 0', () => {
    const f = writeAffineFixture();
    const r = checkLayer(f.dir, '--backend', 'cpu');
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.lines).toHaveLength(f.steps + 1);
    const steps = r.lines.slice(0, -1).map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(steps.map((s) => [s.step, s.op, s.rows, s.pass, s.path])).toEqual([
      [0, 'prefill', 6, true, 'prefill'],
      [1, 'decode', 2, true, 'capture'],
      [2, 'verify', 6, true, 'capture'],
      [3, 'decode', 2, true, 'replay'],
      [4, 'decode', 2, true, 'replay'],
    ]);
    for (const s of steps) expect(s.rel).toBeLessThan(1e-6);
    const summary = JSON.parse(r.lines.at(-1)!) as Record<string, unknown>;
    expect(Object.keys(summary)).toEqual(['fixture', 'backend', 'steps', 'worst_rel', 'pass']);
    expect(summary).toMatchObject({ fixture: f.dir, backend: 'cpu', steps: f.steps, pass: true });
    expect(summary.worst_rel).toBeLessThan(1e-6);
  });

  it('runs decode and verify eagerly with --no-graphs', () => {
    const r = checkLayer(writeAffineFixture().dir, '--backend', 'cpu', '--no-graphs');
    expect(r.code).toBe(0);
    const paths = r.lines.slice(0, -1).map((l) => (JSON.parse(l) as { path: string }).path);
    expect(paths).toEqual(['prefill', 'eager', 'eager', 'eager', 'eager']);
  });

  it('picks the CPU under --backend auto (the default) when CUDA is unavailable', () => {
    // The test plugin has only a CPU kernel, so on a machine with CUDA there is nothing to check here.
    if (cudaProbe().available) return;
    const r = checkLayer(writeAffineFixture().dir);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.lines.at(-1)!)).toMatchObject({ backend: 'cpu', pass: true });
  });

  it('exits 1 when a step is off, printing its rel', () => {
    const f = writeAffineFixture();
    rewriteTensors(f, (ts) => ts.map((t) => (t.name === 'step2.output' ? tensorOf(t.name, new Float32Array(6 * 4).fill(1), [6, 4]) : t)));
    const r = checkLayer(f.dir, '--backend', 'cpu');
    expect(r.code).toBe(1);
    expect(r.lines).toHaveLength(f.steps + 1);
    const step2 = JSON.parse(r.lines[2]!) as { pass: boolean; rel: number };
    expect(step2.pass).toBe(false);
    expect(step2.rel).toBeGreaterThan(0.1);
    expect(JSON.parse(r.lines.at(-1)!)).toMatchObject({ pass: false, worst_rel: step2.rel });
    expect(r.stderr).toMatch(/^error: .*: step\(s\) 2 of 5 exceed the tolerance 1\.00e-5 \(worst rel \d\.\d\de[+-]\d+\)$/m);
  });

  it('--tolerance overrides the fixture bound', () => {
    const f = writeAffineFixture();
    rewriteTensors(f, (ts) => ts.map((t) => (t.name === 'step2.output' ? tensorOf(t.name, new Float32Array(6 * 4).fill(1), [6, 4]) : t)));
    expect(checkLayer(f.dir, '--backend', 'cpu', '--tolerance', '100').code).toBe(0);
  });
});

describe('metrale check-layer: bad inputs give one line naming the file', () => {
  it('a missing tensor', () => {
    const f = writeAffineFixture();
    rewriteTensors(f, (ts) => ts.filter((t) => t.name !== 'step3.input'));
    expectOneLineError(checkLayer(f.dir, '--backend', 'cpu'), join(f.dir, 'case.safetensors'), /tensor 'step3.input' named by steps\[3\]\.input is missing/);
  });

  it('a tensor of the wrong shape', () => {
    const f = writeAffineFixture();
    rewriteTensors(f, (ts) => ts.map((t) => (t.name === 'step2.input' ? tensorOf(t.name, new Float32Array(5 * 6), [5, 6]) : t)));
    expectOneLineError(checkLayer(f.dir, '--backend', 'cpu'), join(f.dir, 'case.safetensors'), /tensor 'step2.input' .* has 5 rows, shape \[5, 6\]; expected 6 rows/);
  });

  it('a family no plugin provides', () => {
    const f = writeAffineFixture({ family: 'hyena' });
    expectOneLineError(checkLayer(f.dir, '--backend', 'cpu'), join(f.dir, 'case.json'), /no loaded plugin provides layer type 'hyena'.*loaded: .*affine \(serve-test-affine@0\.0\.1\)/);
  });

  it('a corrupt safetensors header', () => {
    const f = writeAffineFixture();
    const bytes = new Uint8Array(32);
    new DataView(bytes.buffer).setBigUint64(0, 1000n, true);
    writeFileSync(join(f.dir, 'weights.safetensors'), bytes);
    expectOneLineError(checkLayer(f.dir, '--backend', 'cpu'), join(f.dir, 'weights.safetensors'), /corrupt safetensors header: header length 1000 does not fit in a 32-byte file/);
  });

  it('a missing case.json', () => {
    const f = writeAffineFixture();
    rmSync(join(f.dir, 'case.json'));
    expectOneLineError(checkLayer(f.dir, '--backend', 'cpu'), join(f.dir, 'case.json'), /missing file/);
  });

  it('a field out of range', () => {
    const f = writeAffineFixture();
    const json = structuredClone(f.caseJson) as { steps: { accepted?: number[] }[] };
    json.steps[2]!.accepted = [1, 4];
    writeFileSync(join(f.dir, 'case.json'), JSON.stringify(json));
    expectOneLineError(checkLayer(f.dir, '--backend', 'cpu'), join(f.dir, 'case.json'), /steps\[2\]\.accepted\[1\] is 4, outside 0\.\.k \(k = 3\)/);
  });

  it('--verbose adds the stack trace', () => {
    const f = writeAffineFixture();
    rmSync(join(f.dir, 'case.json'));
    const r = checkLayer(f.dir, '--backend', 'cpu', '--verbose');
    expect(r.code).toBe(1);
    expect(r.stderr.split('\n')[0]).toMatch(/^error: .*case\.json: missing file/);
    expect(r.stderr).toMatch(/FixtureError: .*case\.json: missing file/);
    expect(r.stderr).toMatch(/\n\s+at readLayerFixture /);
  });

  it('--backend cuda on a machine without CUDA fails with the probe reason', () => {
    const cuda = cudaProbe();
    if (cuda.available) return; // on a GPU machine the explicit choice simply works
    const r = checkLayer(writeAffineFixture().dir, '--backend', 'cuda');
    expect(r.code).toBe(1);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toContain(`error: --backend cuda: cuda is not available on this machine: ${cuda.reason}`);
    expect(r.stdout).toBe('');
  });
});
