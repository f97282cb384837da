// Gated DeltaNet prefill in the chunked WY form (docs/layers/gdn.md, "Chunked form"; C = 64):
// gdn_prefill_wy[_x3], gdn_prefill_scan[_c4][_x3], gdn_prefill_norm. Buffer layouts: ../KERNELS.md
// ("Prefill"); launches: src/gdn-prefill-launch.ts (prefillPlan, launchPrefill); CPU twins:
// src/gdn-prefill.cpu.ts. Self-contained but for gdn-cluster.cuh and gdn-pdl.cuh (no code of
// gdn-recurrent.cu; gdn-chunk-rowwise.cu keeps the row-by-row version as the oracle). dev/emu runs
// this file in a CPU thread emulator.
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
// 2. gdn_prefill_scan: per (sequence, value head) a pair of CTAs (a cluster of 2 on sm_90; the
//    _c4 build: 4 CTAs of 4 warps), each owning its share of the head's d_v columns of S (f32, in
//    mma accumulator registers), walks the sequence's chunks in order: V_new = U − W S;
//    O = diag(f_q e^γ) Q S + A_qk V_new; S ← e^{γ_C} S + Kᵀ diag(f_k e^{γ_C−γ}) V_new. The gated
//    RMSNorm needs a row's whole d_v: the cluster's CTAs swap per-row Σo² through distributed
//    shared memory, one chunk behind (split cluster barrier), and write y (z prefetched into shared
//    memory by cp.async a chunk ahead); unfused, the fast build stages a chunk's O in shared memory
//    and writes whole rows. The state is read once and written once; pending carried
//    rows are folded first; the ring takes the step's last K positions.
// 3. gdn_prefill_norm (only when the scan ran with fuseNorm = 0: sm_80, or a head's d_v spread
//    over more than one cluster): the gated RMSNorm of y in place, one CTA per row.
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
// Warp layout of the scan (the part that is sequential over chunks). Warp w of a CTA owns S^T rows
// j ∈ [16·mg, 16·mg + 16) (d_v, mg = its m-group) and d_k half hh = w & 1 (64 of d_k's 128,
// zero-padded): 32 f32 registers per thread. With S^T as the A operand (the m16n8 accumulator
// layout of S^T is the m16k16 A layout, so no shuffles), per chunk the warp computes
//   X^T_part = S^T W^T (16 × 64 rows), P^T_part = S^T Q^T           (64 mma)
//   swap halves with its partner warp (shared memory) → X^T, own rows of P^T
//   V_new^T = U^T − X^T; O^T(own 32 rows) = P^T diag(qs) + V_new^T A_qk^T   (16 mma)
//   S^T ← e^{γ_C} S^T + V_new^T diag(ks) K (its d_k half)             (32 mma)
// B operands come from shared memory by ldmatrix; the next chunk's tiles load by cp.async while
// this one computes (double buffer; the exact build single-buffers for room). Registers: ≤ 255 for
// the scans, 128 for gdn_prefill_wy (2 CTAs per SM), no spills (nvcc -Xptxas -v).
#include <stdint.h>
#include "gdn-cluster.cuh"
#include "gdn-pdl.cuh"

#if defined(__CUDA_ARCH__)
#define GDNP_DEV 1
#elif defined(GDN_EMU)
#define GDNP_EMU 1
#endif

namespace gdnp {

constexpr int C = 64;          // rows per chunk
constexpr int DK = 128;        // d_k of the tiles (zero-padded; d_k ≤ 128)
constexpr int DKT = DK + 8;    // smem row stride (bf16) of d_k-wide tiles: 272 bytes, ldmatrix conflict-free
constexpr int CT = C + 8;      // smem row stride (bf16) of 64-wide tiles
constexpr int FT = C + 4;      // smem row stride (f32) of 64 × 64 f32 tiles
constexpr int MAXDV = 256;
constexpr int WY_THREADS = 256;
constexpr int SEG = 8;         // conv rows per work item (its 8 + 3 inputs in flight together)
constexpr int KMAX4 = 4;       // the vectorised conv takes K ≤ 4

typedef unsigned short bf16_t;

struct Args {
  const float* qkvz;
  const float* ba;
  float* y;
  const int32_t* slots;
  const int32_t* rowStarts;
  const int32_t* seqLens;
  float* state;
  float* convRing;
  const float* convWeight;
  const float* aLog;
  const float* dtBias;
  const float* normWeight;
  const float* stash;
  const float* convStash;
  const uint32_t* pending;
  unsigned char* scratch;
  int batch, rows;
  int hk, hv, dk, dv, K, maxK;
  float eps;
  int fuseNorm;
  int chunk0, chunkEnd;  // this launch's chunks of each sequence: [chunk0, min(chunkEnd, its chunks))
};

// ---- small helpers ---------------------------------------------------------------------------

// Programmatic dependent launch (gdn-pdl.cuh): a pipelined prefill's scan lets the next piece's WY
// kernel start at once (launchPrefill).
using gdn_pdl::let_next_kernel_start;
using gdn_pdl::wait_previous_kernel;

__host__ __device__ __forceinline__ int round_up(int x, int m) { return (x + m - 1) / m * m; }
// f(integral constant 0), …, f(N − 1): compile-time indices for offsets that must be immediates.
template <int V>
struct Int {
  static constexpr int value = V;
};
template <int I, int N, typename F>
__device__ __forceinline__ void static_for_from(F&& f) {
  if constexpr (I < N) {
    f(Int<I>{});
    static_for_from<I + 1, N>(f);
  }
}
template <int N, typename F>
__device__ __forceinline__ void static_for(F&& f) {
  static_for_from<0, N>(f);
}
__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }
// e^x and 1/x by the flush-to-zero approximations (ex2.approx.ftz, rcp.approx.ftz: ≈ 2 ulp):
// __expf without ftz adds a range test and two predicated multiplies per call to keep denormal
// results; a product of gates, norms and keys loses nothing it keeps when a factor below 1.2e-38
// becomes 0 (and SiLU's 1 + e^{−x} is ≥ 1).
__device__ __forceinline__ float exp_ftz(float x) {
#if defined(GDNP_DEV)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
  return y;
#else
  return expf(x);
#endif
}
__device__ __forceinline__ float rcp_ftz(float x) {
#if defined(GDNP_DEV)
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return 1.0f / x;
#endif
}
// SiLU through the fast exponential and reciprocal (≈ 1e-6 relative; x ≪ 0 gives −0): the conv
// computes 4 of them per output element, and the IEEE division's slow path cost issue slots.
__device__ __forceinline__ float siluf_(float x) { return x * rcp_ftz(1.0f + exp_ftz(-x)); }
__device__ __forceinline__ float softplusf_(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// Shape-derived sizes shared by both kernels (and mirrored in src/gdn-launch.ts).
struct Geo {
  int r, grp, width, keyDim, convDim, stashRow;
  int dks, dvs, dvp;      // d_k, d_v rounded up to 8 (scratch rows), d_v rounded up to 16 (tiles)
  long long stashSeq;
  int csRows;             // conv stash rows per slot (a ring by position: 2·maxK)
};

__device__ __forceinline__ Geo geo_of(const Args& A) {
  Geo G;
  G.r = A.hv / A.hk;
  G.grp = 2 * A.dk + 2 * G.r * A.dv;
  G.width = A.hk * G.grp;
  G.keyDim = A.hk * A.dk;
  G.convDim = 2 * G.keyDim + A.hv * A.dv;
  G.stashRow = A.dk + A.dv + 1;
  G.stashSeq = (long long)A.hv * A.maxK * G.stashRow;
  G.dks = round_up(A.dk, 8);
  G.dvs = round_up(A.dv, 8);
  G.dvp = round_up(A.dv, 16);
  G.csRows = 2 * A.maxK;
  return G;
}

// The qkvz column of z_0 of value head h (key head h / r; its group: q, k, r × v, r × z).
__device__ __forceinline__ int z_col(const Args& A, const Geo& G, int h) {
  const int kg = h / G.r;
  return kg * G.grp + 2 * A.dk + (G.r + h - kg * G.r) * A.dv;
}

// The prefill scratch (bytes from A.scratch), for a step of R = A.rows rows and P bf16 planes
// (plane 1: lo parts). Every matrix is [plane][head][row][cols], row = the step's row index:
//   qr, kr  [P][H_k][R][dks]   raw (conv + SiLU) q and k
//   w       [P][H_v][R][dks]   W = T diag(β e^γ f_k) K_raw
//   u       [P][H_v][R][dvs]   U = T diag(β) V
//   aqk     [P][H_v][R][64]    A_qk (row i of the chunk: its 64 entries, zero above the diagonal)
//   sc      f32 [H_v][R][4]    (f_q e^{γ_i}, f_k e^{γ_last − γ_i}, γ_i, 0)
struct Scratch {
  bf16_t *qr, *kr, *w, *u, *aqk;
  float* sc;
  long long qrPlane, wPlane, uPlane, aqkPlane;  // elements per plane
};

template <int P>
__device__ __forceinline__ Scratch scratch_of(const Args& A, const Geo& G) {
  Scratch S;
  const long long R = A.rows;
  S.qrPlane = (long long)A.hk * R * G.dks;
  S.wPlane = (long long)A.hv * R * G.dks;
  S.uPlane = (long long)A.hv * R * G.dvs;
  S.aqkPlane = (long long)A.hv * R * C;
  bf16_t* p = reinterpret_cast<bf16_t*>(A.scratch);
  S.qr = p;
  p += P * S.qrPlane;
  S.kr = p;
  p += P * S.qrPlane;
  S.w = p;
  p += P * S.wPlane;
  S.u = p;
  p += P * S.uPlane;
  S.aqk = p;
  p += P * S.aqkPlane;
  S.sc = reinterpret_cast<float*>(p);
  return S;
}

// ---- device primitives (PTX on the GPU; the CPU thread emulator's versions under GDN_EMU) ----

#if defined(GDNP_EMU)
}  // namespace gdnp
#include "gdn-emu-prims.h"  // dev-only: not in this package (see the notes of the prefill work)
namespace gdnp {
#endif

__device__ __forceinline__ unsigned char* dyn_smem() {
#if defined(GDNP_DEV)
  extern __shared__ __align__(128) unsigned char gdnp_smem[];
  return gdnp_smem;
#elif defined(GDNP_EMU)
  return emu_prims::smem_base();
#else
  return nullptr;
#endif
}

__device__ __forceinline__ uint32_t saddr(const void* p) { return gdn_cluster::saddr(p); }

// bf16 round to nearest even; two floats into one bf16x2 word, `lo` in the low half.
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
#if defined(GDNP_DEV)
  uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
#else
  auto one = [](float x) -> uint32_t {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return (u >> 16) | ((u & 0xffffu) ? 0x40u : 0u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return u >> 16;
  };
  return one(lo) | (one(hi) << 16);
#endif
}
__device__ __forceinline__ float bf_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ float bf2f(bf16_t h) { return __uint_as_float((uint32_t)h << 16); }

// x ≈ hi + lo: hi = bf16(x), lo = bf16(x − hi) (both packed in pairs).
__device__ __forceinline__ void split2(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  hi = pack2(x0, x1);
  lo = pack2(x0 - bf_lo(hi), x1 - bf_hi(hi));
}

template <int P>
__device__ __forceinline__ void to_planes(float x0, float x1, uint32_t (&pl)[2]) {
  if (P == 1) {
    pl[0] = pack2(x0, x1);
    pl[1] = 0;
  } else {
    split2(x0, x1, pl[0], pl[1]);
  }
}

__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], uint32_t addr) {
#if defined(GDNP_DEV)
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
#elif defined(GDNP_EMU)
  emu_prims::ldsm(r, addr, false);
#endif
}
__device__ __forceinline__ void ldsm4t(uint32_t (&r)[4], uint32_t addr) {
#if defined(GDNP_DEV)
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
#elif defined(GDNP_EMU)
  emu_prims::ldsm(r, addr, true);
#endif
}

