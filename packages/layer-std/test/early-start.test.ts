// A kernel that declares `earlyStart: 'wait-first'` (defineKernel) is launched before the kernel
// ahead of it ends, every time. This checks the kernel side of that promise: the CUDA entry of every
// layer-std kernel that declares it calls early_start() (std-common.cuh), the wait.
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Kernel } from '@metrale/core';
import * as std from '@metrale/layer-std';
import { describe, expect, it } from 'vitest';

const kernelsDir = join(dirname(fileURLToPath(import.meta.url)), '..', 'kernels');

/** Every kernel the package exports, also inside its tables (attention and expert kernels). */
function exportedKernels(): Kernel[] {
  const found = new Map<string, Kernel>();
  const walk = (v: unknown, depth: number): void => {
    if (!v || typeof v !== 'object' || depth > 6) return;
    if ('paramList' in v && 'name' in v) {
      found.set((v as Kernel).name, v as Kernel);
      return;
    }
    for (const x of Object.values(v)) walk(x, depth + 1);
  };
  walk(std, 0);
  return [...found.values()];
}

/** The entry points of a .cu file: name patterns (a macro's `std_x##SUFFIX` too) and their text up to the next entry. */
function entries(source: string): { pattern: RegExp; literal: string; text: string }[] {
  // __launch_bounds__'s arguments may hold one level of parentheses (kBlocksOf(BM, 2)).
  const re = /extern "C" __global__ void(?:\s+__launch_bounds__\((?:[^()]|\([^()]*\))*\))?\s+(std_[A-Za-z0-9_#]+)\s*\(/g;
  const found = [...source.matchAll(re)];
  return found.map((m, i) => {
    const [literal, ...pasted] = m[1]!.split('##');
    const pattern = new RegExp(`^${literal}${pasted.map(() => '[A-Za-z0-9_]*').join('')}$`);
    return { pattern, literal: literal!, text: source.slice(m.index, found[i + 1]?.index ?? source.length) };
  });
}

describe('early start: a kernel that declares wait-first waits for the kernel ahead', () => {
  const declared = exportedKernels().filter((k) => k.earlyStart === 'wait-first');

  it('is declared by the decode chain (norms, residual add, attention, router, 16-bit expert GEMMs, experts\' sum)', () => {
    const names = declared.map((k) => k.name);
    for (const name of ['std.rms_norm', 'std.add_rms_norm', 'std.add', 'std.attn_decode.bf16', 'std.moe_router_gemv', 'std.moe_gemm_up_few.bf16', 'std.moe_experts']) {
      expect(names).toContain(name);
    }
    expect(names.some((n) => n.startsWith('std.moe_gemm_up.fp8'))).toBe(false);
  });

  it('whose CUDA entry calls early_start()', () => {
    for (const kernel of declared) {
      const { module, symbol } = kernel.cuda!;
      const source = readFileSync(join(kernelsDir, `${module.name}.cu`), 'utf8');
      const matching = entries(source).filter((e) => e.pattern.test(symbol));
      expect(matching.length, `${kernel.name}: no entry for ${symbol} in kernels/${module.name}.cu`).toBeGreaterThan(0);
      // The most specific name pattern (std_moe_experts_up_rowwise##SUFFIX over std_moe_experts_up##SUFFIX).
      const entry = matching.sort((a, b) => b.literal.length - a.literal.length)[0]!;
      expect(entry.text, `${kernel.name} declares earlyStart 'wait-first', but ${symbol} (kernels/${module.name}.cu) does not call early_start()`).toMatch(/\bearly_start\(\);/);
    }
  });
});
