import { DTYPE_CHOICES, MAX_LOGPROBS, parseNgramSpec } from '@metrale/core';
import bytes from 'bytes';
import { InvalidArgumentError, Option, type Command } from 'commander';
import type { RegistrySetup } from '../plugins/load-registry.js';
import type { CliContext } from '../cli-context.js';

/** `--dtype`: the data path, for every command that builds a model or a layer. */
export function dtypeOption(): Option {
  return new Option('--dtype <type>', "weights and rows: 'auto' (the checkpoint's dtype; FP8 checkpoints keep FP8 weights with bf16 rows), or all in bf16, f16 or f32 (the reference)")
    .choices(DTYPE_CHOICES)
    .default('auto');
}

/** `--logprobs N`: top-N log-probabilities per generated token. */
export function logprobCount(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > MAX_LOGPROBS) throw new InvalidArgumentError(`expected an integer in 0..${MAX_LOGPROBS}, got '${value}'`);
  return n;
}

/** Commander parser for a repeatable option: each occurrence appends to the list (no default, so help shows none). */
export function collect(value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), value];
}

export interface PluginOptions {
  readonly plugin?: string[];
  readonly preferPlugin?: string[];
}

/** --plugin and --prefer-plugin, the same on every command that loads plugins. */
export function withPluginOptions(command: Command): Command {
  return command
    .option('--plugin <name-or-path>', 'also load this plugin: a package name, a package directory or a module file (repeatable)', collect)
    .option('--prefer-plugin <name>', "use this plugin's layer types and architectures where another plugin (or a bundled one) offers them too (repeatable)", collect);
}

/** Where the plugins of a command are looked for, with its --plugin and --prefer-plugin. */
export function registrySetup(options: PluginOptions, ctx: CliContext): RegistrySetup {
  return { cwd: ctx.cwd, packageDir: ctx.packageDir, plugins: options.plugin ?? [], preferPlugins: options.preferPlugin ?? [] };
}

export function positiveInt(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError(`expected a positive integer, got '${value}'`);
  return n;
}

export function integer(value: string): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isInteger(n)) throw new InvalidArgumentError(`expected an integer, got '${value}'`);
  return n;
}

export function nonNegative(value: string): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || n < 0) throw new InvalidArgumentError(`expected a number ≥ 0, got '${value}'`);
  return n;
}

/** A size in bytes: a number, or with a unit (`512MiB`, `2gb`; powers of 1024). */
export function byteSize(value: string): number {
  const n = bytes.parse(value.replace(/ib$/i, 'b'));
  if (n === null || !Number.isSafeInteger(n) || n < 1) throw new InvalidArgumentError(`expected a size in bytes (e.g. 2GiB, 512MiB or 1073741824), got '${value}'`);
  return n;
}

export function probability(value: string): number {
  const n = Number(value);
  if (value.trim() === '' || !(n > 0 && n <= 1)) throw new InvalidArgumentError(`expected a number in (0, 1], got '${value}'`);
  return n;
}

/** `--spec`: checked while parsing, so a bad proposer is a usage error (exit 2) like any bad option. */
export function speculationSpec(value: string): string {
  try {
    parseNgramSpec(value);
  } catch (error) {
    throw new InvalidArgumentError((error as Error).message.replace(/^--spec: /, ''));
  }
  return value;
}
