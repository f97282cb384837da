import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Command } from 'commander';
import type { CliContext } from './cli-context.js';
import { checkLayerCommand } from './commands/check-layer.js';
import { doctorCommand } from './commands/doctor.js';
import { generateCommand } from './commands/generate.js';
import { serveCommand } from './commands/serve.js';
import { reportError } from './errors/report-error.js';

/** The `metrale` command line: global options and the commands. */
export function createProgram(ctx: CliContext): Command {
  const program = new Command('metrale')
    .description('metrale: model layers of an LLM inference engine; check backends, plugins and layer fixtures; generate from a checkpoint; serve it over an OpenAI-compatible API')
    .version(packageVersion(ctx.packageDir))
    .option('--verbose', 'on an error, print its stack trace and causes too')
    .configureHelp({ showGlobalOptions: true })
    // Errors come back to runCli as exceptions, which maps them to exit codes in one place.
    .exitOverride();
  // addCommand does not pass the parent's settings down; copy them so --help, errors and
  // global options behave the same on every command.
  for (const command of [doctorCommand(ctx), checkLayerCommand(ctx), generateCommand(ctx), serveCommand(ctx)]) program.addCommand(command.copyInheritedSettings(program));
  return program;
}

/**
 * Runs the CLI on `args` (without the node and script paths) and returns the exit code:
 * 0 success, 1 failure, 2 usage error. Errors print as one line on stderr; --verbose adds the stack.
 */
export async function runCli(args: readonly string[], ctx: CliContext): Promise<number> {
  // Read before parsing, so an error in parsing itself still honours --verbose.
  const verbose = args.includes('--verbose');
  try {
    await createProgram(ctx).parseAsync([...args], { from: 'user' });
    return ctx.exitCode;
  } catch (error) {
    return reportError(error, { verbose, write: (text) => ctx.err(text.replace(/\n$/, '')) });
  }
}

function packageVersion(packageDir: string): string {
  try {
    return (JSON.parse(readFileSync(join(packageDir, 'package.json'), 'utf8')) as { version: string }).version;
  } catch {
    return '0.0.0';
  }
}