// d += a · b (m16n8k16, bf16 operands, f32 accumulators).
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(GDNP_DEV)
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#elif defined(GDNP_EMU)
  emu_prims::mma(d, a, b0, b1);
#endif
}

// P passes: d += ahi·bhi (+ ahi·blo + alo·bhi).
template <int P>
__device__ __forceinline__ void mmaP(float (&d)[4], const uint32_t (&ah)[4], const uint32_t (&al)[4], uint32_t bh0, uint32_t bh1,
                                     uint32_t bl0, uint32_t bl1) {
  mma(d, ah, bh0, bh1);
  if (P == 2) {
    mma(d, ah, bl0, bl1);
    mma(d, al, bh0, bh1);
  }
}

// cp.async of 16 bytes; src_bytes = 0 writes zeros (src is not read).
__device__ __forceinline__ void cp16(uint32_t dst, const void* src, int srcBytes) {
#if defined(GDNP_DEV)
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(srcBytes) : "memory");
#elif defined(GDNP_EMU)
  emu_prims::cp16(dst, src, srcBytes);
#endif
}
// The same with compile-time offsets added to both addresses (one address pair serves a run of copies).
template <int SOFF, int GOFF>
__device__ __forceinline__ void cp16i(uint32_t dst, const void* src, int srcBytes) {
#if defined(GDNP_DEV)
  asm volatile("cp.async.cg.shared.global [%0+%3], [%1+%4], 16, %2;" ::"r"(dst), "l"(src), "r"(srcBytes), "n"(SOFF), "n"(GOFF) : "memory");
#elif defined(GDNP_EMU)
  emu_prims::cp16(dst + SOFF, srcBytes ? static_cast<const unsigned char*>(src) + GOFF : src, srcBytes);
#endif
}
__device__ __forceinline__ void cp_commit() {
#if defined(GDNP_DEV)
  asm volatile("cp.async.commit_group;" ::: "memory");
#elif defined(GDNP_EMU)
  emu_prims::cp_commit();
#endif
}
template <int N>
__device__ __forceinline__ void cp_wait() {
#if defined(GDNP_DEV)
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#elif defined(GDNP_EMU)
  emu_prims::cp_wait(N);
#endif
}

// Cluster (sm_90): rank, split barrier, a store into another CTA's shared memory (gdn-cluster.cuh).
__device__ __forceinline__ unsigned cluster_rank() { return gdn_cluster::rank(); }
__device__ __forceinline__ void cluster_arrive() { gdn_cluster::arrive(); }
__device__ __forceinline__ void cluster_wait() { gdn_cluster::wait(); }
__device__ __forceinline__ void st_cluster(uint32_t addr, unsigned rank, float v) { gdn_cluster::st(addr, rank, v); }
__device__ __forceinline__ bool has_clusters() { return gdn_cluster::available(); }

// Fragment addresses. Tiles are row-major bf16 with `stride` elements per row.
// A operand (16 × 16 at row r0, col k0) / B operand stored [n][k] (two n-tiles at n0, k0..k0+15):
// ldmatrix x4, lane l reads row (l & 7) of matrix l >> 3.
__device__ __forceinline__ uint32_t a_addr(uint32_t base, int stride, int r0, int k0, int lane) {
  const int mi = lane >> 3, rr = lane & 7;
  return base + 2u * (uint32_t)((r0 + rr + ((mi & 1) << 3)) * stride + k0 + ((mi >> 1) << 3));
}
__device__ __forceinline__ uint32_t bnk_addr(uint32_t base, int stride, int n0, int k0, int lane) {
  const int mi = lane >> 3, rr = lane & 7;
  return base + 2u * (uint32_t)((n0 + rr + ((mi >> 1) << 3)) * stride + k0 + ((mi & 1) << 3));
}
// B operand stored [k][n] (two n-tiles at n0, rows k0..k0+15), ldmatrix .trans.
__device__ __forceinline__ uint32_t bkn_addr(uint32_t base, int stride, int k0, int n0, int lane) {
  const int mi = lane >> 3, rr = lane & 7;
  return base + 2u * (uint32_t)((k0 + rr + ((mi & 1) << 3)) * stride + n0 + ((mi >> 1) << 3));
}

// Conv stash row of position p (a ring by position, KERNELS.md).
__device__ __forceinline__ long long cs_index(const Args& A, const Geo& G, int slot, int p, int c) {
  return ((long long)slot * G.csRows + (p % G.csRows)) * G.convDim + c;
}

// The sequence of a CTA's work: batch position b, its committed length P0 = seqLens[b] (pending
// rows included), the first pending position L, its rows in the step.
struct Seq {
  int b, slot, P0, L, row0, nrows;
};

__device__ __forceinline__ bool seq_of(const Args& A, int b, Seq& s) {
  s.b = b;
  s.slot = A.slots[b];
  if (s.slot < 0) return false;
  s.P0 = A.seqLens[b];
  const int nPend = A.pending ? (int)A.pending[s.slot] : 0;
  s.L = s.P0 - nPend;
  s.row0 = A.rowStarts[b];
  s.nrows = A.rowStarts[b + 1] - s.row0;
  return true;
}

// Pre-conv input of channel c (qkvz column col) at position p: the step's rows, pending rows
// (conv stash), or history (ring).
__device__ __forceinline__ float conv_in(const Args& A, const Geo& G, const Seq& s, int c, int col, int p) {
  if (p < 0) return 0.0f;
  if (p >= s.P0) return A.qkvz[(size_t)(s.row0 + (p - s.P0)) * G.width + col];
  if (p >= s.L) return A.convStash[cs_index(A, G, s.slot, p, c)];
  return A.convRing[((size_t)s.slot * A.K + (p % A.K)) * G.convDim + c];
}
__device__ __forceinline__ float4 conv_in4(const Args& A, const Geo& G, const Seq& s, int c, int col, int p) {
  if (p < 0) return make_float4(0.f, 0.f, 0.f, 0.f);
  if (p >= s.P0) return *reinterpret_cast<const float4*>(A.qkvz + (size_t)(s.row0 + (p - s.P0)) * G.width + col);
  if (p >= s.L) return *reinterpret_cast<const float4*>(A.convStash + cs_index(A, G, s.slot, p, c));
  return *reinterpret_cast<const float4*>(A.convRing + ((size_t)s.slot * A.K + (p % A.K)) * G.convDim + c);
}

// ================================================================================================
// Kernel 1: WY factors of every chunk
// ================================================================================================

// Shared memory of gdn_prefill_wy (bytes; src/gdn-launch.ts mirrors it).
struct WyLay {
  int qr, kr, v, tw, tu, gkk, am, fq, fk, beta, gam, total;
  int vt;  // row stride (bf16) of the v tile
};
__host__ __device__ __forceinline__ WyLay wy_lay(int P, int dv, int r) {
  WyLay L;
  L.vt = round_up(dv, 16) + 8;
  int o = 0;
  L.qr = o; o += P * C * DKT * 2;
  L.kr = o; o += P * C * DKT * 2;
  L.v = o; o += P * C * L.vt * 2;
  L.tw = o; o += P * C * CT * 2;
  L.tu = o; o += P * C * CT * 2;
  L.gkk = o; o += C * FT * 4;
  L.am = o; o += C * FT * 4;
  L.fq = o; o += C * 4;
  L.fk = o; o += C * 4;
  L.beta = o; o += r * C * 4;
  L.gam = o; o += r * C * 4;
  L.total = o;
  return L;
}

// The launch's chunks [lo, hi) of a sequence of n rows: [chunk0, chunkEnd) clipped to its chunks.
__device__ __forceinline__ void launch_chunks(const Args& A, int n, int& lo, int& hi) {
  const int nc = n > 0 ? (n + C - 1) / C : 0;
  lo = min(nc, A.chunk0);
  hi = min(nc, A.chunkEnd);
}

// The (sequence, chunk) of CTA x: the launch's chunks of each real sequence, in batch order.
__device__ __forceinline__ bool chunk_of(const Args& A, int x, int& b, int& c) {
  for (int i = 0; i < A.batch; ++i) {
    int lo, hi;
    launch_chunks(A, A.rowStarts[i + 1] - A.rowStarts[i], lo, hi);
    if (x < hi - lo) {
      b = i;
      c = lo + x;
      return true;
    }
    x -= hi - lo;
  }
  return false;
}

// Writes four conv outputs (f32) of row `row`, columns e..e+3, into a bf16 tile (P planes).
template <int P>
__device__ __forceinline__ void put4(unsigned char* tile, int planeBytes, int stride, int row, int e, float4 v) {
  uint32_t a[2], b[2];
  to_planes<P>(v.x, v.y, a);
  to_planes<P>(v.z, v.w, b);
  uint2* d = reinterpret_cast<uint2*>(tile + 2 * (row * stride + e));
  *d = make_uint2(a[0], b[0]);
  if (P == 2) *reinterpret_cast<uint2*>(reinterpret_cast<unsigned char*>(d) + planeBytes) = make_uint2(a[1], b[1]);
}
template <int P>
__device__ __forceinline__ void put1(unsigned char* tile, int planeBytes, int stride, int row, int e, float v) {
  uint32_t pl[2];
  to_planes<P>(v, 0.f, pl);
  bf16_t* d = reinterpret_cast<bf16_t*>(tile + 2 * (row * stride + e));
  *d = (bf16_t)(pl[0] & 0xffffu);
  if (P == 2) *reinterpret_cast<bf16_t*>(reinterpret_cast<unsigned char*>(d) + planeBytes) = (bf16_t)(pl[1] & 0xffffu);
}

