// The public API of @metrale/layer-gdn.
export { plugin, plugin as default } from './plugin.js';
export { GdnLayer, type GdnState } from './gdn-layer.js';
export { readGdnConfig, projectionRow, type GdnConfig } from './gdn-config.js';
export { loadGdnWeights, inputProjections, type InputProjection, groupSplitProjections, groupSplitLinears, FUSED_NAMES, SPLIT_NAMES, COMMON_NAMES, type GdnHostWeights } from './gdn-weights.js';
export { recurrentVariantKernels, foldVariantKernels } from './gdn-kernels.js';
export {
  recurrentLaunch, gdnBlock, variantBlock, variantSharedBytes, variantFor, recurrentVariant, foldVariant, fastSupported, pipeSupported, splitSupported, runsClusters, variantGrid, SPLIT_CTAS,
  DEFAULT_VARIANT, GDN_KERNEL_VARIANTS, GDN_FOLD_VARIANTS, PIPE_THREADS, PIPE_STAGES, PIPE_MIN_BATCH,
  type GdnKernelVariant, type GdnFoldVariant, type GdnLaunchShape,
} from './gdn-launch.js';
export { decodePrepKernel, decodePrepGatesKernel, decodeStateKernel, decodeStatePlainKernel, twoKernelDecodeKernels, verifyPrepKernel, verifyStateKernel, twoKernelVerifyKernels, foldStateKernel, foldKernels } from './gdn-kernels.js';
export { foldStateSharedBytes, foldStateLaunch, foldPath, launchFold, type FoldKernels } from './gdn-fold-launch.js';
export { VERIFY_ROWS, VERIFY_PREP_THREADS, VERIFY_STATE_THREADS, VERIFY_STATE_STAGES, VERIFY_SCALARS, TWO_KERNEL_VERIFY_MIN_BATCH, verifyPrepLayout, verifyPrepBytes, verifyStateSharedBytes, twoKernelVerifySupported, runsTwoKernelVerify, verifyPath, twoKernelVerifyLaunches, launchTwoKernelVerify, type VerifyPrepLayout, type TwoKernelVerifyKernels } from './gdn-verify-launch.js';
export { verifyPrepCpu, verifyStateCpu, type VerifyArgs } from './gdn-verify.cpu.js';
export { twoKernelDecodeLaunches, twoKernelDecodeSupported, runsTwoKernelDecode, decodePath, launchTwoKernelDecode, decodeStateFor, decodePrepStride, NO_GATE_ROWS, type TwoKernelDecodeKernels, TWO_KERNEL_MIN_BATCH, PIPE_DECODE_FROM, decodePrepBytes, decodeStateSharedBytes, DECODE_PREP_THREADS, DECODE_PREP_GATES_THREADS, DECODE_STATE_THREADS } from './gdn-decode-launch.js';
export { decodePrepCpu, decodeStateCpu, type DecodeArgs } from './gdn-decode.cpu.js';
export { recurrentCpu, foldCpu, chunkCpu, type RecurrentArgs, type FoldArgs, type ChunkArgs } from './gdn.cpu.js';
export {
  prefillWyKernel, prefillWyExactKernel, prefillScanKernel, prefillScanExactKernel, prefillNormKernel, prefillKernels,
} from './gdn-prefill-kernels.js';
export {
  prefillPlan, launchPrefill, PREFILL_ALL_CHUNKS, PREFILL_PIECE_RATIO, PREFILL_PIECE_MIN_CHUNKS, type PrefillPiece, prefillScratchBytes, prefillScratchLayout, wySharedBytes, scanSharedBytes,
  PREFILL_CHUNK, PREFILL_EXACT_MAX_ROWS, PREFILL_SCAN_CLUSTER, PREFILL_PARAMS,
  type PrefillPlan, type PrefillShape, type PrefillKernels, type PrefillKernel, type PrefillBuffers, type PrefillScratchLayout, type PrefillPlanes,
} from './gdn-prefill-launch.js';
export { equalPieces, shrinkingPieces } from './gdn-prefill-pieces.js';
export { prefillWyCpu, prefillScanCpu, prefillNormCpu, type PrefillArgs } from './gdn-prefill.cpu.js';
