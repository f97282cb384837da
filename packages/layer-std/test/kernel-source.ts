// Layouts that live twice, in a kernel's CUDA source and in the TypeScript that sizes its buffers and
// launches: tests read the source's constants here and hold the two to each other, since a
// mismatch would show on the GPU only.
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The text of kernels/<file>. */
export function kernelSource(file: string): string {
  return readFileSync(join(dirname(fileURLToPath(import.meta.url)), '..', 'kernels', file), 'utf8');
}

/**
 * The value of `constexpr int …name = …;` (one of a list too) in `source` (kernels/<file>): a
 * number, or a sum of products of numbers and other constants.
 */
export function kernelConstant(source: string, file: string, name: string): number {
  const m = new RegExp(`constexpr int (?:[^;]*?, )?${name} = ([^,;]+)[,;]`).exec(source);
  if (!m) throw new Error(`kernels/${file} has no constexpr int ${name}`);
  const expr = m[1]!.replace(/k[A-Za-z0-9]+/g, (k) => String(kernelConstant(source, file, k)));
  if (!/^[\d\s+*]+$/.test(expr)) throw new Error(`${name} = ${m[1]}: not a sum of products`);
  return expr.split('+').reduce((sum, term) => sum + term.split('*').reduce((p, f) => p * Number(f.trim()), 1), 0);
}