// The vectorised conv at K = 4 when the threads are a multiple of the 4-channel groups: a
// thread's channels, their 16 weights (four float4) and its tile column are fixed, its row
// segments step by nt / nq, and a window's rows come from one pointer stepped by the row width.
// The general loop (conv_tile) was, with the SiLUs' range tests, 40 % of gdn_prefill_wy's
// instructions at the 80B shape (ncu): per work item a division (item / nq), 16 scalar weight
// loads and a 64-bit index product per input row.
template <int P, typename ChOf, typename ColOf>
__device__ __forceinline__ void conv_tile_k4(const Args& A, const Geo& G, const Seq& s, int Pc, int n, int nch, ChOf chOf, ColOf colOf,
                                             unsigned char* tile, int planeBytes, int stride, int me, int nt, int split,
                                             unsigned char* tile2) {
  const int nq = nch >> 2;
  const int e = (me % nq) * 4, seg0 = me / nq, segStep = nt / nq;
  const int c = chOf(e), col = colOf(e);
  unsigned char* dst = e < split ? tile : tile2;
  const int de = e < split ? e : e - split;
  float4 w[4];  // w[u]: channel c + u, taps 0..3 (x: the oldest input)
#pragma unroll
  for (int u = 0; u < 4; ++u) w[u] = *reinterpret_cast<const float4*>(A.convWeight + (size_t)(c + u) * 4);
  for (int seg = seg0; seg < C / SEG; seg += segStep) {
    const int r0 = seg * SEG;
    float4 x[SEG + 3];  // input rows r0 − 3 .. r0 + SEG − 1 of the chunk
    if (Pc + r0 - 3 >= s.P0) {
      const float* src = A.qkvz + (size_t)(s.row0 + (Pc - s.P0) + r0 - 3) * G.width + col;
#pragma unroll
      for (int i = 0; i < SEG + 3; ++i) {
        x[i] = r0 - 3 + i < n ? *reinterpret_cast<const float4*>(src) : make_float4(0.f, 0.f, 0.f, 0.f);
        src += G.width;
      }
    } else {
#pragma unroll
      for (int i = 0; i < SEG + 3; ++i) {
        const int rr = r0 - 3 + i;
        x[i] = rr < n ? conv_in4(A, G, s, c, col, Pc + rr) : make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
#pragma unroll
    for (int o = 0; o < SEG; ++o) {
      const int row = r0 + o;
      float4 acc;
      acc.x = w[0].x * x[o].x + w[0].y * x[o + 1].x + w[0].z * x[o + 2].x + w[0].w * x[o + 3].x;
      acc.y = w[1].x * x[o].y + w[1].y * x[o + 1].y + w[1].z * x[o + 2].y + w[1].w * x[o + 3].y;
      acc.z = w[2].x * x[o].z + w[2].y * x[o + 1].z + w[2].z * x[o + 2].z + w[2].w * x[o + 3].z;
      acc.w = w[3].x * x[o].w + w[3].y * x[o + 1].w + w[3].z * x[o + 2].w + w[3].w * x[o + 3].w;
      const float4 out = row < n ? make_float4(siluf_(acc.x), siluf_(acc.y), siluf_(acc.z), siluf_(acc.w)) : make_float4(0.f, 0.f, 0.f, 0.f);
      put4<P>(dst, planeBytes, stride, row, de, out);
    }
  }
}

// Conv + SiLU of `nch` channels (chunk-relative channel e → conv channel chOf(e), qkvz column
// colOf(e)) for the chunk's 64 rows (zeros past its n rows) into a bf16 tile. Work items: (4
// channels or 1, 8 rows), spread over threads [t0, t0 + nt).
template <int P, typename ChOf, typename ColOf>
__device__ __forceinline__ void conv_tile(const Args& A, const Geo& G, const Seq& s, int Pc, int n, int nch, bool vec, ChOf chOf, ColOf colOf,
                                          unsigned char* tile, int planeBytes, int stride, int tid, int t0, int nt, int split = 1 << 30,
                                          unsigned char* tile2 = nullptr) {
  // Channels e ≥ split go to tile2, column e − split (q and k of one key head in one pass).
  const int K = A.K;
  if (tid < t0 || tid >= t0 + nt) return;
  const int me = tid - t0;
  if (vec && K == 4 && nt % (nch >> 2) == 0) {
    conv_tile_k4<P>(A, G, s, Pc, n, nch, chOf, colOf, tile, planeBytes, stride, me, nt, split, tile2);
    return;
  }
  if (vec) {
    const int nq = nch >> 2;
    for (int item = me; item < nq * (C / SEG); item += nt) {
      const int seg = item / nq, e = (item - seg * nq) * 4;
      const int c = chOf(e), col = colOf(e);
      // Taps right-aligned to KMAX4 (zero weights first when K < 4): input row of tap tp is
      // row − 3 + tp, x index o + tp (compile-time indices: the window stays in registers).
      float w[4][KMAX4];
#pragma unroll
      for (int u = 0; u < 4; ++u)
#pragma unroll
        for (int tp = 0; tp < KMAX4; ++tp) {
          const int tap = tp - (KMAX4 - K);
          w[u][tp] = tap >= 0 ? A.convWeight[(size_t)(c + u) * K + tap] : 0.f;
        }
      const int r0 = seg * SEG;
      float4 x[SEG + KMAX4 - 1];
      if (Pc + r0 - (K - 1) >= s.P0) {
        // Every input is a row of this step (all but a sequence's first rows): one row pointer, no
        // per-load choice between the step, the conv stash and the ring.
        const float* src = A.qkvz + (size_t)(s.row0 + (Pc - s.P0) + r0 - (KMAX4 - 1)) * G.width + col;
#pragma unroll
        for (int i = 0; i < SEG + KMAX4 - 1; ++i) {
          const int rr = r0 - (KMAX4 - 1) + i;
          x[i] = (rr < n && rr >= r0 - (K - 1)) ? *reinterpret_cast<const float4*>(src + (size_t)i * G.width) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
      } else {
#pragma unroll
        for (int i = 0; i < SEG + KMAX4 - 1; ++i) {
          const int rr = r0 - (KMAX4 - 1) + i;  // chunk-relative row of input i
          x[i] = (rr < n && rr >= r0 - (K - 1)) ? conv_in4(A, G, s, c, col, Pc + rr) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
      }
#pragma unroll
      for (int o = 0; o < SEG; ++o) {
        const int row = r0 + o;
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int tp = 0; tp < KMAX4; ++tp) {
          acc.x += w[0][tp] * x[o + tp].x;
          acc.y += w[1][tp] * x[o + tp].y;
          acc.z += w[2][tp] * x[o + tp].z;
          acc.w += w[3][tp] * x[o + tp].w;
        }
        float4 out = row < n ? make_float4(siluf_(acc.x), siluf_(acc.y), siluf_(acc.z), siluf_(acc.w)) : make_float4(0.f, 0.f, 0.f, 0.f);
        if (e < split) put4<P>(tile, planeBytes, stride, row, e, out);
        else put4<P>(tile2, planeBytes, stride, row, e - split, out);
      }
    }
  } else {
    for (int item = me; item < nch * (C / SEG); item += nt) {
      const int seg = item / nch, e = item - seg * nch;
      const int c = chOf(e), col = colOf(e);
      const float* w = A.convWeight + (size_t)c * K;
      for (int o = 0; o < SEG; ++o) {
        const int row = seg * SEG + o;
        float v = 0.f;
        if (row < n) {
          float acc = 0.f;
          for (int tap = 0; tap < K; ++tap) acc += w[tap] * conv_in(A, G, s, c, col, Pc + row - K + 1 + tap);
          v = siluf_(acc);
        }
        if (e < split) put1<P>(tile, planeBytes, stride, row, e, v);
        else put1<P>(tile2, planeBytes, stride, row, e - split, v);
      }
    }
  }
}

// Stores an m16n8 accumulator pair of columns (row r, cols c, c+1) as bf16 planes to global.
template <int P>
__device__ __forceinline__ void st_pair(bf16_t* base, long long plane, long long idx, float x0, float x1) {
  uint32_t pl[2];
  to_planes<P>(x0, x1, pl);
  *reinterpret_cast<uint32_t*>(base + idx) = pl[0];
  if (P == 2) *reinterpret_cast<uint32_t*>(base + plane + idx) = pl[1];
}

// Stores a warp's 16 × 64 accumulator block (8 n-tiles; this thread's rows rA and rA + 8, columns
// 8·nt + 2·t4, 8·nt + 2·t4 + 1 of the block) as bf16 planes. pA: element (rA, block column 2·t4);
// ld: elements per row; row rA is stored when rowA, row rA + 8 when rowB, the block's column c
// when c < nCols. A whole block (both rows, nCols ≥ 64) stores from two row pointers with
// immediate offsets: the per-piece guards and 64-bit index products cost a tenth of
// gdn_prefill_wy's instructions.
template <int P>
__device__ __forceinline__ void st_block(bf16_t* pA, long long plane, int ld, const float (&acc)[8][4], bool rowA, bool rowB, int nCols, int t4) {
  bf16_t* pB = pA + 8 * (long long)ld;
  if (rowB && nCols >= 64) {
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      st_pair<P>(pA, plane, 8 * nt, acc[nt][0], acc[nt][1]);
      st_pair<P>(pB, plane, 8 * nt, acc[nt][2], acc[nt][3]);
    }
    return;
  }
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
    if (8 * nt + 2 * t4 >= nCols) continue;
    if (rowA) st_pair<P>(pA, plane, 8 * nt, acc[nt][0], acc[nt][1]);
    if (rowB) st_pair<P>(pB, plane, 8 * nt, acc[nt][2], acc[nt][3]);
  }
}

template <int P>
__device__ __forceinline__ void wy_chunk(const Args& A) {
  const Geo G = geo_of(A);
  int b, c;
  if (!chunk_of(A, blockIdx.x, b, c)) return;
  Seq s;
  if (!seq_of(A, b, s)) return;
  const int g = blockIdx.y;
  if (g >= A.hk) return;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int n = min(C, s.nrows - c * C);
  const int rowc = s.row0 + c * C;  // step row of the chunk's first row
  const int Pc = s.P0 + c * C;      // its position
  const int dk = A.dk, dv = A.dv, r = G.r;
  const WyLay L = wy_lay(P, dv, r);
  unsigned char* sm = dyn_smem();
  const int dkPlane = C * DKT * 2, vPlane = C * L.vt * 2, tPlane = C * CT * 2;
  float* gkk = reinterpret_cast<float*>(sm + L.gkk);
  float* am = reinterpret_cast<float*>(sm + L.am);
  float* fq = reinterpret_cast<float*>(sm + L.fq);
  float* fk = reinterpret_cast<float*>(sm + L.fk);
  float* beta = reinterpret_cast<float*>(sm + L.beta);
  float* gam = reinterpret_cast<float*>(sm + L.gam);
  const Scratch X = scratch_of<P>(A, G);
  // The vectorised conv (4 channels × 8 rows a work item) for both builds: the exact one took the
  // scalar conv while its unrolled solve left no registers (180 now, no spills, 1 CTA per SM).
  const bool vec = (dk % 4 == 0) && (dv % 4 == 0) && A.K <= KMAX4;

  // Zero the pad columns of the q/k tiles (d_k..127) and of the v tile (d_v..dvp−1).
  for (int idx = tid; idx < P * C * (DK - dk); idx += WY_THREADS) {
    const int p = idx / (C * (DK - dk)), rem = idx - p * C * (DK - dk);
    const int i = rem / (DK - dk), e = dk + rem % (DK - dk);
    reinterpret_cast<bf16_t*>(sm + L.qr + p * dkPlane)[i * DKT + e] = 0;
    reinterpret_cast<bf16_t*>(sm + L.kr + p * dkPlane)[i * DKT + e] = 0;
  }
  for (int idx = tid; idx < P * C * (G.dvp - dv); idx += WY_THREADS) {
    const int p = idx / (C * (G.dvp - dv)), rem = idx - p * C * (G.dvp - dv);
    const int i = rem / (G.dvp - dv), e = dv + rem % (G.dvp - dv);
    reinterpret_cast<bf16_t*>(sm + L.v + p * vPlane)[i * L.vt + e] = 0;
  }

  // Conv + SiLU of q and k (2·d_k channels, contiguous in qkvz): channel e < d_k is q (tile qr),
  // else k (tile kr, column e − d_k). The fast build does both in one pass (two work items per
  // thread); the exact one in two (registers).
  {
    const int keyDim = G.keyDim, grp = G.grp;
    auto chq = [&](int e) { return e < dk ? g * dk + e : keyDim + g * dk + (e - dk); };
    auto colq = [&](int e) { return g * grp + e; };
    if (P == 1) {
      conv_tile<P>(A, G, s, Pc, n, 2 * dk, vec, chq, colq, sm + L.qr, dkPlane, DKT, tid, 0, WY_THREADS, dk, sm + L.kr);
    } else {
      conv_tile<P>(A, G, s, Pc, n, dk, vec, chq, colq, sm + L.qr, dkPlane, DKT, tid, 0, WY_THREADS);
      auto chk = [&](int e) { return keyDim + g * dk + e; };
      auto colk = [&](int e) { return g * grp + dk + e; };
      conv_tile<P>(A, G, s, Pc, n, dk, vec, chk, colk, sm + L.kr, dkPlane, DKT, tid, 0, WY_THREADS);
    }
  }
  // Gates of the r value heads (one warp per head): β, g, γ = inclusive cumsum over the chunk.
  for (int hl = warp; hl < r; hl += WY_THREADS / 32) {
    const int h = g * r + hl;
    const float aL = expf(A.aLog[h]), dtb = A.dtBias[h];
    float bt[2], gt[2];
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const int i = lane + 32 * q;
      bt[q] = 0.f;
      gt[q] = 0.f;
      if (i < n) {
        const float* bar = A.ba + (size_t)(rowc + i) * 2 * A.hv + g * 2 * r;
        bt[q] = sigmoidf_(bar[hl]);
        gt[q] = -aL * softplusf_(bar[r + hl] + dtb);
      }
    }
    float run = 0.f;
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      float v = gt[q];
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const float u = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += u;
      }
      const int i = lane + 32 * q;
      beta[hl * C + i] = bt[q];
      gam[hl * C + i] = run + v;
      run += __shfl_sync(0xffffffffu, v, 31);
    }
  }
  __syncthreads();
  // L2-norm factors per row (from the tiles: hi + lo ≈ the f32 value), q with 1/√d_k.
  if (tid < 2 * C) {
    const int which = tid >> 6, i = tid & 63;
    const unsigned char* t = sm + (which ? L.kr : L.qr);
    float ss = 0.f;
    for (int e = 0; e < DK; e += 8) {
      const uint4 h4 = *reinterpret_cast<const uint4*>(t + 2 * (i * DKT + e));
      uint4 l4 = make_uint4(0, 0, 0, 0);
      if (P == 2) l4 = *reinterpret_cast<const uint4*>(t + dkPlane + 2 * (i * DKT + e));
      const uint32_t hw[4] = {h4.x, h4.y, h4.z, h4.w}, lw[4] = {l4.x, l4.y, l4.z, l4.w};
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float x0 = bf_lo(hw[q]) + bf_lo(lw[q]), x1 = bf_hi(hw[q]) + bf_hi(lw[q]);
        ss += x0 * x0 + x1 * x1;
      }
    }
    const float f = i < n ? (which ? 1.0f : 1.0f / sqrtf((float)dk)) / sqrtf(ss + 1e-6f) : 0.f;
    (which ? fk : fq)[i] = f;
  }
  // Raw q and k of the chunk's rows to the scratch (16-byte pieces, columns < dks): a thread's
  // piece q and first row i0 are fixed, its rows step by 16 from one pointer per tile and plane.
  {
    const int pieces = G.dks / 8, q = tid & 15, i0 = tid >> 4;
    const long long step = 16LL * G.dks;
    if (q < pieces) {
#pragma unroll
      for (int p = 0; p < P; ++p)
#pragma unroll
        for (int which = 0; which < 2; ++which) {
          const unsigned char* src = sm + (which ? L.kr : L.qr) + p * dkPlane + 2 * (i0 * DKT + 8 * q);
          bf16_t* dst = (which ? X.kr : X.qr) + p * X.qrPlane + ((long long)g * A.rows + rowc + i0) * G.dks + 8 * q;
#pragma unroll
          for (int m = 0; m < C / 16; ++m)
            if (i0 + 16 * m < n) *reinterpret_cast<uint4*>(dst + m * step) = *reinterpret_cast<const uint4*>(src + 2 * 16 * m * DKT);
        }
    }
  }
  // G_kk = K_raw K_rawᵀ (f32, lower part): warp (rb = w & 3, 32-column block cb = w >> 2).
  const int rb = warp & 3, cb = warp >> 2;
  const int nks = (dk + 15) >> 4;
  {
    const uint32_t kh = saddr(sm + L.kr), kl = kh + dkPlane;
    if (32 * cb <= 16 * rb + 15) {
      float acc[4][4];
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[a][e] = 0.f;
      for (int ks = 0; ks < nks; ++ks) {
        uint32_t ah[4], al[4] = {0, 0, 0, 0};
        ldsm4(ah, a_addr(kh, DKT, 16 * rb, 16 * ks, lane));
        if (P == 2) ldsm4(al, a_addr(kl, DKT, 16 * rb, 16 * ks, lane));
#pragma unroll
        for (int np = 0; np < 2; ++np) {
          uint32_t bh[4], bl[4] = {0, 0, 0, 0};
          ldsm4(bh, bnk_addr(kh, DKT, 32 * cb + 16 * np, 16 * ks, lane));
          if (P == 2) ldsm4(bl, bnk_addr(kl, DKT, 32 * cb + 16 * np, 16 * ks, lane));
          mmaP<P>(acc[2 * np], ah, al, bh[0], bh[1], bl[0], bl[1]);
          mmaP<P>(acc[2 * np + 1], ah, al, bh[2], bh[3], bl[2], bl[3]);
        }
      }
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int i0 = 16 * rb + (lane >> 2), j0 = 32 * cb + 8 * nt + 2 * (lane & 3);
        gkk[i0 * FT + j0] = acc[nt][0];
        gkk[i0 * FT + j0 + 1] = acc[nt][1];
        gkk[(i0 + 8) * FT + j0] = acc[nt][2];
        gkk[(i0 + 8) * FT + j0 + 1] = acc[nt][3];
      }
    }
  }
  __syncthreads();

  for (int hl = 0; hl < r; ++hl) {
    const int h = g * r + hl;
    const float* bt = beta + hl * C;
    const float* gm = gam + hl * C;
    const float gLast = gm[max(n - 1, 0)];
    // A[i][j] = β_i f_i f_j G_kk[i][j] e^{γ_i − γ_j}, j < i < n.
    {
      // A thread's 4 columns are fixed (256 threads, 16 groups), its rows step by 16: the row
      // factors load once per 4 entries, G_kk and A move as float4. Every entry is computed and
      // the strict lower part selected (G_kk is unwritten above it): a branch around the loads
      // cost more than the product.
      const int j = 4 * (tid & 15);
      const float4 fj = *reinterpret_cast<const float4*>(fk + j), gj = *reinterpret_cast<const float4*>(gm + j);
      for (int i = tid >> 4; i < C; i += WY_THREADS / 16) {
        const float ri = bt[i] * fk[i], gi = gm[i];
        const float4 g = *reinterpret_cast<const float4*>(gkk + i * FT + j);
        const bool row = i < n;
        float4 v;
        v.x = row && j < i ? ri * fj.x * g.x * exp_ftz(gi - gj.x) : 0.f;
        v.y = row && j + 1 < i ? ri * fj.y * g.y * exp_ftz(gi - gj.y) : 0.f;
        v.z = row && j + 2 < i ? ri * fj.z * g.z * exp_ftz(gi - gj.z) : 0.f;
        v.w = row && j + 3 < i ? ri * fj.w * g.w * exp_ftz(gi - gj.w) : 0.f;
        *reinterpret_cast<float4*>(am + i * FT + j) = v;
      }
    }
    __syncthreads();
    // T = (I + A)⁻¹ in place of A, by blocks of 16 (the whole CTA; one thread per column of the
    // 64 took 2 × 64 dependent steps per head while the other warps waited at the barrier):
    // the diagonal blocks by forward substitution (thread = block, column), then block row
    // ib = 1..3: M_jb = Σ_{k ∈ [16jb, 16ib)} A[ib-row][k] T[k][jb-col] (into the T'_W tile's room,
    // free until the end), T_{ib,jb} = −T_{ib,ib} M_jb.
    if (tid < C) {
      const int bd = tid >> 4, col = tid & 15;
      const float* ab = am + 16 * bd * FT + 16 * bd;
      float x[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        float acc = 0.f;
#pragma unroll
        for (int k = 0; k < i; ++k) acc += ab[i * FT + k] * x[k];
        x[i] = i == col ? 1.0f : (i > col ? -acc : 0.0f);
      }
      __syncwarp();  // a block's 16 columns are one half-warp: all of its A read before T lands
#pragma unroll
      for (int i = 0; i < 16; ++i) am[(16 * bd + i) * FT + 16 * bd + col] = x[i];
    }
    {
      // Conv + SiLU of value head h's v channels, by every thread.
      const int vbase = 2 * G.keyDim + h * dv, cbase = g * G.grp + 2 * dk + hl * dv;
      auto chv = [&](int e) { return vbase + e; };
      auto colv = [&](int e) { return cbase + e; };
      conv_tile<P>(A, G, s, Pc, n, dv, vec, chv, colv, sm + L.v, vPlane, L.vt, tid, 0, WY_THREADS);
    }
    __syncthreads();
    float* mt = reinterpret_cast<float*>(sm + L.tw);  // ≤ 3 blocks of 16 × 16 f32
    // The block rows unrolled (ib a constant in each copy, so the loops below have fixed trips).
#pragma unroll
    for (int ib = 1; ib < 4; ++ib) {
      // Thread = (block jb, row rr, 4 columns cq..cq+3): float4 loads, 16 FMAs per 5 loads.
      const int jb = tid >> 6, rr = (tid >> 2) & 15, cq = (tid & 3) * 4;
      if (tid < 64 * ib) {
        const float* arow = am + (16 * ib + rr) * FT;
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int k = 0; k < 16 * ib; k += 4) {
          if (k < 16 * jb) continue;  // uniform per warp (jb = tid >> 6)
          const float4 av = *reinterpret_cast<const float4*>(arow + k);
          const float a4[4] = {av.x, av.y, av.z, av.w};
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            const float4 t = *reinterpret_cast<const float4*>(am + (k + u) * FT + 16 * jb + cq);
            acc.x += a4[u] * t.x;
            acc.y += a4[u] * t.y;
            acc.z += a4[u] * t.z;
            acc.w += a4[u] * t.w;
          }
        }
        *reinterpret_cast<float4*>(mt + jb * 256 + rr * 16 + cq) = acc;
      }
      __syncthreads();
      if (tid < 64 * ib) {
        // All 16 terms: T_{ib,ib} is zero above its diagonal (the forward substitution wrote
        // those zeros), so m > rr adds exact zeros; a loop to rr diverged within the warp.
        const float4* trow = reinterpret_cast<const float4*>(am + (16 * ib + rr) * FT + 16 * ib);
        const float4 t4[4] = {trow[0], trow[1], trow[2], trow[3]};
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int m = 0; m < 16; ++m) {
          const float t = m % 4 == 0 ? t4[m / 4].x : m % 4 == 1 ? t4[m / 4].y : m % 4 == 2 ? t4[m / 4].z : t4[m / 4].w;
          const float4 mv = *reinterpret_cast<const float4*>(mt + jb * 256 + m * 16 + cq);
          acc.x += t * mv.x;
          acc.y += t * mv.y;
          acc.z += t * mv.z;
          acc.w += t * mv.w;
        }
        *reinterpret_cast<float4*>(am + (16 * ib + rr) * FT + 16 * jb + cq) = make_float4(-acc.x, -acc.y, -acc.z, -acc.w);
      }
      __syncthreads();
    }
    {
      // T'_W = T diag(β e^γ f_k), T'_U = T diag(β) as bf16 planes (the A operands of W and U); a
      // thread's 4 columns are fixed (256 threads, 16 groups of 4 columns): a float4 of T in,
      // 8-byte pieces of each plane out (a column per thread stored 2-byte pieces: 9 % of the
      // kernel's instructions).
      const int j = 4 * (tid & 15);
      float cw[4], cu[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        cu[u] = bt[j + u];
        cw[u] = cu[u] * exp_ftz(gm[j + u]) * fk[j + u];
      }
      unsigned char* tw = sm + L.tw;
      unsigned char* tu = sm + L.tu;
      for (int i = tid >> 4; i < C; i += WY_THREADS / 16) {
        const float4 x = *reinterpret_cast<const float4*>(am + i * FT + j);
        uint32_t w01[2], w23[2], u01[2], u23[2];
        to_planes<P>(x.x * cw[0], x.y * cw[1], w01);
        to_planes<P>(x.z * cw[2], x.w * cw[3], w23);
        to_planes<P>(x.x * cu[0], x.y * cu[1], u01);
        to_planes<P>(x.z * cu[2], x.w * cu[3], u23);
        const int off = 2 * (i * CT + j);
        *reinterpret_cast<uint2*>(tw + off) = make_uint2(w01[0], w23[0]);
        *reinterpret_cast<uint2*>(tu + off) = make_uint2(u01[0], u23[0]);
        if (P == 2) {
          *reinterpret_cast<uint2*>(tw + tPlane + off) = make_uint2(w01[1], w23[1]);
          *reinterpret_cast<uint2*>(tu + tPlane + off) = make_uint2(u01[1], u23[1]);
        }
      }
    }
    __syncthreads();
    const uint32_t twh = saddr(sm + L.tw), twl = twh + tPlane;
    const uint32_t tuh = saddr(sm + L.tu), tul = tuh + tPlane;
    const uint32_t krh = saddr(sm + L.kr), krl = krh + dkPlane;
    const uint32_t qrh = saddr(sm + L.qr), qrl = qrh + dkPlane;
    const uint32_t vh = saddr(sm + L.v), vl = vh + vPlane;
    const int g8 = lane >> 2, t4 = lane & 3;
    const int rA = 16 * rb + g8, rB = rA + 8;  // rows of this thread's accumulators
    // W = T'_W K_raw: rows 16rb.., d_k columns 64cb.. (8 n-tiles); T' is lower triangular.
    {
      float acc[8][4];
#pragma unroll
      for (int a = 0; a < 8; ++a)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[a][e] = 0.f;
      for (int ks = 0; ks <= rb; ++ks) {
        uint32_t ah[4], al[4] = {0, 0, 0, 0};
        ldsm4(ah, a_addr(twh, CT, 16 * rb, 16 * ks, lane));
        if (P == 2) ldsm4(al, a_addr(twl, CT, 16 * rb, 16 * ks, lane));
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          uint32_t bh[4], bl[4] = {0, 0, 0, 0};
          ldsm4t(bh, bkn_addr(krh, DKT, 16 * ks, 64 * cb + 16 * np, lane));
          if (P == 2) ldsm4t(bl, bkn_addr(krl, DKT, 16 * ks, 64 * cb + 16 * np, lane));
          mmaP<P>(acc[2 * np], ah, al, bh[0], bh[1], bl[0], bl[1]);
          mmaP<P>(acc[2 * np + 1], ah, al, bh[2], bh[3], bl[2], bl[3]);
        }
      }
      st_block<P>(X.w + ((long long)h * A.rows + rowc + rA) * G.dks + 64 * cb + 2 * t4, X.wPlane, G.dks, acc, rA < n, rB < n,
                  G.dks - 64 * cb, t4);
    }
    // U = T'_U V: rows 16rb.., columns of half cb of dvp, 64 at a time.
    {
      const int half = G.dvp / 2;  // a multiple of 8
      for (int c0 = cb * half; c0 < (cb + 1) * half; c0 += 64) {
        const int ncols = min(64, (cb + 1) * half - c0);  // multiple of 8
        float acc[8][4];
#pragma unroll
        for (int a = 0; a < 8; ++a)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[a][e] = 0.f;
        for (int ks = 0; ks <= rb; ++ks) {
          uint32_t ah[4], al[4] = {0, 0, 0, 0};
          ldsm4(ah, a_addr(tuh, CT, 16 * rb, 16 * ks, lane));
          if (P == 2) ldsm4(al, a_addr(tul, CT, 16 * rb, 16 * ks, lane));
#pragma unroll
          for (int np = 0; np < 4; ++np) {
            if (16 * np < ncols) {
              // a pair of n-tiles; the second may lie past dvp when ncols % 16 == 8: it reads the
              // tile's zero padding columns (vt = dvp + 8) and is not stored.
              uint32_t bh[4], bl[4] = {0, 0, 0, 0};
              ldsm4t(bh, bkn_addr(vh, L.vt, 16 * ks, c0 + 16 * np, lane));
              if (P == 2) ldsm4t(bl, bkn_addr(vl, L.vt, 16 * ks, c0 + 16 * np, lane));
              mmaP<P>(acc[2 * np], ah, al, bh[0], bh[1], bl[0], bl[1]);
              mmaP<P>(acc[2 * np + 1], ah, al, bh[2], bh[3], bl[2], bl[3]);
            }
          }
        }
        st_block<P>(X.u + ((long long)h * A.rows + rowc + rA) * G.dvs + c0 + 2 * t4, X.uPlane, G.dvs, acc, rA < n, rB < n,
                    min(ncols, G.dvs - c0), t4);
      }
    }
    // A_qk = (Q_raw K_rawᵀ) ⊙ f_q,i f_k,j e^{γ_i − γ_j} for j ≤ i < n: rows 16rb.., cols 32cb..
    {
      float acc[4][4];
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[a][e] = 0.f;
      if (32 * cb <= 16 * rb + 15) {
        for (int ks = 0; ks < nks; ++ks) {
          uint32_t ah[4], al[4] = {0, 0, 0, 0};
          ldsm4(ah, a_addr(qrh, DKT, 16 * rb, 16 * ks, lane));
          if (P == 2) ldsm4(al, a_addr(qrl, DKT, 16 * rb, 16 * ks, lane));
#pragma unroll
          for (int np = 0; np < 2; ++np) {
            uint32_t bh[4], bl[4] = {0, 0, 0, 0};
            ldsm4(bh, bnk_addr(krh, DKT, 32 * cb + 16 * np, 16 * ks, lane));
            if (P == 2) ldsm4(bl, bnk_addr(krl, DKT, 32 * cb + 16 * np, 16 * ks, lane));
            mmaP<P>(acc[2 * np], ah, al, bh[0], bh[1], bl[0], bl[1]);
            mmaP<P>(acc[2 * np + 1], ah, al, bh[2], bh[3], bl[2], bl[3]);
          }
        }
      }
      // The row factors once, the column factors per n-tile; entries above the diagonal are
      // computed and selected away (as A above).
      const float fqr[2] = {fq[rA], fq[rB]}, gmr[2] = {gm[rA], gm[rB]};
      bf16_t* const qrow[2] = {X.aqk + ((long long)h * A.rows + rowc + rA) * C + 32 * cb + 2 * t4,
                               X.aqk + ((long long)h * A.rows + rowc + rB) * C + 32 * cb + 2 * t4};
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int j0 = 32 * cb + 8 * nt + 2 * t4;
        const float fk0 = fk[j0], fk1 = fk[j0 + 1], gm0 = gm[j0], gm1 = gm[j0 + 1];
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int i = hf ? rB : rA;
          if (i < n) {
            const float v0 = acc[nt][2 * hf] * fqr[hf] * fk0 * exp_ftz(gmr[hf] - gm0);
            const float v1 = acc[nt][2 * hf + 1] * fqr[hf] * fk1 * exp_ftz(gmr[hf] - gm1);
            st_pair<P>(qrow[hf], X.aqkPlane, 8 * nt, j0 <= i ? v0 : 0.f, j0 + 1 <= i ? v1 : 0.f);
          }
        }
      }
    }
    // Per-row scales.
    if (tid < n) {
      const int i = tid;
      float4 v = make_float4(fq[i] * expf(gm[i]), fk[i] * expf(gLast - gm[i]), gm[i], 0.f);
      *reinterpret_cast<float4*>(X.sc + ((long long)h * A.rows + rowc + i) * 4) = v;
    }
    __syncthreads();  // am, the T' tiles and the v tile are rewritten by the next head
  }
}

