import { PluginRegistry } from '@metrale/core';
import type { DiscoveredPlugin } from './discover-plugins.js';

/**
 * Registers the loaded plugins, --plugin ones first. A --plugin that clashes with another is an
 * error; a discovered one that clashes (two packages claiming one layer type) is skipped and
 * listed with the reason, so one stray package cannot stop every command.
 */
export function buildRegistry(discovered: readonly DiscoveredPlugin[]): { registry: PluginRegistry; plugins: DiscoveredPlugin[] } {
  const registry = new PluginRegistry();
  const ordered = [...discovered].sort((a, b) => Number(b.source === '--plugin') - Number(a.source === '--plugin'));
  const plugins = ordered.map((d) => {
    if (!d.plugin) return d;
    try {
      registry.register(d.plugin);
      return d;
    } catch (error) {
      if (d.source === '--plugin') throw error;
      const { plugin: _skipped, ...rest } = d;
      return { ...rest, problem: `not registered: ${(error as Error).message}` };
    }
  });
  return { registry, plugins };
}
