import type { LaunchConfig, Stream } from '@metrale/core';
import type { GdnConfig } from './gdn-config.js';

// Launch shapes of the three GDN kernels, in one place: the CUDA kernels (kernels/*.cu) are
// written for these, and the CPU reference checks them against the device limits.

/** Threads per CTA: one per value channel j of the head (d_v), at most 1024. */
export function gdnBlock(cfg: GdnConfig): number {
  return Math.min(cfg.dv, 1024);
}

/** `gdn.recurrent` and `gdn.fold`: one CTA per (batch position, value head). */
export function recurrentLaunch(cfg: GdnConfig, batch: number, stream: Stream): LaunchConfig {
  return { grid: [batch, cfg.hv], block: gdnBlock(cfg), stream };
}

/** `gdn.chunk`: one CTA per (sequence, value head). */
export function chunkLaunch(cfg: GdnConfig, sequences: number, stream: Stream): LaunchConfig {
  return { grid: [sequences, cfg.hv], block: gdnBlock(cfg), stream };
}