// ================================================================================================
// Kernel 2: the recurrence over chunks (+ gated RMSNorm)
// ================================================================================================

// Shared memory of gdn_prefill_scan (bytes; src/gdn-launch.ts mirrors it). mpc: m-groups (16
// columns of d_v) per CTA; ut = 16·mpc + 8: row stride of the U tile.
struct ScanLay {
  int qr, kr, w, aqk, u, sc, buf;  // offsets within one buffer; buf: bytes of a buffer
  int nbuf, xch, red, npart, z, total;
  int ut, zt;  // row strides: U tile (bf16), z tile (f32)
};
__host__ __device__ __forceinline__ ScanLay scan_lay(int P, int mpc, int cl) {
  ScanLay L;
  L.ut = 16 * mpc + 8;
  int o = 0;
  L.qr = o; o += P * C * DKT * 2;
  L.kr = o; o += P * C * DKT * 2;
  L.w = o; o += P * C * DKT * 2;
  L.aqk = o; o += P * C * CT * 2;
  L.u = o; o += P * C * L.ut * 2;
  L.sc = o; o += C * 16;
  L.buf = o;
  L.nbuf = P == 1 ? 2 : 1;
  o = L.nbuf * L.buf;
  L.xch = o; o += 2 * mpc * 48 * 32 * 4;
  L.red = o; o += mpc * C * 4;
  L.npart = o; o += 2 * cl * C * 4;
  // z of the CTA's columns for the fused norm, two chunks (by parity), prefetched a chunk ahead;
  // the unfused fast build stages a chunk's O in the first of the two (flush_o in scan_seq).
  L.zt = 16 * mpc + 4;
  L.z = o; o += 2 * C * L.zt * 4;
  L.total = o;
  return L;
}

