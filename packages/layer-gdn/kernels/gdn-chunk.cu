// Gated DeltaNet prefill in the chunked WY form (docs/layers/gdn.md, "Chunked form"; C = 64):
// gdn_prefill_wy[_x3], gdn_prefill_scan[_x3], gdn_prefill_norm. Buffer layouts: ../KERNELS.md
// ("Prefill"); launches: src/gdn-prefill-launch.ts (prefillPlan, launchPrefill); CPU twins:
// src/gdn-prefill.cpu.ts. Its own gdn-chunk-*.cuh headers (below) and gdn-step.cuh, gdn-cluster.cuh, gdn-pdl.cuh:
// no code of gdn-recurrent.cu (test/gpu/kernels/gdn-chunk-rowwise.cu keeps the row-by-row version as the GPU lane's oracle).
// tools/cuda-emu runs this file on the CPU (test/gpu/emu).
//
// Two launches (three on sm_80, or when d_v > 128), stream-ordered:
// 1. gdn_prefill_wy: one CTA per (chunk of 64 rows of one sequence, key head g), 256 threads.
//    Causal conv + SiLU of the chunk's q, k (and, per value head, v) channels from qkvz / the
//    pending rows' conv stash / the ring, L2-norm factors, gates; then for each of the r value
//    heads h of g: γ = cumsum(g), A = strict_lower(diag(β) K̂K̂ᵀ ⊙ Γ), T = (I + A)⁻¹ (f32, by
//    16-row blocks: the diagonal blocks by forward substitution, then block rows by products, the
//    whole CTA), W = T diag(β e^γ) K̂, U = T diag(β) V,
//    A_qk = Q̂K̂ᵀ ⊙ Γ ⊙ causal (tensor cores), written to the prefill scratch with the raw q, k and
//    per-row scales. Chunks are independent: the whole step's chunks run at once.
// 2. gdn_prefill_scan: per (sequence, value head) a pair of CTAs (a cluster of 2 on sm_90), each
//    owning its share of the head's d_v columns of S (f32, in
//    mma accumulator registers), walks the sequence's chunks in order: V_new = U − W S;
//    O = diag(f_q e^γ) Q S + A_qk V_new; S ← e^{γ_C} S + Kᵀ diag(f_k e^{γ_C−γ}) V_new. The gated
//    RMSNorm needs a row's whole d_v: the cluster's CTAs swap per-row Σo² through distributed
//    shared memory, one chunk behind (split cluster barrier), and write y (z prefetched into shared
//    memory by cp.async a chunk ahead); unfused, the fast build stages a chunk's O in shared memory
//    and writes whole rows. The state is read once and written once; pending carried
//    rows are folded first; the ring takes the step's last K positions.
// 3. gdn_prefill_norm (only when the scan ran with fuseNorm = 0: sm_80, or a head's d_v spread
//    over more than one cluster): the gated RMSNorm of the scan's raw O rows (`o`, f32) into y, in
//    the row type (in place where y is f32 and o is y), one CTA per row.
// Each WY and scan launch takes the chunks [chunk0, chunkEnd) of every sequence: a pipelined
// prefill runs them in pieces, each WY after the first beside the scan before it (piece_done,
// KERNELS.md "Pieces").
//
// Tensor cores: mma.sync m16n8k16 bf16 × bf16 → f32 (HMMA on sm_80 and sm_90). Precision: the
// fast build (P = 1) rounds every matrix operand to bf16 (S, V_new, T stay f32 between products):
// expect ~1e-3..1e-2 relative error against f32. The exact build (_x3, P = 2) stores each operand
// as a pair of bf16 (hi, lo = bf16(x − hi)) and runs three products (hi·hi + hi·lo + lo·hi):
// ~1e-5, which the layer uses for short prefills (and the golden fixtures see).
//
// The parts, one file each: gdn-chunk-base.cuh (arguments, sizes, scratch layout), gdn-chunk-prims.cuh
// (PTX primitives), gdn-chunk-seq.cuh (a CTA's rows and conv inputs), gdn-chunk-conv.cuh,
// gdn-chunk-wy.cuh, gdn-chunk-scan.cuh, gdn-chunk-norm.cuh; this file holds the entry points.
#include "gdn-chunk-wy.cuh"
#include "gdn-chunk-scan.cuh"
#include "gdn-chunk-norm.cuh"

