import { ArchitectureRegistry, PluginError, PluginRegistry, type MetralePlugin, type ModelAdapter } from '@metrale/core';
import { UsageError } from '../errors/cli-errors.js';
import type { DiscoveredPlugin } from './discover-plugins.js';

/** The provider named for the adapters this app ships (src/models/). */
export const BUNDLED_ADAPTERS_PROVIDER = '@metrale/serve';

/** Who serves one layer type or model_type, and who else offers it. */
export interface Provision {
  /** The layer type or model_type. */
  readonly name: string;
  /** The plugin package that serves it (BUNDLED_ADAPTERS_PROVIDER for the shipped adapters). */
  readonly provider: string;
  /** Shipped with metrale (a first-party layer package or a shipped adapter). */
  readonly bundled: boolean;
  /** Other plugins that offer it and are not used for it. */
  readonly shadowed: readonly string[];
}

/** A plugin left out, or a part of one not used: one line for a log or stderr. */
export interface PluginWarning {
  readonly plugin: string;
  readonly message: string;
}

/** What the served model is built from: one registry of layer types and one of architectures. */
export interface ServingRegistry {
  /** Layer type → the plugin that builds it; adapters get it as `plugins` in their build context. */
  readonly layers: PluginRegistry;
  /** model_type → adapter: the shipped adapters and the plugins' architectures. */
  readonly architectures: ArchitectureRegistry;
  readonly layerTypes: readonly Provision[];
  readonly modelTypes: readonly Provision[];
  /** Every plugin found; one left out carries the problem. */
  readonly plugins: readonly DiscoveredPlugin[];
  readonly warnings: readonly PluginWarning[];
}

export interface RegistryOptions {
  /** The adapters the app ships; a plugin's architecture replaces one only when preferred. */
  readonly adapters?: readonly ModelAdapter[];
  /** --prefer-plugin: plugins whose layer types and architectures win over every other offer. */
  readonly prefer?: readonly string[];
}

interface Offer<T> {
  readonly provider: string;
  readonly bundled: boolean;
  readonly preferred: boolean;
  readonly item: T;
}

type Kind = 'layer type' | 'model_type';

/**
 * The offer used among several: a preferred plugin's, else the bundled one, else the only one.
 * Undefined when that leaves two (two preferred, or two third-party plugins and no preference).
 */
function winner<T>(offers: readonly Offer<T>[]): Offer<T> | undefined {
  const preferred = offers.filter((o) => o.preferred);
  const bundled = offers.filter((o) => o.bundled);
  const pool = preferred.length > 0 ? preferred : bundled.length > 0 ? bundled : offers;
  return pool.length === 1 ? pool[0] : undefined;
}

/** The offers of one kind (layer types or model_types), by name. */
class OfferTable<T> {
  readonly #byName = new Map<string, Offer<T>[]>();

  constructor(readonly kind: Kind) {}

  /** Why adding these offers would leave a name with no single winner, or undefined. */
  clash(entries: readonly [string, Offer<T>][]): string | undefined {
    for (const [name, offer] of entries) {
      const others = this.#byName.get(name) ?? [];
      if (others.length > 0 && !winner([...others, offer])) {
        return `${this.kind} '${name}' is also provided by ${others.map((o) => o.provider).join(', ')}; ` +
          `uninstall one, or choose one with --prefer-plugin ${offer.provider}`;
      }
    }
    return undefined;
  }

  add(entries: readonly [string, Offer<T>][]): void {
    for (const [name, offer] of entries) this.#byName.set(name, [...(this.#byName.get(name) ?? []), offer]);
  }

  /** Each name's winner and the offers it shadows, sorted by name. */
  resolved(): { name: string; used: Offer<T>; shadowed: Offer<T>[] }[] {
    return [...this.#byName.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([name, offers]) => {
      const used = winner(offers)!;
      return { name, used, shadowed: offers.filter((o) => o !== used) };
    });
  }
}

/**
 * Forms the registry the served model is built from: the shipped adapters, then the plugins
 * (--plugin ones first). A layer type or model_type offered twice goes to the plugin named by
 * --prefer-plugin, else to the bundled offer; two third-party offers and no preference are a
 * clash, and the later plugin is left out — an error for a --plugin one, a warning for a
 * discovered one, so one stray package cannot stop every command.
 */