// The fast build's copies at d_k = d_v = 128 with NT threads (256: 4 column groups per CTA, the
// clusters of 2; 128: 2 groups, the clusters of 4): a thread's piece and rows are fixed, and its
// copies of a tile are immediate offsets from one address pair (cp16i). With an address register
// per copy, every copy waited for the previous one to read its register (ncu: long-scoreboard
// stalls on the moves between them, the scan's largest line). Padding rows copy 0 bytes.
template <int NT>
__device__ __forceinline__ void scan_load_fast(const ScanLay& L, uint32_t sb, const Scratch& X, long long kRow, long long hRow, int n, int colU0,
                                               int tid) {
  constexpr int RP = NT / 16;                              // rows per pass of a 128-column tile
  constexpr int SR = 2 * RP * DKT, GR = 2 * RP * 128;       // bytes between a thread's rows
  const int q = tid & 15, i0 = tid >> 4;
  const bf16_t* qs = X.qr + (kRow + i0) * 128 + 8 * q;
  const bf16_t* ks = X.kr + (kRow + i0) * 128 + 8 * q;
  const bf16_t* ws = X.w + (hRow + i0) * 128 + 8 * q;
  const uint32_t tileOff = 2 * (i0 * DKT + 8 * q);
  static_for<C / RP>([&](auto mm) {
    constexpr int m = decltype(mm)::value;
    const int bytes = i0 + RP * m < n ? 16 : 0;
    cp16i<m * SR, m * GR>(sb + L.qr + tileOff, qs, bytes);
    cp16i<m * SR, m * GR>(sb + L.kr + tileOff, ks, bytes);
    cp16i<m * SR, m * GR>(sb + L.w + tileOff, ws, bytes);
  });
  // A_qk: 8 pieces a row; U: the CTA's NT / 4 columns, NT / 32 pieces a row.
  constexpr int RA = NT / 8, UP = NT / 32, RU = NT / UP, UT = NT / 4 + 8;
  const int q8 = tid & 7, i8 = tid >> 3;
  const bf16_t* as = X.aqk + (hRow + i8) * C + 8 * q8;
  static_for<C / RA>([&](auto mm) {
    constexpr int m = decltype(mm)::value;
    cp16i<m * 2 * RA * CT, m * 2 * RA * C>(sb + L.aqk + 2 * (i8 * CT + 8 * q8), as, i8 + RA * m < n ? 16 : 0);
  });
  const int qu = tid % UP, iu = tid / UP;
  const bf16_t* us = X.u + (hRow + iu) * 128 + colU0 + 8 * qu;
  static_for<C / RU>([&](auto mm) {
    constexpr int m = decltype(mm)::value;
    cp16i<m * 2 * RU * UT, m * 2 * RU * 128>(sb + L.u + 2 * (iu * UT + 8 * qu), us, iu + RU * m < n ? 16 : 0);
  });
  if (tid < C) cp16(sb + L.sc + 16 * tid, X.sc + (hRow + tid) * 4, tid < n ? 16 : 0);
}

