import { describe, expect, it } from 'vitest';
import { metrale } from './support/run-cli.js';

describe('metrale --help and usage errors', () => {
  it('metrale --help lists the commands and the global options', () => {
    const r = metrale(['--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^Usage: metrale \[options\] \[command\]/);
    expect(r.stdout).toMatch(/doctor \[options\]/);
    expect(r.stdout).toMatch(/check-layer \[options\] <dir>/);
    expect(r.stdout).toMatch(/--verbose/);
  });

  it('metrale doctor --help', () => {
    const r = metrale(['doctor', '--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^Usage: metrale doctor \[options\]/);
    expect(r.stdout).toMatch(/--json/);
    expect(r.stdout).toMatch(/--plugin <name-or-path>/);
    expect(r.stdout).toMatch(/Global Options:[\s\S]*--verbose/);
  });

  it('metrale check-layer --help', () => {
    const r = metrale(['check-layer', '--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^Usage: metrale check-layer \[options\] <dir>/);
    for (const option of ['--backend <name>', '--plugin <name-or-path>', '--tolerance <rel>', '--no-graphs']) expect(r.stdout).toContain(option);
    expect(r.stdout).toContain('"auto", "cpu", "cuda"');
    expect(r.stdout).toContain('{"fixture":..., "backend":..., "steps":N, "worst_rel":x, "pass":true}');
  });

  it('metrale --version prints the package version', () => {
    const r = metrale(['--version']);
    expect(r.code).toBe(0);
    expect(r.stdout.trim()).toMatch(/^\d+\.\d+\.\d+/);
  });

  it.each([
    [[], /Usage: metrale/],
    [['frobnicate'], /error: unknown command 'frobnicate'/],
    [['check-layer'], /error: missing required argument 'dir'/],
    [['check-layer', 'x', '--backend', 'tpu'], /error: option '--backend <name>' argument 'tpu' is invalid. Allowed choices are auto, cpu, cuda./],
    [['check-layer', 'x', '--tolerance', 'tight'], /error: option '--tolerance <rel>' argument 'tight' is invalid. expected a positive number such as 1e-4, got 'tight'/],
    [['doctor', '--jsn'], /error: unknown option '--jsn'/],
  ])('usage error %j exits 2 without a stack', (args, message) => {
    const r = metrale(args);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(message);
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });
});
