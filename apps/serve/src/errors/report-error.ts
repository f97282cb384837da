import { CommanderError } from 'commander';
import { UsageError } from './cli-errors.js';

/** Exit codes: 1 for a failure (bad fixture, failed check, unavailable backend), 2 for a wrong command line. */
export const EXIT_FAILURE = 1;
export const EXIT_USAGE = 2;

/**
 * Writes an error to stderr and returns the exit code. Without `verbose` it is one line: every
 * metrale error already starts with the file, plugin or option it is about, so the message is
 * the report; a stack trace would only bury it. With `verbose`, the stack and its causes follow.
 */
export function reportError(error: unknown, options: { verbose: boolean; write?: (text: string) => void }): number {
  const write = options.write ?? ((text: string) => process.stderr.write(text));
  if (error instanceof CommanderError) {
    // Commander has already printed its own message (and help, for --help); only the code is ours.
    return error.exitCode === 0 ? 0 : EXIT_USAGE;
  }
  write(`error: ${oneLine(error)}\n`);
  if (options.verbose) write(`${stackOf(error)}\n`);
  return error instanceof UsageError ? EXIT_USAGE : EXIT_FAILURE;
}

function oneLine(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  // Multi-line messages (a conformance report, a native error) fold into one line.
  return message.split('\n').map((l) => l.trim()).filter(Boolean).join('; ');
}

function stackOf(error: unknown): string {
  const parts: string[] = [];
  let current: unknown = error;
  for (let depth = 0; current !== undefined && depth < 8; depth++) {
    parts.push(current instanceof Error ? (current.stack ?? `${current.name}: ${current.message}`) : String(current));
    current = current instanceof Error ? current.cause : undefined;
    if (current !== undefined) parts.push('caused by:');
  }
  return parts.join('\n');
}