// Issues the cp.async copies of chunk c's tiles into buffer `bufp` (one commit group). The loops
// have power-of-two trip shapes (row = idx >> 4 / >> 3, piece = idx & 15 / & 7): the copies of a
// chunk sit on the scan's serial path, where index divisions once cost more issue slots than
// its mma (ncu, 8 192 rows: integer ops ~55 % of the scan's instructions).
template <int P>
__device__ __forceinline__ void scan_load(const Args& A, const Geo& G, const Scratch& X, const ScanLay& L, unsigned char* bufp, int kg,
                                          int h, int rowc, int n, int colU0, int mpc, int tid, int nthr) {
  const uint32_t sb = saddr(bufp);
  const int dkp = G.dks / 8;  // pieces of a d_k row present in the scratch
  const int up = 2 * mpc;     // pieces of the U tile row (≤ 8)
  const int dkPlane = C * DKT * 2;
  const long long kRow = (long long)kg * A.rows + rowc, hRow = (long long)h * A.rows + rowc;
  if (P == 1 && dkp == 16 && G.dvs == 128 && ((nthr == 256 && up == 8) || (nthr == 128 && up == 4))) {
    if (nthr == 256) scan_load_fast<256>(L, sb, X, kRow, hRow, n, colU0, tid);
    else scan_load_fast<128>(L, sb, X, kRow, hRow, n, colU0, tid);
    cp_commit();
    return;
  }
#pragma unroll 1
  for (int p = 0; p < P; ++p) {
    // q, k, w: C rows × 16 pieces of 8 bf16 each (pieces ≥ dkp and rows ≥ n are zero-filled).
    const bf16_t* qs = X.qr + p * X.qrPlane + kRow * G.dks;
    const bf16_t* ks = X.kr + p * X.qrPlane + kRow * G.dks;
    const bf16_t* ws = X.w + p * X.wPlane + hRow * G.dks;
    for (int idx = tid; idx < 3 * C * 16; idx += nthr) {
      const int which = idx >> 10, i = (idx >> 4) & (C - 1), q = idx & 15;
      const bf16_t* base = which == 0 ? qs : which == 1 ? ks : ws;
      const int off = (which == 0 ? L.qr : which == 1 ? L.kr : L.w) + p * dkPlane + 2 * (i * DKT + 8 * q);
      const bool ok = i < n && q < dkp;
      cp16(sb + off, base + (ok ? i * G.dks + 8 * q : 0), ok ? 16 : 0);
    }
    // A_qk: C rows × 8 pieces.
    const bf16_t* as = X.aqk + p * X.aqkPlane + hRow * C;
    for (int idx = tid; idx < C * 8; idx += nthr) {
      const int i = idx >> 3, q = idx & 7;
      const bool ok = i < n;
      cp16(sb + L.aqk + p * C * CT * 2 + 2 * (i * CT + 8 * q), as + (ok ? i * C + 8 * q : 0), ok ? 16 : 0);
    }
    // U: C rows × `up` pieces of this CTA's columns (slots q ≥ up of the 8 are skipped).
    const bf16_t* us = X.u + p * X.uPlane + hRow * G.dvs;
    for (int idx = tid; idx < C * 8; idx += nthr) {
      const int i = idx >> 3, q = idx & 7;
      if (q >= up) continue;
      const int col = colU0 + 8 * q;
      const bool ok = i < n && col < G.dvs;
      cp16(sb + L.u + p * C * L.ut * 2 + 2 * (i * L.ut + 8 * q), us + (ok ? i * G.dvs + col : 0), ok ? 16 : 0);
    }
  }
  // Per-row scales (f32 × 4).
  if (tid < C) {
    const float* src = X.sc + (hRow + min(tid, n - 1)) * 4;
    cp16(sb + L.sc + 16 * tid, src, tid < n ? 16 : 0);
  }
  cp_commit();
}

// Gated RMSNorm of a chunk's own rows of one warp (fused mode, after the cluster barrier):
// y = w ⊙ o / √(mean(o²) + eps) ⊙ SiLU(z), the row's Σo² summed over the cluster's partials.
template <int CL>
__device__ __forceinline__ void finalize_rows(const Args& A, const float (&op)[4][4], const float* np_, const float* zt, int ztStride, int prevRow,
                                              int prevN, int hh, int t4, int g8, int j0, int cl0, int h, float nw0, float nw1) {
  const int dv = A.dv;
#pragma unroll
  for (int q = 0; q < 4; ++q)
#pragma unroll
    for (int e2 = 0; e2 < 2; ++e2) {
      const int rr = 32 * hh + 8 * q + 2 * t4 + e2;
      if (rr < prevN) {
        float ss = 0.f;
#pragma unroll
        for (int k = 0; k < CL; ++k) ss += np_[k * C + rr];
        const float inv = 1.0f / sqrtf(ss / (float)dv + A.eps);
        const size_t row = (size_t)(prevRow + rr);
        const float* zr = zt + rr * ztStride + cl0;  // z of columns j0 + g8 (+8), from shared memory
        float* yr = A.y + row * (size_t)A.hv * dv + (size_t)h * dv;
        if (j0 + g8 < dv) yr[j0 + g8] = nw0 * op[q][e2] * inv * siluf_(zr[0]);
        if (j0 + g8 + 8 < dv) yr[j0 + g8 + 8] = nw1 * op[q][2 + e2] * inv * siluf_(zr[8]);
      }
    }
}

