import { defineKernel, defineKernelModule } from '@metrale/core';
import { prefillNormCpu, prefillScanCpu, prefillWyCpu } from './gdn-prefill.cpu.js';
import { PREFILL_PARAMS, type PrefillKernels } from './gdn-prefill-launch.js';

// The chunked (WY-form) prefill: kernels/gdn-chunk.cu, built into dist/kernels/gdn-chunk.fatbin.
// Every kernel takes the same parameters (KERNELS.md, "Prefill"); launches: gdn-prefill-launch.ts.
// `earlyStart: 'per-launch'`: a later piece's WY and the norm run beside the scan before them (they
// read nothing it writes) and one CTA of each waits for it (piece_done, gdn-chunk.cu), so those
// launches start early; the first piece's WY reads the projection before it and does not.
const prefillModule = defineKernelModule('gdn-chunk', new URL('./kernels/gdn-chunk.fatbin', import.meta.url));

const PARAMS = PREFILL_PARAMS;

/** Conv, norms, gates and the WY factors of every 64-row chunk (fast build: bf16 operands). */
export const prefillWyKernel = defineKernel({
  name: 'gdn.prefill-wy',
  params: PARAMS,
  cuda: { module: prefillModule, symbol: 'gdn_prefill_wy' },
  cpu: prefillWyCpu(1),
  earlyStart: 'per-launch',
});

/** The same, exact build (bf16 hi/lo pairs, three products). */
export const prefillWyExactKernel = defineKernel({
  name: 'gdn.prefill-wy-exact',
  params: PARAMS,
  cuda: { module: prefillModule, symbol: 'gdn_prefill_wy_x3' },
  cpu: prefillWyCpu(2),
  earlyStart: 'per-launch',
});

/** The recurrence over each sequence's chunks, from the slot's state (pending rows folded first), committing state and ring. */
export const prefillScanKernel = defineKernel({
  name: 'gdn.prefill-scan',
  params: PARAMS,
  cuda: { module: prefillModule, symbol: 'gdn_prefill_scan' },
  cpu: prefillScanCpu(1),
});

export const prefillScanExactKernel = defineKernel({
  name: 'gdn.prefill-scan-exact',
  params: PARAMS,
  cuda: { module: prefillModule, symbol: 'gdn_prefill_scan_x3' },
  cpu: prefillScanCpu(2),
});

/** The gated RMSNorm of y in place, after a scan that did not fuse it (fuseNorm = 0). */
export const prefillNormKernel = defineKernel({
  name: 'gdn.prefill-norm',
  params: PARAMS,
  cuda: { module: prefillModule, symbol: 'gdn_prefill_norm' },
  cpu: prefillNormCpu,
  earlyStart: 'per-launch',
});

export const prefillKernels: PrefillKernels = {
  wy: prefillWyKernel,
  wyExact: prefillWyExactKernel,
  scan: prefillScanKernel,
  scanExact: prefillScanExactKernel,
  norm: prefillNormKernel,
};
