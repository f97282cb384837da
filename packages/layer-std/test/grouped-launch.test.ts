import type { Stream } from '@metrale/core';
import { EXPERT_FORMATS, expertsDownLaunch, expertsUpLaunch, groupedStageBytes } from '@metrale/layer-std';
import { describe, expect, it } from 'vitest';
import { kernelConstant, kernelSource } from './kernel-source.js';

// The grouped expert kernels' launches (src/moe-kernels.ts): the shared memory of a CTA's stage
// (kernels/std-moe.cu EntryStage: a 64-byte rows table, then blocks of 16 entries × 32 chunks) and
// the tiles a CTA takes in turn. The kernels trap below two blocks; a pass whose blocks all fit is
// loaded once for all the CTA's tiles.
const stream = {} as Stream;
const source = kernelSource('std-moe.cu');
const constant = (name: string): number => kernelConstant(source, 'std-moe.cu', name);

describe('grouped expert launches', () => {
  it('match kernels/std-moe.cu: 16 entries a pass, 2 weight rows a warp, a 64-byte rows table, CTAs of 128 threads', () => {
    expect(constant('kEntries')).toBe(16);
    expect(constant('kRowsPerWarp')).toBe(2);
    expect(constant('kStageRowBytes')).toBe(64);
    const launches = { std_moe_experts_up: expertsUpLaunch, std_moe_experts_down: expertsDownLaunch };
    for (const [kernel, launch] of Object.entries(launches)) {
      const bounds = new RegExp(`__launch_bounds__\\((\\d+)(?:, \\d+)?\\) ${kernel}##SUFFIX`).exec(source);
      expect(bounds?.[1], kernel).toBe(String(launch('fp8-bf16', 64, 11, 2048, 512, 65, stream).block));
    }
  });

  it('give a stage that holds a pass whole where it fits 64 KiB, else two streamed blocks', () => {
    // FP8 over bf16 rows: a block is 16 entries × 32 chunks of 16 elements × 2 bytes = 16 KiB.
    expect(groupedStageBytes('fp8-bf16', 2048)).toBe(64 + 4 * 16384);
    expect(groupedStageBytes('fp8-bf16', 512)).toBe(64 + 2 * 16384);
    expect(groupedStageBytes('fp8-bf16', 6144)).toBe(64 + 2 * 16384);
    // 16-bit weights: chunks of 4 elements, blocks of 4 KiB; f32: 8 KiB.
    expect(groupedStageBytes('bf16', 2048)).toBe(64 + 16 * 4096);
    expect(groupedStageBytes('f16', 1000)).toBe(64 + 8 * 4096);
    expect(groupedStageBytes('f32', 1024)).toBe(64 + 8 * 8192);
    expect(groupedStageBytes('f32', 2048)).toBe(64 + 2 * 8192);
    for (const format of EXPERT_FORMATS) for (const width of [7, 30, 136, 4096, 7168]) {
      const bytes = groupedStageBytes(format, width);
      expect(bytes).toBeLessThanOrEqual(64 * 1024 + 64);
      expect(bytes).toBeGreaterThanOrEqual(64 + 2 * 4096);
    }
  });

  it('cover every tile: 4 tiles of 8 intermediate rows a CTA up, 8 of 8 output values down; a row of CTAs an expert slot', () => {
    const up = expertsUpLaunch('fp8-bf16', 64, 11, 2048, 512, 65, stream);
    expect(up.grid).toEqual([16, 65]);
    expect(up.block).toBe(128);
    expect(up.sharedBytes).toBe(groupedStageBytes('fp8-bf16', 2048));
    const down = expertsDownLaunch('fp8-bf16', 64, 11, 2048, 512, 65, stream);
    expect(down.grid).toEqual([32, 65]);
    expect(down.sharedBytes).toBe(groupedStageBytes('fp8-bf16', 512));
    // Fewer entries than experts: a row of CTAs per entry; a width not a whole number of tiles rounds up.
    expect(expertsUpLaunch('bf16', 2, 3, 30, 7, 5, stream).grid).toEqual([1, 5]);
    expect(expertsDownLaunch('bf16', 1, 2, 1000, 136, 6, stream).grid).toEqual([16, 2]);
  });
});
