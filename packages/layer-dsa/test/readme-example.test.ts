// The README's example, run as written (its console output captured), and kept identical to it.
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it, vi } from 'vitest';

const here = dirname(fileURLToPath(import.meta.url));

it('test/readme-example.ts is the README’s “Run it” code', () => {
  const readme = readFileSync(join(here, '..', 'README.md'), 'utf8');
  const block = /## Run it \(CPU reference backend\)\n\n```ts\n([\s\S]*?)```/.exec(readme)?.[1];
  const example = readFileSync(join(here, 'readme-example.ts'), 'utf8').split('\n').slice(1).join('\n');
  expect(block).toBe(example);
});

it('the README example runs', async () => {
  const log = vi.spyOn(console, 'log').mockImplementation(() => {});
  await import('./readme-example.js');
  expect(log).toHaveBeenCalledTimes(2);
  const row = log.mock.calls[0]![0] as Float32Array;
  expect(row).toHaveLength(24);
  expect(row.every(Number.isFinite)).toBe(true);
  expect(log.mock.calls[1]![0]).toBe(22);
  log.mockRestore();
});