namespace gdnp {

// A WY kernel of a later piece of a pipelined prefill runs beside the last piece's scan (an early
// start after it; it reads nothing the scan writes), and so does the norm of the piece before that
// scan's. Neither grid may complete before the kernel before it does, so that the next scan,
// stream-ordered after them, finds the state the last scan wrote: one CTA waits for it.
__device__ __forceinline__ void piece_done() {
  if (blockIdx.x == gridDim.x - 1 && blockIdx.y == gridDim.y - 1 && blockIdx.z == gridDim.z - 1) wait_previous_kernel();
}

__device__ __forceinline__ void check_shape(const Args& A) {
  const bool ok = A.hk > 0 && A.hv > 0 && A.hv % A.hk == 0 && A.dk >= 1 && A.dk <= DK && A.dv >= 1 && A.dv <= MAXDV && A.K >= 1 &&
                  A.maxK >= 1 && A.rows >= 0 && A.batch >= 0 && A.chunk0 >= 0 && A.chunkEnd > A.chunk0;
  if (!ok) __trap();
}

}  // namespace gdnp

#define GDNP_PARAMS                                                                                                              \
  const float *qkvz, float *y, const int32_t *slots, const int32_t *rowStarts, const int32_t *seqLens, float *state,             \
      float *convRing, const float *convWeight, const float *aLog, const float *dtBias, const float *normWeight, const float *stash,  \
      const float *convStash, const uint32_t *pending, unsigned char *scratch, int batch, int rows, int hk, int hv, int dk, int dv,   \
      int convK, int maxK, float eps, int fuseNorm, int chunk0, int chunkEnd, float *o, int yDtype
#define GDNP_ARGS                                                                                                                     \
  gdnp::Args A {                                                                                                                      \
    qkvz, y, slots, rowStarts, seqLens, state, convRing, convWeight, aLog, dtBias, normWeight, stash, convStash, pending, scratch,    \
        batch, rows, hk, hv, dk, dv, convK, maxK, eps, fuseNorm, chunk0, chunkEnd, o, yDtype                                          \
  }

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GDNP_CLUSTER(n) __cluster_dims__(n, 1, 1)
#else
#define GDNP_CLUSTER(n)
#endif

// Launch (gdn-launch.ts): grid [floor(rows/64) + batch, H_k], 256 threads, wy_lay(P).total bytes.
extern "C" __global__ void __launch_bounds__(256, 2) gdn_prefill_wy(GDNP_PARAMS) {
  const GDNP_ARGS;
  gdnp::check_shape(A);
  gdnp::wy_chunk<1>(A);
  gdnp::piece_done();
}
extern "C" __global__ void __launch_bounds__(256, 1) gdn_prefill_wy_x3(GDNP_PARAMS) {
  const GDNP_ARGS;
  gdnp::check_shape(A);
  gdnp::wy_chunk<2>(A);
  gdnp::piece_done();
}
// Launch: grid [CL·ceil(ceil(d_v/16)/(4·CL)), H_v, batch] (clusters of CL = 2 along x on sm_90),
// 64·mpc threads (mpc = ceil(ceil(d_v/16) / grid.x) ≤ 4), scan_lay(P, mpc, CL).total bytes;
// fuseNorm only when grid.x = CL (one cluster holds the whole head).
extern "C" __global__ void GDNP_CLUSTER(2) __launch_bounds__(256, 1) gdn_prefill_scan(GDNP_PARAMS) {
  const GDNP_ARGS;
  gdnp::check_shape(A);
  gdnp::let_next_kernel_start();  // the next piece's WY kernel (a pipelined prefill)
  gdnp::scan_seq<1, 2>(A);
}
extern "C" __global__ void GDNP_CLUSTER(2) __launch_bounds__(256, 1) gdn_prefill_scan_x3(GDNP_PARAMS) {
  const GDNP_ARGS;
  gdnp::check_shape(A);
  gdnp::let_next_kernel_start();  // the next piece's WY kernel (a pipelined prefill)
  gdnp::scan_seq<2, 2>(A);
}
// Launch: grid [rows] (a piece: its rows), 128 threads. A piece's norm runs beside the next piece's
// scan (an early start after it) and lets the next WY kernel start beside both; like that WY
// kernel, it does not complete before the scan (piece_done).
extern "C" __global__ void __launch_bounds__(128) gdn_prefill_norm(GDNP_PARAMS) {
  const GDNP_ARGS;
  gdnp::check_shape(A);
  gdnp::let_next_kernel_start();
  gdnp::norm_row(A);
  gdnp::piece_done();
}
