#!/usr/bin/env node
// Builds @metrale/cuda-backend: the TypeScript bundle (tsup), the test kernels' fatbins
// (metrale-build-kernels; skipped without nvcc) and the native addon (cmake-js; skipped without
// cmake or a C++ compiler, in which case importing still works and probe() says "addon not
// built"). A real compile error fails the build.
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { delimiter, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const packageDir = join(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(join(packageDir, 'package.json'));

function run(step, command, args) {
  const result = spawnSync(command, args, { cwd: packageDir, stdio: 'inherit', env: process.env });
  if (result.error) throw result.error;
  if (result.status !== 0) {
    console.error(`build: ${step} failed (exit ${result.status})`);
    process.exit(result.status ?? 1);
  }
}

/** The JavaScript entry of a package's bin, resolved from this package. */
function binOf(pkg, name) {
  const manifestPath = require.resolve(`${pkg}/package.json`);
  const manifest = JSON.parse(readFileSync(manifestPath, 'utf8'));
  const bin = typeof manifest.bin === 'string' ? manifest.bin : manifest.bin[name];
  return join(dirname(manifestPath), bin);
}

function onPath(program) {
  return (process.env.PATH ?? '').split(delimiter).some((dir) => dir && existsSync(join(dir, program)));
}

run('tsup', process.execPath, [binOf('tsup', 'tsup')]);
run('kernels', process.execPath, [binOf('@metrale/core', 'metrale-build-kernels')]);

const compiler = process.env.CXX || ['c++', 'g++', 'clang++'].find(onPath);
if (!onPath('cmake')) {
  console.log('build: cmake not found, native addon not built (probe() will report "addon not built")');
} else if (!compiler) {
  console.log('build: no C++ compiler (c++, g++, clang++ or $CXX) found, native addon not built (probe() will report "addon not built")');
} else {
  run('native addon', process.execPath, [binOf('cmake-js', 'cmake-js'), 'build', '--log-level', 'warn']);
}
