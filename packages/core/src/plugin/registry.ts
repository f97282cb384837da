import { PluginError } from '../errors.js';
import { pluginLabel, type CreateLayerContext, type MetralePlugin } from './define-plugin.js';
import type { TransformerLayer } from '../contract/layer.js';

/** The plugins an application has loaded, and which one builds each layer type. */
export class PluginRegistry {
  readonly #byType = new Map<string, MetralePlugin>();
  readonly #plugins = new Map<string, MetralePlugin>();

  register(plugin: MetralePlugin): void {
    const same = this.#plugins.get(plugin.name);
    if (same) {
      if (same.version === plugin.version) return;
      throw new PluginError(plugin.name, `version ${plugin.version ?? '(unknown)'} is registered while version ${same.version ?? '(unknown)'} already is; keep one`);
    }
    for (const type of plugin.layerTypes) {
      const owner = this.#byType.get(type);
      if (owner) throw new PluginError(plugin.name, `layer type '${type}' is already provided by ${pluginLabel(owner)}`);
    }
    this.#plugins.set(plugin.name, plugin);
    for (const type of plugin.layerTypes) this.#byType.set(type, plugin);
  }

  plugins(): readonly MetralePlugin[] {
    return [...this.#plugins.values()];
  }

  layerTypes(): readonly string[] {
    return [...this.#byType.keys()].sort();
  }

  /** The plugin for a layer type, or undefined. */
  find(layerType: string): MetralePlugin | undefined {
    return this.#byType.get(layerType);
  }

  /** The plugin for a layer type; throws naming the types that are available. */
  get(layerType: string): MetralePlugin {
    const plugin = this.#byType.get(layerType);
    if (!plugin) {
      const known = this.layerTypes();
      throw new PluginError(
        layerType,
        `no loaded plugin provides layer type '${layerType}'` +
          (known.length ? ` (loaded: ${known.join(', ')})` : ' (no plugins are loaded)') +
          `; install the plugin package that provides it`,
      );
    }
    return plugin;
  }

  createLayer(context: CreateLayerContext): TransformerLayer {
    const plugin = this.get(context.layerType);
    const layer = plugin.create(context);
    if (!layer || typeof layer.forward !== 'function' || typeof layer.openState !== 'function') {
      throw new PluginError(plugin.name, `create('${context.layerType}') did not return a layer (forward and openState are required)`);
    }
    return layer;
  }
}