template <int P, int CL>
__device__ __forceinline__ void scan_seq(const Args& A) {
  const Geo G = geo_of(A);
  const int t = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int nthr = blockDim.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int mpc = nthr / 64;
  if (b >= A.batch || h >= A.hv) return;
  const bool fused = A.fuseNorm != 0;
  if (fused && (!has_clusters() || gridDim.x != CL)) __trap();
  Seq s;
  if (!seq_of(A, b, s)) return;  // the whole cluster: same (h, b)
  const int nPend = s.P0 - s.L;
  if (s.nrows <= 0 && nPend <= 0) return;
  // This launch's chunks [cb, ce) (a pipelined prefill runs the scan in pieces, launchPrefill): the
  // first piece folds the pending rows, the last writes the ring, each reads and writes the state.
  // (launch_chunks' range, with cb = chunk0 once past the test: the exact scans, at 255
  // registers, spilled with the helper's clipped copy.)
  const int nch = (s.nrows + C - 1) / C;
  const int cb = A.chunk0, ce = min(nch, A.chunkEnd);
  if (cb > 0 && cb >= nch) return;
  const int dk = A.dk, dv = A.dv;
  const int kg = h / G.r;
  const ScanLay L = scan_lay(P, mpc, CL);
  unsigned char* sm = dyn_smem();
  const Scratch X = scratch_of<P>(A, G);
  const unsigned rank = fused ? cluster_rank() : 0u;
  if (fused) {
    // Every CTA of the cluster runs before any writes into another's shared memory.
    cluster_arrive();
    cluster_wait();
  }

  // Ring: positions [max(L, end − K), end) from the conv stash / the step's rows, spread over the
  // sequence's CTAs (nothing in this kernel reads the ring; gdn_prefill_wy, before it, did).
  if (ce == nch) {
    const int end = s.P0 + s.nrows, pa = max(s.L, end - A.K);
    const int npos = end - pa;
    if (npos > 0) {
      const int ctas = gridDim.x * A.hv, me = h * gridDim.x + t;
      for (int idx = me * nthr + tid; idx < npos * G.convDim; idx += ctas * nthr) {
        const int pi = idx / G.convDim, c = idx - pi * G.convDim;
        int col;
        if (c < G.keyDim) col = (c / dk) * G.grp + c % dk;
        else if (c < 2 * G.keyDim) col = ((c - G.keyDim) / dk) * G.grp + dk + (c - G.keyDim) % dk;
        else {
          const int cv = c - 2 * G.keyDim, hh = cv / dv, j = cv - hh * dv;
          col = (hh / G.r) * G.grp + 2 * dk + (hh % G.r) * dv + j;
        }
        const int p = pa + pi;
        A.convRing[((size_t)s.slot * A.K + (p % A.K)) * G.convDim + c] = conv_in(A, G, s, c, col, p);
      }
    }
  }

  const int ml = warp >> 1, hh = warp & 1;
  const int mg = t * mpc + ml;
  const int j0 = 16 * mg;  // first d_v column of this warp
  const int g8 = lane >> 2, t4 = lane & 3;
  const int colU0 = 16 * mpc * t;  // first d_v column of this CTA
  float* Shead = A.state + ((size_t)s.slot * A.hv + h) * (size_t)dk * dv;

  // S^T fragment: s[nt][e] = S[i][j], i = 64hh + 8nt + 2t4 + (e & 1), j = j0 + g8 + 8(e >> 1).
  float sf[8][4];
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = 64 * hh + 8 * nt + 2 * t4 + (e & 1), j = j0 + g8 + 8 * (e >> 1);
      sf[nt][e] = (i < dk && j < dv) ? Shead[(size_t)i * dv + j] : 0.f;
    }
  // Pending carried rows: S ← e^{γ_{n−1}} S + Σ_t e^{γ_{n−1} − γ_t} k_t u_tᵀ (stash, KERNELS.md).
  if (nPend > 0 && cb == 0) {
    const float* sh = A.stash + (size_t)s.slot * G.stashSeq + (size_t)h * A.maxK * G.stashRow;
    const float gl = sh[(size_t)(nPend - 1) * G.stashRow + dk + dv];
    const float E = expf(gl);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) sf[nt][e] *= E;
    for (int tt = 0; tt < nPend; ++tt) {
      const float* row = sh + (size_t)tt * G.stashRow;
      const float wgt = expf(gl - row[dk + dv]);
      const float u0 = j0 + g8 < dv ? wgt * row[dk + j0 + g8] : 0.f;
      const float u1 = j0 + g8 + 8 < dv ? wgt * row[dk + j0 + g8 + 8] : 0.f;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e2 = 0; e2 < 2; ++e2) {
          const int i = 64 * hh + 8 * nt + 2 * t4 + e2;
          const float k = i < dk ? row[i] : 0.f;
          sf[nt][e2] += k * u0;
          sf[nt][2 + e2] += k * u1;
        }
    }
  }

  const int zc0 = z_col(A, G, h);
  const size_t yStride = (size_t)A.hv * dv;
  float* red = reinterpret_cast<float*>(sm + L.red);
  float* npart = reinterpret_cast<float*>(sm + L.npart);
  float* xw = reinterpret_cast<float*>(sm + L.xch) + warp * 48 * 32;
  const float* xp = reinterpret_cast<const float*>(sm + L.xch) + (warp ^ 1) * 48 * 32;
  const float nw0 = j0 + g8 < dv ? A.normWeight[j0 + g8] : 0.f;
  const float nw1 = j0 + g8 + 8 < dv ? A.normWeight[j0 + g8 + 8] : 0.f;

  // The previous chunk's O (own rows), finalised one chunk late in fused mode.
  float op[4][4];
  int prevRow = 0, prevN = 0;

  // z of chunk cc's rows, this CTA's columns, into z slot cc & 1 (fused mode): cp.async, committed
  // with the next group; it lands a chunk before the finalize that reads it.
  float* ztile = reinterpret_cast<float*>(sm + L.z);
  const bool zVec = (zc0 % 4 == 0) && (G.width % 4 == 0) && (colU0 % 4 == 0);
  auto issue_z = [&](int cc) {
    const int rowz = s.row0 + cc * C, nz = min(C, s.nrows - cc * C);
    float* slot = ztile + (cc & 1) * C * L.zt;
    const int pieces = 4 * mpc;  // 16-byte pieces of a row (16·mpc columns, ≤ 16 slots)
    for (int idx = tid; idx < C * 16; idx += nthr) {
      const int i = idx >> 4, q = idx & 15;
      if (q >= pieces) continue;
      const int col = colU0 + 4 * q;
      const float* src = A.qkvz + (size_t)(rowz + min(i, nz - 1)) * G.width + zc0;
      if (zVec) {
        const bool ok = i < nz && col < dv;
        cp16(saddr(slot + i * L.zt + 4 * q), src + (ok ? col : 0), ok ? 16 : 0);
      } else {
#pragma unroll
        for (int u = 0; u < 4; ++u) slot[i * L.zt + 4 * q + u] = (i < nz && col + u < dv) ? src[col + u] : 0.f;
      }
    }
  };
  const int cl0 = 16 * ml + g8;  // this thread's first column within the CTA's tiles
  // Unfused fast build: a chunk's O goes through a staging tile (the z tiles' room, unused there) and
  // leaves in whole rows: 16-byte stores of the CTA's 16·mpc columns (the fragments' scalar stores
  // with their row addresses were a fifth of the scan's stall samples).
  float* ostage = ztile;
  const int ocols = min(16 * mpc, dv - colU0);  // this CTA's columns of y
  auto flush_o = [&]() {
    float* ybase = A.y + (size_t)prevRow * yStride + (size_t)h * dv + colU0;
    if ((dv & 3) == 0) {
      // Thread: piece f = tid & 15 of rows tid >> 4 + k·nthr/16 (one pointer, advanced by rows).
      const int per = (ocols + 3) >> 2, f = tid & 15, rstep = nthr >> 4;  // float4 pieces of a row
      if (f < per) {
        float* yp = ybase + (size_t)(tid >> 4) * yStride + 4 * f;
        const size_t ystep = (size_t)rstep * yStride;
        for (int r = tid >> 4; r < prevN; r += rstep, yp += ystep)
          *reinterpret_cast<float4*>(yp) = *reinterpret_cast<const float4*>(ostage + r * L.zt + 4 * f);
      }
    } else {
      for (int idx = tid; idx < C * 64; idx += nthr) {
        const int r = idx >> 6, cc = idx & 63;
        if (r < prevN && cc < ocols) ybase[(size_t)r * yStride + cc] = ostage[r * L.zt + cc];
      }
    }
  };
  if (fused && ce > cb) issue_z(cb);
  if (ce > cb) scan_load<P>(A, G, X, L, sm + (L.nbuf == 2 ? (cb & 1) * L.buf : 0), kg, h, s.row0 + cb * C, min(C, s.nrows - cb * C), colU0, mpc, tid, nthr);
  for (int c = cb; c < ce; ++c) {
    const int rowc = s.row0 + c * C, n = min(C, s.nrows - c * C);
    unsigned char* cur = sm + (L.nbuf == 2 ? (c & 1) * L.buf : 0);
    if (L.nbuf == 2) {
      // Chunk c landed (issued a chunk ago); after the barrier every thread is done with chunk
      // c − 1's buffer, which takes chunk c + 1 now.
      cp_wait<0>();
      __syncthreads();
      if (c + 1 < ce) scan_load<P>(A, G, X, L, sm + ((c + 1) & 1) * L.buf, kg, h, rowc + C, min(C, s.nrows - (c + 1) * C), colU0, mpc, tid, nthr);
    } else {
      if (c > cb) scan_load<P>(A, G, X, L, sm, kg, h, rowc, n, colU0, mpc, tid, nthr);
      cp_wait<0>();
      __syncthreads();
    }
    const uint32_t qh = saddr(cur + L.qr), kh = saddr(cur + L.kr), wh = saddr(cur + L.w), ah_ = saddr(cur + L.aqk);
    const int dkPlane = C * DKT * 2;
    const float4* scv = reinterpret_cast<const float4*>(cur + L.sc);

    // Phase 1: X^T_part = S^T W^T, P^T_part = S^T Q^T over this warp's d_k half.
    float px[8][4], po[8][4];
#pragma unroll
    for (int a = 0; a < 8; ++a)
#pragma unroll
      for (int e = 0; e < 4; ++e) px[a][e] = po[a][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      uint32_t ah[4], al[4] = {0, 0, 0, 0};
      if (P == 1) {
        ah[0] = pack2(sf[2 * ks][0], sf[2 * ks][1]);
        ah[1] = pack2(sf[2 * ks][2], sf[2 * ks][3]);
        ah[2] = pack2(sf[2 * ks + 1][0], sf[2 * ks + 1][1]);
        ah[3] = pack2(sf[2 * ks + 1][2], sf[2 * ks + 1][3]);
      } else {
        split2(sf[2 * ks][0], sf[2 * ks][1], ah[0], al[0]);
        split2(sf[2 * ks][2], sf[2 * ks][3], ah[1], al[1]);
        split2(sf[2 * ks + 1][0], sf[2 * ks + 1][1], ah[2], al[2]);
        split2(sf[2 * ks + 1][2], sf[2 * ks + 1][3], ah[3], al[3]);
      }
      const int k0 = 64 * hh + 16 * ks;
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t bh[4], bl[4] = {0, 0, 0, 0};
        ldsm4(bh, bnk_addr(wh, DKT, 16 * np, k0, lane));
        if (P == 2) ldsm4(bl, bnk_addr(wh + dkPlane, DKT, 16 * np, k0, lane));
        mmaP<P>(px[2 * np], ah, al, bh[0], bh[1], bl[0], bl[1]);
        mmaP<P>(px[2 * np + 1], ah, al, bh[2], bh[3], bl[2], bl[3]);
        ldsm4(bh, bnk_addr(qh, DKT, 16 * np, k0, lane));
        if (P == 2) ldsm4(bl, bnk_addr(qh + dkPlane, DKT, 16 * np, k0, lane));
        mmaP<P>(po[2 * np], ah, al, bh[0], bh[1], bl[0], bl[1]);
        mmaP<P>(po[2 * np + 1], ah, al, bh[2], bh[3], bl[2], bl[3]);
      }
    }
    // The previous chunk's O leaves after phase 1, its loads overlapping the mma tail (at the
    // chunk's start they stalled the warps before any mma issued: 466 → 433 µs for 8 192 rows).
    if (P == 1 && !fused && c > cb) flush_o();
    // The previous chunk's rows: every CTA of the cluster has added its Σo² (fused mode).
    if (fused && c > cb) {
      cluster_wait();
      finalize_rows<CL>(A, op, npart + ((c - 1) & 1) * CL * C, ztile + ((c - 1) & 1) * C * L.zt, L.zt, prevRow, prevN, hh, t4, g8, j0, cl0, h,
                        nw0, nw1);
    }
    // Swap halves with the partner warp: a fragment's 4 values as one float4 per lane (slots 0..7:
    // X^T, 8..11: the partner's rows of P^T), lane-major, so a warp's 16-byte accesses do not conflict.
    float4* xw4 = reinterpret_cast<float4*>(xw);
    const float4* xp4 = reinterpret_cast<const float4*>(xp);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) xw4[nt * 32 + lane] = make_float4(px[nt][0], px[nt][1], px[nt][2], px[nt][3]);
#pragma unroll
    for (int q = 0; q < 4; ++q)  // (selects, not a reference: a runtime-chosen array would live in local memory)
      xw4[(8 + q) * 32 + lane] = hh ? make_float4(po[q][0], po[q][1], po[q][2], po[q][3]) : make_float4(po[4 + q][0], po[4 + q][1], po[4 + q][2], po[4 + q][3]);
    __syncthreads();
    // z of the next chunk into the slot the finalize above just read (every thread is past it).
    if (fused && c + 1 < ce) issue_z(c + 1);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const float4 v = xp4[nt * 32 + lane];
      px[nt][0] += v.x;
      px[nt][1] += v.y;
      px[nt][2] += v.z;
      px[nt][3] += v.w;
    }
    float o[4][4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float4 v = xp4[(8 + q) * 32 + lane];
      o[q][0] = (hh ? po[4 + q][0] : po[q][0]) + v.x;
      o[q][1] = (hh ? po[4 + q][1] : po[q][1]) + v.y;
      o[q][2] = (hh ? po[4 + q][2] : po[q][2]) + v.z;
      o[q][3] = (hh ? po[4 + q][3] : po[q][3]) + v.w;
    }

    // V_new^T = U^T − X^T (in px), the per-row scales, and O^T = P^T diag(qs) for own rows.
    {
      // U^T in X^T's fragment layout by ldmatrix .trans (the tile is [chunk row][column]): matrix
      // l >> 3 of lane l is rows 8(nt + (l >> 4)).., columns 16·ml + 8((l >> 3) & 1)..; each
      // register then holds rows 2t4, 2t4 + 1 of column g8.
      const uint32_t uh = saddr(cur + L.u);
      const int uPlaneB = C * L.ut * 2;
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        const uint32_t a = uh + 2 * ((16 * np + 8 * (lane >> 4) + (lane & 7)) * L.ut + 16 * ml + 8 * ((lane >> 3) & 1));
        uint32_t r[4], rl[4] = {0, 0, 0, 0};
        ldsm4t(r, a);
        if (P == 2) ldsm4t(rl, a + uPlaneB);
#pragma unroll
        for (int h2 = 0; h2 < 2; ++h2) {
          const int nt = 2 * np + h2;
          px[nt][0] = bf_lo(r[2 * h2]) + bf_lo(rl[2 * h2]) - px[nt][0];
          px[nt][1] = bf_hi(r[2 * h2]) + bf_hi(rl[2 * h2]) - px[nt][1];
          px[nt][2] = bf_lo(r[2 * h2 + 1]) + bf_lo(rl[2 * h2 + 1]) - px[nt][2];
          px[nt][3] = bf_hi(r[2 * h2 + 1]) + bf_hi(rl[2 * h2 + 1]) - px[nt][3];
        }
      }
#pragma unroll
      for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int rr = 32 * hh + 8 * q + 2 * t4 + (e & 1);
          o[q][e] *= scv[rr].x;
        }
    }
    // O^T (own rows) += V_new^T A_qk^T; A_qk is lower triangular (skip k-steps past the rows).
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      if (16 * ks > 32 * hh + 31) continue;
      uint32_t ah[4], al[4] = {0, 0, 0, 0};
      if (P == 1) {
        ah[0] = pack2(px[2 * ks][0], px[2 * ks][1]);
        ah[1] = pack2(px[2 * ks][2], px[2 * ks][3]);
        ah[2] = pack2(px[2 * ks + 1][0], px[2 * ks + 1][1]);
        ah[3] = pack2(px[2 * ks + 1][2], px[2 * ks + 1][3]);
      } else {
        split2(px[2 * ks][0], px[2 * ks][1], ah[0], al[0]);
        split2(px[2 * ks][2], px[2 * ks][3], ah[1], al[1]);
        split2(px[2 * ks + 1][0], px[2 * ks + 1][1], ah[2], al[2]);
        split2(px[2 * ks + 1][2], px[2 * ks + 1][3], ah[3], al[3]);
      }
