import { ADAPTERS } from '../models/index.js';
import { buildRegistry, type ServingRegistry } from './build-registry.js';
import { discoverPlugins } from './discover-plugins.js';

/** Where plugins are looked for and which the command line names (plain data: it crosses to the engine worker). */
export interface RegistrySetup {
  /** The working directory: its node_modules, and where --plugin paths start. */
  readonly cwd: string;
  /** The serve package's directory: the plugins installed beside the CLI. */
  readonly packageDir: string;
  /** --plugin values. */
  readonly plugins: readonly string[];
  /** --prefer-plugin values. */
  readonly preferPlugins: readonly string[];
}

/** Discovers the plugins (as `doctor` lists them) and forms the registry with the shipped adapters. */
export async function loadRegistry(setup: RegistrySetup): Promise<ServingRegistry> {
  const discovered = await discoverPlugins({ cwd: setup.cwd, packageDir: setup.packageDir, explicit: setup.plugins });
  return buildRegistry(discovered, { adapters: ADAPTERS, prefer: setup.preferPlugins });
}
