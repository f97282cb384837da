import { readLayerFixture, resolvePrecision, runLayerFixture, type DtypeChoice, type GpuBackend, type StepReport } from '@metrale/core';
import { Command, InvalidArgumentError, Option } from 'commander';
import { BACKEND_CHOICES, selectBackend, type BackendChoice } from '../backends/select-backend.js';
import type { CliContext } from '../cli-context.js';
import { EXIT_FAILURE } from '../errors/report-error.js';
import { loadRegistry } from '../plugins/load-registry.js';
import { dtypeOption, registrySetup, withPluginOptions, type PluginOptions } from './options.js';

interface CheckLayerOptions extends PluginOptions {
  readonly backend: BackendChoice;
  readonly tolerance?: number;
  readonly graphs: boolean;
  readonly dtype: DtypeChoice;
}

export function checkLayerCommand(ctx: CliContext): Command {
  return withPluginOptions(new Command('check-layer')
    .description('run a layer fixture (metrale-layer-fixture/1) through its plugin and compare every step with the golden output')
    .argument('<dir>', 'fixture directory: case.json, config.json, weights.safetensors, case.safetensors')
    .addOption(new Option('--backend <name>', 'device to run on').choices(BACKEND_CHOICES).default('auto')))
    .option('--tolerance <rel>', "relative L2 bound per step (default: the fixture's tolerance.rel)", parseTolerance)
    .option('--no-graphs', 'run decode and verify eagerly instead of capturing and replaying graphs')
    .addOption(dtypeOption())
    .addHelpText('after', [
      '',
      'Prints one JSON line per step, then a summary line',
      '  {"fixture":..., "backend":..., "steps":N, "worst_rel":x, "pass":true}',
      'Exit code: 0 when every step passes, 1 when one does not or the fixture cannot be run, 2 for a usage error.',
    ].join('\n'))
    .action(async (dir: string, options: CheckLayerOptions) => {
      ctx.exitCode = await checkLayer(dir, options, ctx);
    });
}

async function checkLayer(dir: string, options: CheckLayerOptions, ctx: CliContext): Promise<number> {
  // The fixture is read first: a broken fixture is reported before any plugin or device is touched.
  const fixture = readLayerFixture(dir);
  const precision = resolvePrecision(options.dtype, fixture.config, fixture.files.config);
  const { layers: registry } = await loadRegistry(registrySetup(options, ctx));
  const gpu: GpuBackend = await selectBackend(options.backend);
  try {
    const report = runLayerFixture(fixture, {
      registry,
      gpu,
      graphs: options.graphs,
      precision,
      ...(options.tolerance !== undefined ? { tolerance: options.tolerance } : {}),
      onStep: (step) => ctx.out(JSON.stringify(stepLine(step))),
    });
    ctx.out(JSON.stringify({ fixture: dir, backend: report.backend, steps: report.steps.length, worst_rel: report.worstRel, pass: report.pass }));
    if (report.pass) return 0;
    const failed = report.steps.filter((s) => !s.pass).map((s) => s.step);
    ctx.err(`error: ${dir}: step(s) ${failed.join(', ')} of ${report.steps.length} exceed the tolerance ${report.tolerance.toExponential(2)} (worst rel ${report.worstRel.toExponential(2)})`);
    return EXIT_FAILURE;
  } finally {
    gpu.dispose();
  }
}

/** A step as printed: the report's fields, `rel` null when it is NaN (JSON has no NaN). */
function stepLine(step: StepReport): Record<string, unknown> {
  return { step: step.step, op: step.op, rows: step.rows, rel: step.rel, pass: step.pass, path: step.path, ...(step.captureError ? { capture_error: step.captureError } : {}) };
}

function parseTolerance(value: string): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || n <= 0) throw new InvalidArgumentError(`expected a positive number such as 1e-4, got '${value}'`);
  return n;
}