#pragma unroll
      for (int qp = 0; qp < 2; ++qp) {
        const int r0 = 32 * hh + 16 * qp;
        if (16 * ks > r0 + 15) continue;
        uint32_t bh[4], bl[4] = {0, 0, 0, 0};
        ldsm4(bh, bnk_addr(ah_, CT, r0, 16 * ks, lane));
        if (P == 2) ldsm4(bl, bnk_addr(ah_ + C * CT * 2, CT, r0, 16 * ks, lane));
        mmaP<P>(o[2 * qp], ah, al, bh[0], bh[1], bl[0], bl[1]);
        mmaP<P>(o[2 * qp + 1], ah, al, bh[2], bh[3], bl[2], bl[3]);
      }
    }
    // S^T ← e^{γ_C} S^T + (V_new^T diag(ks)) K_raw (own d_k half).
    {
      const float decay = expf(scv[n - 1].z);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) sf[nt][e] *= decay;
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        const float k0a = scv[16 * ks + 2 * t4].y, k0b = scv[16 * ks + 2 * t4 + 1].y;
        const float k1a = scv[16 * ks + 8 + 2 * t4].y, k1b = scv[16 * ks + 8 + 2 * t4 + 1].y;
        uint32_t ah[4], al[4] = {0, 0, 0, 0};
        if (P == 1) {
          ah[0] = pack2(px[2 * ks][0] * k0a, px[2 * ks][1] * k0b);
          ah[1] = pack2(px[2 * ks][2] * k0a, px[2 * ks][3] * k0b);
          ah[2] = pack2(px[2 * ks + 1][0] * k1a, px[2 * ks + 1][1] * k1b);
          ah[3] = pack2(px[2 * ks + 1][2] * k1a, px[2 * ks + 1][3] * k1b);
        } else {
          split2(px[2 * ks][0] * k0a, px[2 * ks][1] * k0b, ah[0], al[0]);
          split2(px[2 * ks][2] * k0a, px[2 * ks][3] * k0b, ah[1], al[1]);
          split2(px[2 * ks + 1][0] * k1a, px[2 * ks + 1][1] * k1b, ah[2], al[2]);
          split2(px[2 * ks + 1][2] * k1a, px[2 * ks + 1][3] * k1b, ah[3], al[3]);
        }
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          uint32_t bh[4], bl[4] = {0, 0, 0, 0};
          ldsm4t(bh, bkn_addr(kh, DKT, 16 * ks, 64 * hh + 16 * np, lane));
          if (P == 2) ldsm4t(bl, bkn_addr(kh + dkPlane, DKT, 16 * ks, 64 * hh + 16 * np, lane));
          mmaP<P>(sf[2 * np], ah, al, bh[0], bh[1], bl[0], bl[1]);
          mmaP<P>(sf[2 * np + 1], ah, al, bh[2], bh[3], bl[2], bl[3]);
        }
      }
    }
    // Output of this chunk's own rows.
    if (fused) {
      // Σo² over this warp's 16 columns → red[ml][row]; the CTA's sum → every cluster CTA's npart.
#pragma unroll
      for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int e2 = 0; e2 < 2; ++e2) {
          float v = o[q][e2] * o[q][e2] + o[q][2 + e2] * o[q][2 + e2];
          v += __shfl_xor_sync(0xffffffffu, v, 4);
          v += __shfl_xor_sync(0xffffffffu, v, 8);
          v += __shfl_xor_sync(0xffffffffu, v, 16);
          if (g8 == 0) red[ml * C + 32 * hh + 8 * q + 2 * t4 + e2] = v;
        }
      __syncthreads();
      if (tid < C) {
        float v = 0.f;
        for (int m = 0; m < mpc; ++m) v += red[m * C + tid];
        const uint32_t a = saddr(npart + ((c & 1) * CL + rank) * C + tid);
#pragma unroll
        for (int k = 0; k < CL; ++k) st_cluster(a, (unsigned)k, v);
      }
      cluster_arrive();
#pragma unroll
      for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int e = 0; e < 4; ++e) op[q][e] = o[q][e];
      prevRow = rowc;
      prevN = n;
    } else if (P == 1) {
      // Raw o (gdn_prefill_norm applies the gated RMSNorm) into the staging tile; the next
      // chunk's first barrier orders it before flush_o's reads (after that chunk's phase 1), the
      // swap barrier orders those reads before the next write.
#pragma unroll
      for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int e = 0; e < 4; ++e) ostage[(32 * hh + 8 * q + 2 * t4 + (e & 1)) * L.zt + cl0 + 8 * (e >> 1)] = o[q][e];
      prevRow = rowc;
      prevN = n;
    } else {
      // The exact build stores its fragments directly (the staging's registers cost it spills).
#pragma unroll
      for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int e2 = 0; e2 < 2; ++e2) {
          const int rr = 32 * hh + 8 * q + 2 * t4 + e2;
          if (rr < n) {
            float* yr = A.y + (size_t)(rowc + rr) * yStride + (size_t)h * dv;
            if (j0 + g8 < dv) yr[j0 + g8] = o[q][e2];
            if (j0 + g8 + 8 < dv) yr[j0 + g8 + 8] = o[q][2 + e2];
          }
        }
    }
    if (L.nbuf == 1) __syncthreads();  // every read of the single buffer is done before the next load
  }
  if (fused && ce > cb) {
    cp_commit();
    cp_wait<0>();  // z of the last chunk
    __syncthreads();
    cluster_wait();
    finalize_rows<CL>(A, op, npart + ((ce - 1) & 1) * CL * C, ztile + ((ce - 1) & 1) * C * L.zt, L.zt, prevRow, prevN, hh, t4, g8, j0, cl0,
                      h, nw0, nw1);
  }
  if (P == 1 && !fused && ce > cb) {
    __syncthreads();
    flush_o();
  }
  // The state, once.
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = 64 * hh + 8 * nt + 2 * t4 + (e & 1), j = j0 + g8 + 8 * (e >> 1);
      if (i < dk && j < dv) Shead[(size_t)i * dv + j] = sf[nt][e];
    }
}

// ================================================================================================
// Kernel 3: gated RMSNorm of y in place (after a scan with fuseNorm = 0). One CTA per step row.
// ================================================================================================
// The step row of norm CTA x in a piece (KERNELS.md "Pieces") and its batch position b: the rows
// of the launch's chunks of each sequence, in batch order; false past them.
__device__ __forceinline__ bool piece_row(const Args& A, int x, int& row, int& b) {
  for (int i = 0; i < A.batch; ++i) {
    const int r0 = A.rowStarts[i], n = A.rowStarts[i + 1] - r0;
    int lo, hi;
    launch_chunks(A, n, lo, hi);
    const int rlo = C * lo, rhi = min(n, C * hi);  // rows of the chunks (the last may be short)
    if (x < rhi - rlo) {
      row = r0 + rlo + x;
      b = i;
      return true;
    }
    x -= max(0, rhi - rlo);
  }
  return false;
}

// The batch position b of a step row (rowStarts ascending); false past the step's rows.
__device__ __forceinline__ bool row_position(const Args& A, int row, int& b) {
  if (row >= A.rows || row >= A.rowStarts[A.batch]) return false;
  int lo = 0, hi = A.batch;  // find b with rowStarts[b] ≤ row < rowStarts[b + 1]
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (A.rowStarts[mid] <= row) lo = mid;
    else hi = mid;
  }
  while (lo < A.batch && A.rowStarts[lo + 1] <= row) ++lo;  // empty positions
  b = lo;
  return lo < A.batch;
}

__device__ __forceinline__ void norm_row(const Args& A) {
  const Geo G = geo_of(A);
  // A whole step: CTA x takes row x; a piece: the x-th row of its chunks. Padding positions' rows
  // are left alone.
  const bool whole = A.chunk0 == 0 && (long long)C * A.chunkEnd >= A.rows;
  int row = blockIdx.x, b;
  if (!(whole ? row_position(A, row, b) : piece_row(A, blockIdx.x, row, b)) || A.slots[b] < 0) return;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int dk = A.dk, dv = A.dv;
  float* yrow = A.y + (size_t)row * A.hv * dv;
  const float* zrow = A.qkvz + (size_t)row * G.width;  // + z_col(h): z of head h
  if (dv == 128 && dk % 2 == 0 && G.width % 4 == 0 && G.grp % 4 == 0) {
    // A float4 of y and z per lane and head; a warp loads its heads NH at a time before any store
    // (y is read and written in place: the compiler cannot hoist the next head's loads itself).
    constexpr int NH = 4;
    const float4 w4 = reinterpret_cast<const float4*>(A.normWeight)[lane];
    for (int h0 = warp; h0 < A.hv; h0 += NH * nw) {
      float4 yv[NH], zv[NH];
#pragma unroll
      for (int u = 0; u < NH; ++u) {
        const int h = h0 + u * nw;
        if (h < A.hv) {
          yv[u] = reinterpret_cast<const float4*>(yrow + (size_t)h * dv)[lane];
          zv[u] = reinterpret_cast<const float4*>(zrow + z_col(A, G, h))[lane];
        }
      }
#pragma unroll
      for (int u = 0; u < NH; ++u) {
        const int h = h0 + u * nw;
        if (h >= A.hv) continue;
        const float4 v = yv[u], z = zv[u];
        float ss = v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        const float inv = 1.0f / sqrtf(ss / (float)dv + A.eps);
        reinterpret_cast<float4*>(yrow + (size_t)h * dv)[lane] =
            make_float4(w4.x * v.x * inv * siluf_(z.x), w4.y * v.y * inv * siluf_(z.y), w4.z * v.z * inv * siluf_(z.z),
                        w4.w * v.w * inv * siluf_(z.w));
      }
    }
    return;
  }
  for (int h = warp; h < A.hv; h += nw) {
    float* yr = yrow + (size_t)h * dv;
    float ss = 0.f;
    for (int j = lane; j < dv; j += 32) ss += yr[j] * yr[j];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float inv = 1.0f / sqrtf(ss / (float)dv + A.eps);
    const float* zr = zrow + z_col(A, G, h);
    for (int j = lane; j < dv; j += 32) yr[j] = A.normWeight[j] * yr[j] * inv * siluf_(zr[j]);
  }
}

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
  const float *qkvz, const float *ba, float *y, const int32_t *slots, const int32_t *rowStarts, const int32_t *seqLens, float *state, \
      float *convRing, const float *convWeight, const float *aLog, const float *dtBias, const float *normWeight, const float *stash,  \
      const float *convStash, const uint32_t *pending, unsigned char *scratch, int batch, int rows, int hk, int hv, int dk, int dv,   \
      int convK, int maxK, float eps, int fuseNorm, int chunk0, int chunkEnd
#define GDNP_ARGS                                                                                                                     \
  gdnp::Args A {                                                                                                                      \
    qkvz, ba, y, slots, rowStarts, seqLens, state, convRing, convWeight, aLog, dtBias, normWeight, stash, convStash, pending, scratch, \
        batch, rows, hk, hv, dk, dv, convK, maxK, eps, fuseNorm, chunk0, chunkEnd                                                     \
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
// Launch: grid [CL·ceil(ceil(d_v/16)/(4·CL)), H_v, batch] (clusters of CL along x on sm_90: CL = 2
// for gdn_prefill_scan[_x3], 4 for gdn_prefill_scan_c4[_x3]), 64·mpc threads (mpc =
// ceil(ceil(d_v/16) / grid.x) ≤ 4), scan_lay(P, mpc, CL).total bytes; fuseNorm only when grid.x = CL
// (one cluster holds the whole head).
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
extern "C" __global__ void GDNP_CLUSTER(4) __launch_bounds__(256, 1) gdn_prefill_scan_c4(GDNP_PARAMS) {
  const GDNP_ARGS;
  gdnp::check_shape(A);
  gdnp::let_next_kernel_start();  // the next piece's WY kernel (a pipelined prefill)
  gdnp::scan_seq<1, 4>(A);
}
extern "C" __global__ void GDNP_CLUSTER(4) __launch_bounds__(256, 1) gdn_prefill_scan_c4_x3(GDNP_PARAMS) {
  const GDNP_ARGS;
  gdnp::check_shape(A);
  gdnp::let_next_kernel_start();  // the next piece's WY kernel (a pipelined prefill)
  gdnp::scan_seq<2, 4>(A);
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