export function buildRegistry(discovered: readonly DiscoveredPlugin[], options: RegistryOptions = {}): ServingRegistry {
  const prefer = new Set(options.prefer ?? []);
  checkPreferred(prefer, discovered);
  const layerOffers = new OfferTable<MetralePlugin>('layer type');
  const modelOffers = new OfferTable<ModelAdapter>('model_type');
  modelOffers.add((options.adapters ?? []).map((a) => [a.modelType, { provider: BUNDLED_ADAPTERS_PROVIDER, bundled: true, preferred: false, item: a }]));

  const ordered = [...discovered].sort((a, b) => Number(b.source === '--plugin') - Number(a.source === '--plugin'));
  const plugins = ordered.map((d): DiscoveredPlugin => {
    const p = d.plugin;
    if (!p) return d;
    const offer = { provider: p.name, bundled: d.bundled, preferred: prefer.has(p.name) };
    const layers = p.layerTypes.map((t): [string, Offer<MetralePlugin>] => [t, { ...offer, item: p }]);
    const models = p.architectures.map((a): [string, Offer<ModelAdapter>] => [a.modelType, { ...offer, item: a }]);
    const clash = layerOffers.clash(layers) ?? modelOffers.clash(models);
    if (clash === undefined) {
      layerOffers.add(layers);
      modelOffers.add(models);
      return d;
    }
    const error = new PluginError(p.name, clash);
    if (d.source === '--plugin') throw error;
    const { plugin: _left, ...rest } = d;
    return { ...rest, problem: error.message };
  });

  const layers = new PluginRegistry();
  const layerTypes = provisions(layerOffers);
  for (const plugin of new Set(layerOffers.resolved().map((r) => r.used.item))) {
    // Registered for the layer types it wins only: the others stay with their winners.
    const won = layerTypes.filter((t) => t.provider === plugin.name).map((t) => t.name);
    layers.register(Object.freeze({ ...plugin, layerTypes: won }));
  }
  const architectures = new ArchitectureRegistry();
  for (const r of modelOffers.resolved()) architectures.register(r.name, r.used.item);

  return { layers, architectures, layerTypes, modelTypes: provisions(modelOffers), plugins, warnings: warningsOf(plugins, layerOffers, modelOffers) };
}

function provisions<T>(table: OfferTable<T>): Provision[] {
  return table.resolved().map((r) => ({ name: r.name, provider: r.used.provider, bundled: r.used.bundled, shadowed: r.shadowed.map((o) => o.provider) }));
}

/** Each --prefer-plugin must name a plugin that loaded: a preference for nothing is a typo. */
function checkPreferred(prefer: ReadonlySet<string>, discovered: readonly DiscoveredPlugin[]): void {
  for (const name of prefer) {
    const d = discovered.find((x) => x.plugin?.name === name || x.id === name);
    if (!d) {
      const loaded = discovered.flatMap((x) => (x.plugin ? [x.plugin.name] : []));
      throw new UsageError(`--prefer-plugin ${name}: no plugin of that name is loaded (loaded: ${loaded.join(', ') || 'none'}); install it or name it with --plugin`);
    }
    if (!d.plugin) throw new PluginError(name, `is preferred (--prefer-plugin) but did not load: ${d.problem}`);
  }
}

function warningsOf(plugins: readonly DiscoveredPlugin[], ...tables: OfferTable<unknown>[]): PluginWarning[] {
  const warnings: PluginWarning[] = plugins.flatMap((d) => (d.problem !== undefined ? [{ plugin: d.id, message: `skipped: ${d.problem}` }] : []));
  for (const table of tables) {
    for (const r of table.resolved()) {
      for (const o of r.shadowed) {
        if (o.bundled) continue;
        warnings.push({ plugin: o.provider, message: `its ${table.kind} '${r.name}' is not used: ${r.used.provider} serves it (--prefer-plugin ${o.provider} uses ${o.provider}'s)` });
      }
    }
  }
  return warnings;
}
