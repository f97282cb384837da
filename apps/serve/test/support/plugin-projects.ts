import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** examples/layer-example: a plugin package directory, as `--plugin <path>` takes it. */
export const LAYER_EXAMPLE_DIR = fileURLToPath(new URL('../../../../examples/layer-example', import.meta.url));

/**
 * Writes into `dir`/node_modules these packages (name → index.js), version 2.3.4, marked as
 * metrale plugins unless given as `{ source, plugin: false }`: a project with plugins installed.
 */
export function writePluginProject(dir: string, packages: Record<string, string | { source: string; plugin: false }>): string {
  for (const [name, given] of Object.entries(packages)) {
    const { source, plugin = true } = typeof given === 'string' ? { source: given } : given;
    const at = join(dir, 'node_modules', name);
    mkdirSync(at, { recursive: true });
    writeFileSync(join(at, 'package.json'), JSON.stringify({ name, version: '2.3.4', type: 'module', exports: './index.js', ...(plugin ? { metrale: { plugin: true } } : {}) }));
    writeFileSync(join(at, 'index.js'), source);
  }
  return dir;
}

/** A plugin module (a plain object, no imports) offering these layer types and architectures, which build nothing. */
export function pluginSource(name: string, offers: { layerTypes?: string[]; architectures?: string[]; specificationVersion?: string }): string {
  const architectures = (offers.architectures ?? []).map((t) => `{ modelType: '${t}', build() { throw new Error('not in this test'); } }`);
  return `export default { name: '${name}', specificationVersion: '${offers.specificationVersion ?? '1.0.0'}', layerTypes: ${JSON.stringify(offers.layerTypes ?? [])},\n` +
    `  architectures: [${architectures.join(', ')}], create() { throw new Error('not in this test'); } };\n`;
}

/** Plugins that fail in each way a user meets: at import, for another contract major, with a model_type twice. */
export const BROKEN_PLUGINS = {
  'acme-throws': "throw new Error('acme-throws cannot start: missing ACME_LICENSE');\n",
  'acme-future': pluginSource('acme-future', { layerTypes: ['future'], specificationVersion: '2.0.0' }),
  'acme-twice': pluginSource('acme-twice', { architectures: ['llama', 'llama'] }),
} as const;
