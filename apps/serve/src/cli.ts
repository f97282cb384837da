#!/usr/bin/env node
// The `metrale` executable. Everything but the process wiring lives in program.ts.
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runCli } from './program.js';

// dist/cli.js → the package directory, where plugins installed beside the CLI are found.
const packageDir = join(dirname(fileURLToPath(import.meta.url)), '..');

process.exitCode = await runCli(process.argv.slice(2), {
  cwd: process.cwd(),
  packageDir,
  out: (line) => process.stdout.write(`${line}\n`),
  err: (line) => process.stderr.write(`${line}\n`),
  exitCode: 0,
});
