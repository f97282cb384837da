import { createRequire } from 'node:module';
import { SPECIFICATION_VERSION, type DeviceInfo } from '@metrale/core';
import { Command } from 'commander';
import { probeBackends, type BackendReport } from '../backends/select-backend.js';
import type { CliContext } from '../cli-context.js';
import { buildRegistry } from '../plugins/build-registry.js';
import { discoverPlugins, type DiscoveredPlugin } from '../plugins/discover-plugins.js';
import { collect } from './options.js';

interface DoctorOptions {
  readonly json?: boolean;
  readonly plugin?: string[];
}

export function doctorCommand(ctx: CliContext): Command {
  return new Command('doctor')
    .description('show which backends can run here (and why not), their devices, and the installed layer plugins')
    .option('--json', 'print one JSON object instead of text')
    .option('--plugin <name-or-path>', 'also load this plugin package or module file (repeatable)', collect)
    .action(async (options: DoctorOptions) => {
      const backends = await probeBackends();
      const { plugins } = buildRegistry(await discoverPlugins({ cwd: ctx.cwd, packageDir: ctx.packageDir, explicit: options.plugin ?? [] }));
      const report = doctorReport(backends, plugins, ctx);
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
    modelTypes?: readonly string[]; problem?: string;
  }[];
}

function doctorReport(backends: readonly BackendReport[], plugins: readonly DiscoveredPlugin[], ctx: CliContext): DoctorReport {
  return {
    node: process.version,
    core: { version: coreVersion(), specificationVersion: SPECIFICATION_VERSION },
    backends: backends.map((b) => ({ name: b.name, available: b.probe.available, reason: b.probe.reason, devices: b.probe.devices })),
    searched: [...new Set([ctx.cwd, ctx.packageDir])],
    plugins: plugins.map((d) => ({
      name: d.id,
      source: d.source,
      location: d.location,
      ...(d.version !== undefined ? { version: d.version } : {}),
      ...(d.plugin
        ? {
            plugin: `${d.plugin.name}@${d.plugin.version}`, specificationVersion: d.plugin.specificationVersion, layerTypes: d.plugin.layerTypes,
            ...(d.plugin.modelTypes ? { modelTypes: d.plugin.modelTypes } : {}),
          }
        : {}),
      ...(d.problem !== undefined ? { problem: d.problem } : {}),
    })),
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
    const body = p.layerTypes
      ? `contract ${p.specificationVersion}, layer types: ${p.layerTypes.join(', ')}${p.modelTypes?.length ? `, model types: ${p.modelTypes.join(', ')}` : ''}`
      : p.problem;
    lines.push(`${head}  ${body}  [${p.source}]`);
  }
  return lines;
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
