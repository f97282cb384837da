import { createRequire } from 'node:module';
import { SPECIFICATION_VERSION, pluginLabel, type DeviceInfo } from '@metrale/core';
import { Command } from 'commander';
import { probeBackends, type BackendReport } from '../backends/select-backend.js';
import type { CliContext } from '../cli-context.js';
import type { Provision, ServingRegistry } from '../plugins/build-registry.js';
import { loadRegistry } from '../plugins/load-registry.js';
import { registrySetup, withPluginOptions, type PluginOptions } from './options.js';

interface DoctorOptions extends PluginOptions {
  readonly json?: boolean;
}

export function doctorCommand(ctx: CliContext): Command {
  return withPluginOptions(new Command('doctor')
    .description('show which backends can run here (and why not), their devices, the installed plugins, and which plugin serves each model_type and layer type')
    .option('--json', 'print one JSON object instead of text'))
    .action(async (options: DoctorOptions) => {
      const backends = await probeBackends();
      const report = doctorReport(backends, await loadRegistry(registrySetup(options, ctx)), ctx);
      if (options.json) ctx.out(JSON.stringify(report, null, 2));
      else for (const line of doctorText(report)) ctx.out(line);
      ctx.exitCode = 0;
    });
}

interface DoctorReport {
  readonly node: string;
  readonly core: { readonly version: string; readonly specificationVersion: string };
  readonly backends: readonly { name: string; available: boolean; reason: string; devices: readonly DeviceInfo[] }[];
  readonly searched: readonly string[];
  readonly plugins: readonly {
    name: string; source: string; location: string; version?: string; plugin?: string; specificationVersion?: string; layerTypes?: readonly string[];
    architectures?: readonly string[]; modelTypes?: readonly string[]; problem?: string;
  }[];
  /** Which plugin serves each model_type (architecture) and each layer type, after --prefer-plugin. */
  readonly architectures: readonly Provision[];
  readonly layerTypes: readonly Provision[];
}

function doctorReport(backends: readonly BackendReport[], registry: ServingRegistry, ctx: CliContext): DoctorReport {
  return {
    node: process.version,
    core: { version: coreVersion(), specificationVersion: SPECIFICATION_VERSION },
    backends: backends.map((b) => ({ name: b.name, available: b.probe.available, reason: b.probe.reason, devices: b.probe.devices })),
    searched: [...new Set([ctx.cwd, ctx.packageDir])],
    plugins: registry.plugins.map((d) => ({
      name: d.id,
      source: d.source,
      location: d.location,
      ...(d.version !== undefined ? { version: d.version } : {}),
      ...(d.plugin
        ? {
            plugin: pluginLabel(d.plugin), specificationVersion: d.plugin.specificationVersion, layerTypes: d.plugin.layerTypes,
            architectures: d.plugin.architectures.map((a) => a.modelType),
            ...(d.plugin.modelTypes ? { modelTypes: d.plugin.modelTypes } : {}),
          }
        : {}),
      ...(d.problem !== undefined ? { problem: d.problem } : {}),
    })),
    architectures: registry.modelTypes,
    layerTypes: registry.layerTypes,
  };
}

function doctorText(r: DoctorReport): string[] {
  const lines = [`metrale: @metrale/core ${r.core.version}, layer contract ${r.core.specificationVersion}, Node ${r.node}`, '', 'backends'];
  for (const b of r.backends) {
    lines.push(`  ${b.name.padEnd(5)} ${(b.available ? 'available' : 'not available').padEnd(14)} ${b.reason}`);
    for (const d of b.devices) lines.push(`        ${deviceLine(d)}`);
  }
  lines.push('', `plugins (node_modules visible from ${r.searched.join(' and ')})`);
  if (r.plugins.length === 0) lines.push('  none found; install a package such as @metrale/layer-gdn, or pass --plugin <name-or-path>');
  for (const p of r.plugins) {
    const head = `  ${p.name}${p.version ? ` ${p.version}` : ''}`;
    const offers = [
      ...(p.layerTypes?.length ? [`layer types: ${p.layerTypes.join(', ')}`] : []),
      ...(p.architectures?.length ? [`architectures: ${p.architectures.join(', ')}`] : []),
      ...(p.modelTypes?.length ? [`model types: ${p.modelTypes.join(', ')}`] : []),
    ];
    const body = p.layerTypes ? [`contract ${p.specificationVersion}`, ...offers].join(', ') : p.problem;
    lines.push(`${head}  ${body}  [${p.source}]`);
  }
  lines.push('', 'architectures (model_type: served by)', ...provisionLines(r.architectures), '', 'layer types (served by)', ...provisionLines(r.layerTypes));
  return lines;
}

function provisionLines(list: readonly Provision[]): string[] {
  if (list.length === 0) return ['  none'];
  const width = Math.max(...list.map((p) => p.name.length));
  return list.map((p) => `  ${p.name.padEnd(width)}  ${p.provider}${p.bundled ? ' (bundled)' : ''}${p.shadowed.length ? `; also offered by ${p.shadowed.join(', ')} (not used)` : ''}`);
}

function deviceLine(d: DeviceInfo): string {
  const gib = (d.totalMemory / 2 ** 30).toFixed(1);
  const cc = d.computeCapability[0] > 0 ? `, compute capability ${d.computeCapability.join('.')}` : '';
  return `device ${d.index}: ${d.name}, ${gib} GiB, ${d.multiprocessors} ${d.computeCapability[0] > 0 ? 'SMs' : 'cores'}${cc}`;
}

function coreVersion(): string {
  const manifest = createRequire(import.meta.url)('@metrale/core/package.json') as { version: string };
  return manifest.version;
}
