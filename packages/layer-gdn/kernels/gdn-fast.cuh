// Gated DeltaNet decode / verify / fold, the fast kernels (gdn_recurrent*, gdn_fold* entry points
// in gdn-recurrent.cu and gdn-fold.cu). Layouts and semantics: ../KERNELS.md.
//
// Launch: grid [batch, H_v] (or any grid of at least batch·H_v CTAs), a block of d_v threads (at
// least d_v), and the dynamic shared memory of fast_smem_floats() (gdn-launch.ts computes the
// same). Supported: what check_shape() takes, plus maxK ≤ 8 and conv K ≤ 4 (else the kernel traps;
// the layer then runs the legacy kernels).
//
// The math (value head h, column j of S; everything per column is independent but the gated
// RMSNorm of y). For the rows t < T of a block entering with state S (after any pending rows):
//   a_t = Sᵀk̂_t, b_t = Sᵀq̂_t                     (one pass over S: 2T dot products per column)
//   Γ_t = Σ_{r≤t} g_r, A_t = e^{Γ_t}
//   u_t = β_t (v_t − A_t a_t − Σ_{s<t} e^{Γ_t−Γ_s} (k̂_s·k̂_t) u_s)
//   o_t = A_t b_t + Σ_{s≤t} e^{Γ_t−Γ_s} (k̂_s·q̂_t) u_s
//   S'  = A_{T−1} S + Σ_t e^{Γ_{T−1}−Γ_t} k̂_t u_tᵀ    (commit: a second pass)
// which is the row-by-row recurrence S_t = α_t S_{t−1} + k̂_t u_tᵀ, u_t = β_t (v_t − α_t S_{t−1}ᵀk̂_t),
// o_t = S_tᵀq̂_t unrolled (S_tᵀx = A_t Sᵀx + Σ_{s≤t} e^{Γ_t−Γ_s} u_s (k̂_s·x)). The Gram entries
// k̂_s·k̂_t, k̂_s·q̂_t and the norms are per key head (warps of the CTA, in the prologue). Pending
// rows (carried mode, or the fold kernel's accepted rows) enter as S ← E S + Σ_m k̂_m (w_m u_m)ᵀ,
// applied element by element inside the same pass. So:
//   decode            read S, write S (2 passes over the CTA's copy of S)
//   verify (WOA)      read S (1 pass)
//   carried verify    read S, write S folded (1 pass: fold, write, dot products)
//   carried decode    read S, write S (2 passes)
//   fold (WOA)        read S, write S (1 pass)
// Multi-row commits (k ≥ 2 in mode 0: tests and the prefill oracle) run blocks of up to
// min(8, maxK) rows, each committing before the next.
//
// Where S lives between its load and the passes is the variant (the Src classes below):
//   smem    the CTA copies its head's S (64 KiB at the 80B shape) into shared memory with the
//           copy engine right after it knows its slot: one cp.async.bulk per quarter of the rows,
//           each completing on its own mbarrier (sm_90), or cp.async 16-byte copies (sm_80, or
//           -DGDN_SMEM_CPASYNC); the prologue (conv over ring / conv stash / the step's rows, SiLU,
//           gates, norms and Gram entries) runs while the copy is in flight, and the first pass
//           starts on each quarter as it lands. 3 CTAs per SM (shared memory), few registers.
//   stream  S is never held: each pass streams the column from global memory (GDN_STREAM_U rows
//           in flight per thread, the first chunk loaded before the prologue); the commit pass of
//           decode re-reads S from L2 (a CTA reads it about a microsecond before). No shared copy,
//           so many CTAs per SM hide each other's prologue.
#pragma once
#include "gdn-common.cuh"

#ifndef GDN_FAST_NCHUNK
#define GDN_FAST_NCHUNK 1  // one bulk copy per head's state: 3-6 % faster than 4 on the H200 (2026-11-30 A/B)
#endif
#ifndef GDN_STREAM_U
#define GDN_STREAM_U 8  // rows of S in flight per thread, stream source (a multiple of 4)
#endif
#ifndef GDN_SMEM_MAXNREG
#define GDN_SMEM_MAXNREG 168  // 3 CTAs of 128 threads per SM (shared memory allows 3 as well)
#endif
#ifndef GDN_STREAM_MAXNREG
#define GDN_STREAM_MAXNREG 128  // 4 CTAs of 128 threads per SM
#endif

namespace gdn {
namespace fast {

constexpr int kMaxRows = 8;   // maxK ≤ 8: verify rows, pending rows
constexpr int kBlockRows = 4; // rows per row block (a verify of more replays the earlier blocks)
constexpr int kMaxConv = 4;   // conv kernel K ≤ 4
constexpr int kNChunk = GDN_FAST_NCHUNK;
constexpr int kStreamU = GDN_STREAM_U;
static_assert(kStreamU % 4 == 0 && kStreamU >= 4, "GDN_STREAM_U: a multiple of 4");

// Scalars of a row block in shared memory (floats from the small region's start).
enum : int {
  kBeta = 0,     // [8] β_t (0 past the block's rows)
  kGraw = 8,     // [8] g_t
  kSQ = 16,      // [8] Σ q_t²  (raw q)
  kSK = 24,      // [8] Σ k_t²
  kCQ = 32,      // [8][8] raw k_s·q_t (s ≤ t), then e^{Γ_t−Γ_s} (k̂_s·q̂_t)
  kCK = 96,      // [8][8] raw k_s·k_t (s < t), then e^{Γ_t−Γ_s} (k̂_s·k̂_t)
  kFK = 160,     // [8] 1/‖k_t‖
  kGam = 168,    // [8] Γ_t
  kCA = 176,     // [8] A_t · fk_t (a_t from the raw dot product)
  kCB = 184,     // [8] A_t · fq_t
  kUB = 192,     // [8] fk_t · e^{Γ_{T−1}−Γ_t} (the commit pass)
  kCLast = 200,  // A_{T−1}
  kRed = 208,    // [8][32] warp partials of Σ_j o_t²
  kPos = 464,    // [16] (int) per conv input position of the block: source (0 zero, 1 qkvz, 2 conv stash, 3 ring)
  kPosOff = 480, // [16] (int) its row's element offset in that buffer
  kSmallFloats = 496,
};

__host__ __device__ __forceinline__ int pad4(int x) { return (x + 3) & ~3; }
// Row capacity of the compile-time instantiations (1, 4 or 8 rows).
__host__ __device__ __forceinline__ int rows_inst(int n) { return n <= 1 ? 1 : n <= 4 ? 4 : 8; }

// Dynamic shared memory layout, in floats. Keep fast_smem_floats in step with gdn-launch.ts.
struct Lay {
  float* S;   // [d_k][d_v] (smem source only)
  float* kd;  // [tbAlloc][dkp] raw k of the block's rows, zero past d_k and past the block
  float* qd;  // [tbAlloc][dkp] raw q
  float* kf;  // [mbAlloc][dkp] keys of the pending rows (normalised, from the stash)
  float* sc;  // kSmallFloats scalars
  int dkp;
};

__host__ __device__ __forceinline__ int fast_tb_alloc(int maxK) { return rows_inst(min(kBlockRows, maxK)); }
__host__ __device__ __forceinline__ int fast_mb_alloc(int maxK) { return maxK <= 4 ? 4 : 8; }
__host__ __device__ __forceinline__ int fast_smem_floats(int dk, int dv, int maxK, bool withS) {
  return (withS ? pad4(dk * dv) : 0) + (2 * fast_tb_alloc(maxK) + fast_mb_alloc(maxK)) * pad4(dk) + kSmallFloats;
}

__device__ __forceinline__ float* dyn_smem() {
#ifdef GDN_EMU
  return gdn_emu_dyn_smem();
#else
  extern __shared__ __align__(128) float gdn_dyn_smem_[];
  return gdn_dyn_smem_;
#endif
}

__device__ __forceinline__ unsigned dyn_smem_bytes() {
#ifdef GDN_EMU
  return gdn_emu_dyn_smem_bytes();
#else
  unsigned v;
  asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(v));
  return v;
#endif
}

__device__ __forceinline__ Lay lay_of(const Args& A, bool withS) {
  Lay L;
  float* base = dyn_smem();
  L.dkp = pad4(A.dk);
  const int sN = withS ? pad4(A.dk * A.dv) : 0;
  const int tb = fast_tb_alloc(A.maxK), mb = fast_mb_alloc(A.maxK);
  L.S = base;
  L.kd = base + sN;
  L.qd = L.kd + tb * L.dkp;
  L.kf = L.qd + tb * L.dkp;
  L.sc = L.kf + mb * L.dkp;
  return L;
}

__device__ __forceinline__ float4 ld4s(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ float4 f4(float v) { return make_float4(v, v, v, v); }
__device__ __forceinline__ float4 scale4(float c, const float4& x) { return make_float4(c * x.x, c * x.y, c * x.z, c * x.w); }
__device__ __forceinline__ void fma4(float c, const float4& x, float4& acc) {
  acc = make_float4(fmaf(c, x.x, acc.x), fmaf(c, x.y, acc.y), fmaf(c, x.z, acc.z), fmaf(c, x.w, acc.w));
}


__device__ __forceinline__ uint32_t smem_addr(const void* p) {
#ifdef __CUDA_ARCH__
  return (uint32_t)__cvta_generic_to_shared(p);
#else
  return 0;
#endif
}

// One 16-byte copy global → shared memory: cp.async on sm_80+ (the caller commits and waits), a
// plain copy before (and in the CPU thread emulator).
__device__ __forceinline__ void cp_async16(float* dst, const float* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(dst)), "l"(src) : "memory");
#else
  dst[0] = src[0], dst[1] = src[1], dst[2] = src[2], dst[3] = src[3];
#endif
}

// ---- where S lives ------------------------------------------------------------------------------

// Shared-memory copy of the head's state. Copy modes: 0 cp.async.bulk + mbarrier (sm_90), 1 cp.async
// 16-byte (sm_80 and later), 2 plain loads at issue time (unaligned shapes, emulation).
struct SmemSrc {
  static constexpr bool kHolds = true;
  float* S;
  uint64_t* bars;
  int mode;
  uint32_t phase;
  int cr;  // rows per chunk (a multiple of 4)

  __device__ __forceinline__ void init(uint64_t* b, float* sbuf) {
    bars = b;
    S = sbuf;
    phase = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(GDN_SMEM_CPASYNC)
    if (tid_lin() == 0) {
      for (int c = 0; c < kNChunk; ++c) asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(&bars[c])), "r"(1));
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
#endif
  }

  // Starts the copy of a head's state g ([dk][dv] floats, contiguous) into S. Before the first
  // wait() the CTA must pass a __syncthreads (the prologue does); plain mode copies here.
  __device__ __forceinline__ void issue(const float* g, int dk, int dv) {
    cr = pad4((dk + kNChunk - 1) / kNChunk);
    const bool aligned = (dv % 4 == 0) && ((reinterpret_cast<uintptr_t>(g) & 15) == 0);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(GDN_SMEM_CPASYNC)
    mode = aligned ? 0 : 2;
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    mode = aligned ? 1 : 2;
#else
    mode = 2;
    (void)aligned;
#endif
    const int tid = tid_lin(), nt = nthreads();
    if (mode == 2) {
      const int n = dk * dv;
      for (int e = tid; e < n; e += nt) S[e] = g[e];
      return;
    }
#ifdef __CUDA_ARCH__
    if (mode == 0) {
#if __CUDA_ARCH__ >= 900
      if (tid == 0) {
        for (int c = 0; c < kNChunk; ++c) {
          const int r0 = c * cr, r1 = min(dk, r0 + cr);
          if (r1 <= r0) continue;
          const uint32_t bytes = (uint32_t)((r1 - r0) * dv * 4);
          const uint32_t bar = smem_addr(&bars[c]);
          asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
          asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_addr(S + (size_t)r0 * dv)),
                       "l"(g + (size_t)r0 * dv), "r"(bytes), "r"(bar)
                       : "memory");
        }
      }
#endif
    } else {
      // 16-byte cp.async, one commit group per chunk.
      for (int c = 0; c < kNChunk; ++c) {
        const int r0 = c * cr, r1 = min(dk, r0 + cr);
        const int n4 = r1 > r0 ? (r1 - r0) * dv / 4 : 0;
        const float* src = g + (size_t)r0 * dv;
        float* dst = S + (size_t)r0 * dv;
        for (int e = tid; e < n4; e += nt) cp_async16(dst + 4 * e, src + 4 * e);
        asm volatile("cp.async.commit_group;" ::: "memory");
      }
    }
#endif
  }

  // Chunk c of the copy has landed (visible to every thread of the CTA).
  __device__ __forceinline__ void wait(int c) {
#ifdef __CUDA_ARCH__
    if (mode == 0) {
#if __CUDA_ARCH__ >= 900
      const uint32_t bar = smem_addr(&bars[c]);
      uint32_t done = 0;
      while (!done) {
        asm volatile(
            "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
            : "=r"(done)
            : "r"(bar), "r"(phase)
            : "memory");
      }
#endif
    } else if (mode == 1) {
      static_assert(kNChunk == 4 || kNChunk == 2 || kNChunk == 1, "cp.async waits written for 1, 2 or 4 chunks");
      const int left = kNChunk - 1 - c;
      if (left >= 3) asm volatile("cp.async.wait_group 3;" ::: "memory");
      else if (left == 2) asm volatile("cp.async.wait_group 2;" ::: "memory");
      else if (left == 1) asm volatile("cp.async.wait_group 1;" ::: "memory");
      else asm volatile("cp.async.wait_group 0;" ::: "memory");
      __syncthreads();
    }
#else
    (void)c;
#endif
  }

  // The head is done: the next issue() may overwrite S (every thread calls this).
  __device__ __forceinline__ void release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // our stores to S before the next bulk copy's
#endif
    __syncthreads();
    phase ^= 1u;
  }
};

// ---- the passes over a column of S --------------------------------------------------------------

// Dot products (TB rows) and the pending fold (MB terms) on a group of 4 rows i0..i0+3 of the
// column: s ← c0 s + Σ_m kf[m][i] uf[m]; a_t += s kd[t][i]; b_t += s qd[t][i].
template <int TB, int MB>
struct PassA {
  float a[TB > 0 ? TB : 1], b[TB > 0 ? TB : 1];
  float uf[MB > 0 ? MB : 1];
  float c0;

  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int t = 0; t < TB; ++t) a[t] = b[t] = 0.0f;
  }

  __device__ __forceinline__ void group(float (&s)[4], int i0, const Lay& L, int dkp) {
    if (MB > 0) {
#pragma unroll
      for (int q = 0; q < 4; ++q) s[q] *= c0;
#pragma unroll
      for (int m = 0; m < MB; ++m) {
        const float4 kk = ld4s(L.kf + m * dkp + i0);
        s[0] = fmaf(kk.x, uf[m], s[0]);
        s[1] = fmaf(kk.y, uf[m], s[1]);
        s[2] = fmaf(kk.z, uf[m], s[2]);
        s[3] = fmaf(kk.w, uf[m], s[3]);
      }
    }
#pragma unroll
    for (int t = 0; t < TB; ++t) {
      const float4 kk = ld4s(L.kd + t * dkp + i0);
      const float4 qq = ld4s(L.qd + t * dkp + i0);
      a[t] = fmaf(s[0], kk.x, a[t]);
      b[t] = fmaf(s[0], qq.x, b[t]);
      a[t] = fmaf(s[1], kk.y, a[t]);
      b[t] = fmaf(s[1], qq.y, b[t]);
      a[t] = fmaf(s[2], kk.z, a[t]);
      b[t] = fmaf(s[2], qq.z, b[t]);
      a[t] = fmaf(s[3], kk.w, a[t]);
      b[t] = fmaf(s[3], qq.w, b[t]);
    }
  }
};

// The commit of a block on 4 rows: s ← cl s + Σ_t kd[t][i] ub[t].
template <int TB>
__device__ __forceinline__ void commit_group(float (&s)[4], int i0, const Lay& L, int dkp, float cl, const float (&ub)[TB]) {
#pragma unroll
  for (int q = 0; q < 4; ++q) s[q] *= cl;
#pragma unroll
  for (int t = 0; t < TB; ++t) {
    const float4 kk = ld4s(L.kd + t * dkp + i0);
    s[0] = fmaf(kk.x, ub[t], s[0]);
    s[1] = fmaf(kk.y, ub[t], s[1]);
    s[2] = fmaf(kk.z, ub[t], s[2]);
    s[3] = fmaf(kk.w, ub[t], s[3]);
  }
}

// Per-thread view of its column: j, the global column pointer (S[i][j] at g[i·dv]), d_k, d_v.
// DKC, DVC: d_k, d_v known at compile time (the 80B shape, 128 × 128: row offsets become
// immediates, so a pass keeps one address register instead of one per row in flight), or 0.
template <int DKC, int DVC>
struct Col {
  static constexpr int kUnroll = DKC ? 2 : 1;  // row groups of 4 per loop trip (smem passes)
  float* g;
  int j, dk_, dv_;
  bool active;
  __device__ __forceinline__ int dk() const { return DKC ? DKC : dk_; }
  __device__ __forceinline__ int dv() const { return DVC ? DVC : dv_; }
  __device__ __forceinline__ int dkp() const { return DKC ? pad4(DKC) : pad4(dk_); }
};

__device__ __forceinline__ void store_rows(float* p, int stride, int i0, int dk, const float (&s)[4]) {
#pragma unroll
  for (int q = 0; q < 4; ++q)
    if (i0 + q < dk) p[(size_t)(i0 + q) * stride] = s[q];
}

// Pass A from the shared copy. first: wait for each chunk of the copy before its rows.
// wHold: the folded values go back to the shared copy; wGlob: and to global memory.
template <int TB, int MB, class Cl>
__device__ __forceinline__ void pass_a(SmemSrc& src, PassA<TB, MB>& P, const Cl& C, const Lay& L, bool first, bool wHold, bool wGlob) {
  const int dk = C.dk(), dv = C.dv(), dkp = C.dkp();
  const float* col = src.S + C.j;
  for (int c = 0; c < kNChunk; ++c) {
    const int r0 = c * src.cr, r1 = min(dk, r0 + src.cr);
    if (r1 <= r0) break;
    if (first) src.wait(c);
#pragma unroll(Cl::kUnroll)
    for (int i0 = r0; i0 < r1; i0 += 4) {
      float s[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) s[q] = (C.active && i0 + q < dk) ? col[(i0 + q) * dv] : 0.0f;
      P.group(s, i0, L, dkp);
      if (C.active) {
        if (wHold) store_rows(src.S + C.j, dv, i0, dk, s);
        if (wGlob) store_rows(C.g, dv, i0, dk, s);
      }
    }
  }
}

// Pass B from the shared copy: the block's commit, into the shared copy (toHold) or global memory.
template <int TB, class Cl>
__device__ __forceinline__ void pass_b(SmemSrc& src, const Cl& C, const Lay& L, float cl, const float (&ub)[TB], bool toHold) {
  const int dk = C.dk(), dv = C.dv(), dkp = C.dkp();
  const float* col = src.S + C.j;
  float* out = toHold ? src.S + C.j : C.g;
  if (!C.active) return;
#pragma unroll(Cl::kUnroll * 2)
  for (int i0 = 0; i0 < dk; i0 += 4) {
    float s[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) s[q] = (i0 + q < dk) ? col[(i0 + q) * dv] : 0.0f;
    commit_group<TB>(s, i0, L, dkp, cl, ub);
    store_rows(out, dv, i0, dk, s);
  }
}

// The column streams from global memory; kStreamU rows in flight per thread, the first chunk
// loaded by preload() (before the prologue) for the first pass.
struct StreamSrc {
  static constexpr bool kHolds = false;
  float pre[kStreamU];
  bool havePre;

  __device__ __forceinline__ void init(uint64_t*, float*) { havePre = false; }

  template <class Cl>
  __device__ __forceinline__ void load(float (&x)[kStreamU], const Cl& C, int i0) {
    const float* p = C.g + (size_t)i0 * C.dv();
#pragma unroll
    for (int u = 0; u < kStreamU; ++u) x[u] = (C.active && i0 + u < C.dk()) ? p[u * C.dv()] : 0.0f;
  }
  template <class Cl>
  __device__ __forceinline__ void preload(const Cl& C) {
    load(pre, C, 0);
    havePre = true;
  }
  __device__ __forceinline__ void release() { __syncthreads(); }
};

template <int TB, int MB, class Cl>
__device__ __forceinline__ void pass_a(StreamSrc& src, PassA<TB, MB>& P, const Cl& C, const Lay& L, bool first, bool wHold, bool wGlob) {
  const int dk = C.dk(), dv = C.dv(), dkp = C.dkp();
  float cur[kStreamU];
  if (first && src.havePre) {
#pragma unroll
    for (int u = 0; u < kStreamU; ++u) cur[u] = src.pre[u];
    src.havePre = false;
  } else {
    src.load(cur, C, 0);
  }
  const bool w = C.active && (wHold || wGlob);
#pragma unroll 1
  for (int i0 = 0; i0 < dk; i0 += kStreamU) {
    float nxt[kStreamU];
    src.load(nxt, C, i0 + kStreamU);  // zeros past d_k
#pragma unroll
    for (int q0 = 0; q0 < kStreamU; q0 += 4) {
      float s[4] = {cur[q0], cur[q0 + 1], cur[q0 + 2], cur[q0 + 3]};
      P.group(s, i0 + q0, L, dkp);
      if (w) store_rows(C.g, dv, i0 + q0, dk, s);
    }
#pragma unroll
    for (int u = 0; u < kStreamU; ++u) cur[u] = nxt[u];
  }
}

template <int TB, class Cl>
__device__ __forceinline__ void pass_b(StreamSrc& src, const Cl& C, const Lay& L, float cl, const float (&ub)[TB], bool) {
  const int dk = C.dk(), dv = C.dv(), dkp = C.dkp();
  if (!C.active) return;
  float cur[kStreamU];
  src.load(cur, C, 0);
#pragma unroll 1
  for (int i0 = 0; i0 < dk; i0 += kStreamU) {
    float nxt[kStreamU];
    src.load(nxt, C, i0 + kStreamU);  // zeros past d_k
#pragma unroll
    for (int q0 = 0; q0 < kStreamU; q0 += 4) {
      float s[4] = {cur[q0], cur[q0 + 1], cur[q0 + 2], cur[q0 + 3]};
      commit_group<TB>(s, i0 + q0, L, dkp, cl, ub);
      store_rows(C.g, dv, i0 + q0, dk, s);
    }
#pragma unroll
    for (int u = 0; u < kStreamU; ++u) cur[u] = nxt[u];
  }
}

// ---- the prologue -----------------------------------------------------------------------------------

// Pending rows (carried mode, or the fold kernel's accepted rows) of head h: keys into L.kf (rows
// M..mbAlloc−1 zero), and per column uf[m] = e^{γ_{M−1}−γ_m} u_m[j], c0 = e^{γ_{M−1}}.
__device__ __forceinline__ void pending_keys(const Args& A, const Geo& G, const float* sh, int M, int MB, const Lay& L) {
  const int tid = tid_lin(), nt = nthreads();
  const int n = MB * L.dkp;
  for (int e = tid; e < n; e += nt) {
    const int m = e / L.dkp, i = e - m * L.dkp;
    L.kf[e] = (m < M && i < A.dk) ? sh[(size_t)m * G.stashRow + i] : 0.0f;
  }
}

// Per column: uf[m] = e^{γ_{M−1}−γ_m} u_m[j] (0 for m ≥ M), c0 = e^{γ_{M−1}}. Loaded in the prologue.
template <int MB, class Cl>
__device__ __forceinline__ void pending_coefs(const Args& A, const Geo& G, const float* sh, int M, const Cl& C, float (&uf)[MB], float& c0) {
  const int sr = G.stashRow;
  const float gl = sh[(size_t)(M - 1) * sr + A.dk + A.dv];
  c0 = expf(gl);
#pragma unroll
  for (int m = 0; m < MB; ++m) {
    float v = 0.0f;
    if (m < M && C.active) v = expf(gl - sh[(size_t)m * sr + A.dk + A.dv]) * sh[(size_t)m * sr + A.dk + C.j];
    uf[m] = v;
  }
}

// Per-position sources of the conv inputs of a row block (positions P0 + t0 − K + 1 + x, x < nx),
// computed once per block by nx threads into the small region.
__device__ __forceinline__ void conv_sources(const Args& A, const Geo& G, const Task& T, int t0, int nx, const Lay& L) {
  int* kind = reinterpret_cast<int*>(L.sc + kPos);
  int* off = reinterpret_cast<int*>(L.sc + kPosOff);
  for (int x = tid_lin(); x < 16; x += nthreads()) {
    const int p = T.P0 + t0 - A.K + 1 + x;
    const ConvSource src = x < nx && p >= 0 ? conv_source(A, G, T.slot, T.P0, T.L, T.row0, p) : ConvSource{0, 0};
    kind[x] = src.kind;
    off[x] = src.off;
  }
}

// Conv + SiLU of channel c (qkvz column col) for the block's rows t < TB (zero for t ≥ nb). All
// NX = TB + K − 1 input loads issue before the first use.
template <int TB>
__device__ __forceinline__ void conv_rows(const Args& A, const Lay& L, int c, int col, int nb, float (&out)[TB]) {
  constexpr int NX = TB + kMaxConv - 1;
  const int* kind = reinterpret_cast<const int*>(L.sc + kPos);
  const int* off = reinterpret_cast<const int*>(L.sc + kPosOff);
  float x[NX];
#pragma unroll
  for (int e = 0; e < NX; ++e) {
    const int kd = kind[e];
    const float* base = kd == 1 ? A.qkvz + col : kd == 2 ? A.convStash + c : A.convRing + c;
    x[e] = kd ? base[(size_t)(unsigned)off[e]] : 0.0f;
  }
  float w[kMaxConv];
#pragma unroll
  for (int tap = 0; tap < kMaxConv; ++tap) w[tap] = tap < A.K ? A.convWeight[(size_t)c * A.K + tap] : 0.0f;
#pragma unroll
  for (int t = 0; t < TB; ++t) {
    float acc = 0.0f;
#pragma unroll
    for (int tap = 0; tap < kMaxConv; ++tap)
      if (tap < A.K) acc = fmaf(w[tap], x[t + tap], acc);
    out[t] = t < nb ? siluf_(acc) : 0.0f;
  }
}

// Warp-per-dot Gram entries of the block's raw q, k (in L.kd / L.qd): Σq_t², Σk_t², k_s·q_t (s ≤ t),
// k_s·k_t (s < t), into the small region.
__device__ __forceinline__ float warp_dot(const float* x, const float* y, int dkp) {
  const int tid = tid_lin(), nt = nthreads();
  const int lane = tid & 31, warp = tid >> 5;
  const int wsize = min(32, nt - warp * 32);
  float acc = 0.0f;
  for (int i = 4 * lane; i < dkp; i += 4 * wsize) {
    const float4 a = ld4s(x + i), b = ld4s(y + i);
    acc = fmaf(a.x, b.x, acc);
    acc = fmaf(a.y, b.y, acc);
    acc = fmaf(a.z, b.z, acc);
    acc = fmaf(a.w, b.w, acc);
  }
  return warp_sum_to_lane0(acc);
}

__device__ __forceinline__ void gram(const Lay& L, int nb) {
  const int tid = tid_lin(), nt = nthreads();
  const int lane = tid & 31, warp = tid >> 5, nw = (nt + 31) >> 5;
  const int nkq = nb * (nb + 1) / 2, nkk = nb * (nb - 1) / 2;
  const int items = 2 * nb + nkq + nkk;
  for (int d = warp; d < items; d += nw) {
    const float *x, *y;
    int dst;
    if (d < nb) {
      x = y = L.qd + d * L.dkp;
      dst = kSQ + d;
    } else if (d < 2 * nb) {
      x = y = L.kd + (d - nb) * L.dkp;
      dst = kSK + d - nb;
    } else if (d < 2 * nb + nkq) {
      int e = d - 2 * nb, t = 0;
      while (e > t) e -= ++t;  // pairs (s, t), s ≤ t, in order of t
      x = L.kd + e * L.dkp;
      y = L.qd + t * L.dkp;
      dst = kCQ + e * 8 + t;
    } else {
      int e = d - 2 * nb - nkq, t = 1;
      while (e >= t) e -= t++;  // pairs (s, t), s < t
      x = L.kd + e * L.dkp;
      y = L.kd + t * L.dkp;
      dst = kCK + e * 8 + t;
    }
    const float v = warp_dot(x, y, L.dkp);
    if (lane == 0) L.sc[dst] = v;
  }
}

// The block's scalar tables from the Gram entries and gates (zeros past the block's rows).
__device__ __forceinline__ void coefs(const Lay& L, int nb, int dk) {
  const int tid = tid_lin(), nt = nthreads();
  float* sc = L.sc;
  const float rdk = 1.0f / sqrtf((float)dk);
  for (int e = tid; e < 64 + 8 + 1; e += nt) {
    if (e < 64) {
      const int s = e >> 3, t = e & 7;
      float cq = 0.0f, ck = 0.0f;
      if (s <= t && t < nb) {
        float gs = 0.0f, gt = 0.0f;
        for (int r = 0; r <= t; ++r) {
          const float g = sc[kGraw + r];
          gt += g;
          if (r <= s) gs += g;
        }
        const float d = expf(gt - gs);
        const float fks = 1.0f / sqrtf(sc[kSK + s] + 1e-6f);
        const float fkt = 1.0f / sqrtf(sc[kSK + t] + 1e-6f);
        const float fqt = rdk / sqrtf(sc[kSQ + t] + 1e-6f);
        cq = d * fks * fqt * sc[kCQ + e];
        if (s < t) ck = d * fks * fkt * sc[kCK + e];
      }
      sc[kCQ + e] = cq;
      sc[kCK + e] = ck;
    } else if (e < 72) {
      const int t = e - 64;
      float fk = 0.0f, gam = 0.0f, ca = 0.0f, cb = 0.0f, ub = 0.0f;
      if (t < nb) {
        float gt = 0.0f, gl = 0.0f;
        for (int r = 0; r < nb; ++r) {
          const float g = sc[kGraw + r];
          if (r <= t) gt += g;
          gl += g;
        }
        fk = 1.0f / sqrtf(sc[kSK + t] + 1e-6f);
        const float fq = rdk / sqrtf(sc[kSQ + t] + 1e-6f);
        const float At = expf(gt);
        gam = gt;
        ca = At * fk;
        cb = At * fq;
        ub = fk * expf(gl - gt);
      }
      sc[kFK + t] = fk;
      sc[kGam + t] = gam;
      sc[kCA + t] = ca;
      sc[kCB + t] = cb;
      sc[kUB + t] = ub;
    } else {
      float gl = 0.0f;
      for (int r = 0; r < nb; ++r) gl += sc[kGraw + r];
      sc[kCLast] = expf(gl);
    }
  }
}

// ---- one row block of one value head ---------------------------------------------------------------

template <class Cl>
struct HeadCtx {
  const Args* A;
  const Geo* G;
  const Task* T;
  int h, m;  // value head, its index within key head g
  Cl C;
  Lay L;
};

// Pass A with the pending terms' instantiation picked at run time (M = 0: none); uf, c0 from
// pending_coefs (loaded in the prologue).
template <int TB, int MB, class Src, class Cl, int UN>
__device__ __forceinline__ void pass_a_with(Src& src, const HeadCtx<Cl>& X, const float (&uf)[UN], float c0, bool first, bool wHold,
                                            bool wGlob, float (&a)[TB > 0 ? TB : 1], float (&b)[TB > 0 ? TB : 1]) {
  PassA<TB, MB> P;
  P.zero();
  P.c0 = c0;
#pragma unroll
  for (int m = 0; m < MB; ++m) P.uf[m] = uf[m];
  pass_a<TB, MB>(src, P, X.C, X.L, first, MB > 0 && wHold, MB > 0 && wGlob);
#pragma unroll
  for (int t = 0; t < TB; ++t) a[t] = P.a[t], b[t] = P.b[t];
}

// At most 4 fold terms here (run_head_t folds more pending rows in a pass of their own first:
// dot products and 8 terms in one pass would not fit 168 registers without spills).
template <int TB, class Src, class Cl>
__device__ __forceinline__ void run_pass_a(Src& src, const HeadCtx<Cl>& X, int M, const float (&uf)[4], float c0, bool first, bool wHold,
                                           bool wGlob, float (&a)[TB > 0 ? TB : 1], float (&b)[TB > 0 ? TB : 1]) {
  if (M == 0) pass_a_with<TB, 0, Src, Cl, 4>(src, X, uf, c0, first, false, false, a, b);
  else pass_a_with<TB, 4, Src, Cl, 4>(src, X, uf, c0, first, wHold, wGlob, a, b);
}

// Rows t0 .. t0+nb−1 (nb ≤ TB) of the task on value head h. Fold terms first: in the first block
// the M pending rows (carried mode); in a later block of a verify, its own earlier rows, replayed
// from the stash this CTA just wrote (M = t0). last: no row block follows.
template <int TB, class Src, class Cl>
__device__ __forceinline__ void row_block(Src& src, const HeadCtx<Cl>& X, int t0, int nb, const float* pendSh, int pendM, bool firstPass, bool last) {
  const Args& A = *X.A;
  const Geo& G = *X.G;
  const Task& T = *X.T;
  const Lay& L = X.L;
  const Cl& C = X.C;
  const int tid = tid_lin(), nt = nthreads();
  const int lane = tid & 31, warp = tid >> 5, nw = (nt + 31) >> 5;
  const int dk = A.dk, dv = A.dv, h = X.h, g = T.g;
  const bool first = t0 == 0;
  const bool realPending = first && pendM > 0;
  const bool replay = !first && !T.commit;
  const int M = realPending ? pendM : replay ? t0 : 0;
  if (M > 4) __trap();  // run_head_t folds more pending rows first; a replay has t0 = 4

  __syncthreads();  // earlier readers of kd / qd / kf / the scalars are done
  conv_sources(A, G, T, t0, nb + A.K - 1, L);
  __syncthreads();
  // ---- prologue: the loads independent of each other, issued together ----
  // z and v of column j (registers), gates (shared).
  float zt[TB], vt[TB];
  {
    const int zcol = g * G.grp + 2 * dk + (G.r + X.m) * dv + C.j;
#pragma unroll
    for (int t = 0; t < TB; ++t) zt[t] = (t < nb && C.active) ? A.qkvz[(size_t)(T.row0 + t0 + t) * G.width + zcol] : 0.0f;
    if (C.active) {
      conv_rows<TB>(A, L, 2 * G.keyDim + h * dv + C.j, g * G.grp + 2 * dk + X.m * dv + C.j, nb, vt);
    } else {
#pragma unroll
      for (int t = 0; t < TB; ++t) vt[t] = 0.0f;
    }
  }
  for (int t = tid; t < 8; t += nt) {
    float beta = 0.0f, gg = 0.0f;
    if (t < nb) {
      const float* bar = A.ba + (size_t)(T.row0 + t0 + t) * 2 * A.hv + g * 2 * G.r;
      gg = -expf(A.aLog[h]) * softplusf_(bar[G.r + X.m] + A.dtBias[h]);
      beta = sigmoidf_(bar[X.m]);
    }
    L.sc[kBeta + t] = beta;
    L.sc[kGraw + t] = gg;
  }
  // Fold terms (at most 4 here): keys to shared memory, this column's coefficients to registers.
  float uf[4], c0 = 1.0f;
  if (M > 0) {
    pending_coefs<4>(A, G, pendSh, M, C, uf, c0);
  } else {
#pragma unroll
    for (int m = 0; m < 4; ++m) uf[m] = 0.0f;
  }
  // The stash γ of this block's rows continue those of the verify's earlier rows.
  const float gamBase = replay ? pendSh[(size_t)(t0 - 1) * G.stashRow + dk + dv] : 0.0f;
  // q and k of key head g (raw), rows of kd / qd; zero past d_k.
  for (int i = tid; i < L.dkp; i += nt) {
    float q[TB], k[TB];
    if (i < dk) {
      const int cq = g * dk + i, colq = g * G.grp + i;
      conv_rows<TB>(A, L, cq, colq, nb, q);
      conv_rows<TB>(A, L, G.keyDim + cq, colq + dk, nb, k);
    } else {
#pragma unroll
      for (int t = 0; t < TB; ++t) q[t] = k[t] = 0.0f;
    }
#pragma unroll
    for (int t = 0; t < TB; ++t) {
      L.qd[t * L.dkp + i] = q[t];
      L.kd[t * L.dkp + i] = k[t];
    }
  }
  if (M > 0) pending_keys(A, G, pendSh, M, fast_mb_alloc(A.maxK), L);
  __syncthreads();
  gram(L, nb);
  __syncthreads();
  coefs(L, nb, dk);
  __syncthreads();

  // ---- pass A: a_t = Sᵀk_t, b_t = Sᵀq_t (raw k, q) of the state after the fold terms ----
  // The pending fold's result: to the shared copy when it is read again (a commit pass or a
  // later block), and to global memory when it is committed now (carried verify) or is the
  // stream's holding. A replay writes nothing.
  const bool wHold = realPending && Src::kHolds && (T.commit || !last);
  const bool wGlob = realPending && (!Src::kHolds || !T.commit);
  float a[TB], b[TB];
  run_pass_a<TB, Src, Cl>(src, X, M, uf, c0, first && firstPass, wHold, wGlob, a, b);

  // ---- per column: u_t, o_t ----
  const float* sc = L.sc;
  float u[TB], o[TB];
#pragma unroll
  for (int t = 0; t < TB; ++t) {
    float acc = sc[kCA + t] * a[t];
#pragma unroll
    for (int s = 0; s < t; ++s) acc = fmaf(sc[kCK + s * 8 + t], u[s], acc);
    u[t] = sc[kBeta + t] * (vt[t] - acc);
    float oo = sc[kCB + t] * b[t];
#pragma unroll
    for (int s = 0; s <= t; ++s) oo = fmaf(sc[kCQ + s * 8 + t], u[s], oo);
    o[t] = C.active ? oo : 0.0f;
  }
  // ---- gated RMSNorm of each row over d_v ----
#pragma unroll
  for (int t = 0; t < TB; ++t) {
    if (t < nb) {
      const float ps = warp_sum_to_lane0(o[t] * o[t]);
      if (lane == 0) L.sc[kRed + t * 32 + warp] = ps;
    }
  }
  __syncthreads();
  if (C.active) {
    const float nwj = A.normWeight[C.j];
#pragma unroll
    for (int t = 0; t < TB; ++t) {
      if (t < nb) {
        float ss = 0.0f;
        for (int w = 0; w < nw; ++w) ss += sc[kRed + t * 32 + w];
        const float inv = 1.0f / sqrtf(ss / (float)dv + A.eps);
        A.y[(size_t)(T.row0 + t0 + t) * A.hv * dv + (size_t)h * dv + C.j] = nwj * o[t] * inv * siluf_(zt[t]);
      }
    }
  }
  // ---- stash: k̂_t, u_t, γ_t (verify) ----
  if (T.record) {
    float* sh = A.stash + (size_t)T.slot * G.stashSeq + (size_t)h * A.maxK * G.stashRow;
#pragma unroll
    for (int t = 0; t < TB; ++t) {
      if (t < nb) {
        float* srow = sh + (size_t)(t0 + t) * G.stashRow;
        if (C.active) srow[dk + C.j] = u[t];
        const float fk = sc[kFK + t];
        for (int i = tid; i < dk; i += nt) srow[i] = L.kd[t * L.dkp + i] * fk;
        if (tid == 0) srow[dk + dv] = gamBase + sc[kGam + t];
      }
    }
  }
  // ---- pass B (commit): S ← A_{T−1} S + Σ_t e^{Γ_{T−1}−Γ_t} k̂_t u_tᵀ ----
  if (T.commit) {
    float ub[TB];
#pragma unroll
    for (int t = 0; t < TB; ++t) ub[t] = sc[kUB + t] * u[t];
    // The last block goes to global memory; earlier ones stay in the holding (smem source).
    pass_b<TB, Cl>(src, C, L, sc[kCLast], ub, Src::kHolds && !last);
  }
}

// One value head of a task.
template <class Src, class Cl>
__device__ __forceinline__ void run_head_t(Src& src, const Args& A, const Geo& G, const Task& T, int h, const Lay& L) {
  HeadCtx<Cl> X;
  X.A = &A;
  X.G = &G;
  X.T = &T;
  X.h = h;
  X.m = h - T.g * G.r;
  X.L = L;
  const int j = tid_lin();
  X.C.j = j;
  X.C.dk_ = A.dk;
  X.C.dv_ = A.dv;
  X.C.active = j < A.dv;
  float* headS = A.state + ((size_t)T.slot * A.hv + h) * (size_t)A.dk * A.dv;
  X.C.g = headS + (X.C.active ? j : 0);
  const int M = T.nPendFold;
  if (T.nrows <= 0 && M <= 0) return;
  // The state's copy (smem) or first chunk (stream) starts now, before the prologue.
  if constexpr (Src::kHolds) {
    src.issue(headS, A.dk, A.dv);
  } else {
    src.preload(X.C);
  }
  const float* pendSh = T.pendK + (size_t)h * A.maxK * G.stashRow;
  if (T.nrows == 0) {
    // The fold kernel: S ← E S + Σ_m k̂_m (w_m u_m)ᵀ, one pass, to global memory.
    float uf[kMaxRows], c0;
    pending_coefs<kMaxRows>(A, G, pendSh, M, X.C, uf, c0);
    pending_keys(A, G, pendSh, M, fast_mb_alloc(A.maxK), L);
    __syncthreads();
    float a[1], b[1];
    if (M <= 4) pass_a_with<0, 4, Src, Cl, kMaxRows>(src, X, uf, c0, true, false, true, a, b);
    else pass_a_with<0, 8, Src, Cl, kMaxRows>(src, X, uf, c0, true, false, true, a, b);
    return;
  }
  int pendM = M;
  bool firstPass = true;
  if (pendM > 4) {
    // More than 4 pending rows (maxK > 4): a fold-only pass first, into the holding (and committed
    // now where a carried verify commits them); the row blocks then start from the folded state.
    float uf[kMaxRows], c0;
    pending_coefs<kMaxRows>(A, G, pendSh, pendM, X.C, uf, c0);
    pending_keys(A, G, pendSh, pendM, fast_mb_alloc(A.maxK), L);
    __syncthreads();
    float a[1], b[1];
    pass_a_with<0, 8, Src, Cl, kMaxRows>(src, X, uf, c0, true, Src::kHolds, !Src::kHolds || !T.commit, a, b);
    pendM = 0;
    firstPass = false;
  }
  const int cap = min(kBlockRows, A.maxK);
  for (int t0 = 0; t0 < T.nrows; t0 += cap) {
    const int nb = min(cap, T.nrows - t0);
    const bool last = t0 + nb >= T.nrows;
    if (nb <= 1) row_block<1, Src, Cl>(src, X, t0, nb, pendSh, pendM, firstPass, last);
    else row_block<4, Src, Cl>(src, X, t0, nb, pendSh, pendM, firstPass, last);
  }
}

// The 80B head shape (d_k = d_v = 128) compiled with both known; any other shape at run time.
template <class Src>
__device__ __forceinline__ void run_head(Src& src, const Args& A, const Geo& G, const Task& T, int h, const Lay& L) {
#ifndef GDN_FAST_NO_SPECIAL
  if (A.dk == 128 && A.dv == 128) {
    run_head_t<Src, Col<128, 128>>(src, A, G, T, h, L);
    return;
  }
#endif
  run_head_t<Src, Col<0, 0>>(src, A, G, T, h, L);
}

// What the fast kernels take beyond check_shape; anything else traps (the layer picks legacy).
__device__ __forceinline__ void check_fast(const Args& A, bool withS) {
  const bool ok = A.maxK <= kMaxRows && A.K <= kMaxConv && dyn_smem_bytes() >= 4u * (unsigned)fast_smem_floats(A.dk, A.dv, A.maxK, withS);
  if (!ok) __trap();
}

template <class Src>
__device__ __forceinline__ void run_task(const Args& A, const Geo& G, const Task& T) {
  __shared__ __align__(8) uint64_t bars[kNChunk];
  const Lay L = lay_of(A, Src::kHolds);
  Src src;
  src.init(bars, L.S);
  if (T.nPendFold > A.maxK) __trap();  // more pending rows than the stash holds
  for (int h = T.h0; h < T.h0 + T.nh; ++h) {
    run_head<Src>(src, A, G, T, h, L);
    if (h + 1 < T.h0 + T.nh) src.release();
  }
  __syncthreads();  // every read of history by this CTA is done
  write_conv_state(A, G, T);
}

template <class Src>
__device__ __forceinline__ void recurrent_entry(const Args& A, int mode, int batch, int k) {
  check_fast(A, Src::kHolds);
  int b, h;
  cta_coords(batch, A.hv, b, h);
  if (b >= batch || h >= A.hv) return;
  const Geo G = geo_of(A);
  if (k < 1 || (mode == 1 && k > A.maxK)) return;
  Task T;
  if (!make_task(A, G, b, h, A.rowStarts[b], k, mode == 0, mode == 1, T)) return;
  run_task<Src>(A, G, T);
}

template <class Src>
__device__ __forceinline__ void fold_entry(const Args& A, const uint32_t* naTab, int batch, int k) {
  check_fast(A, Src::kHolds);
  int b, h, slot, na;
  if (!fold_cta(A, naTab, batch, k, b, h, slot, na)) return;
  const Geo G = geo_of(A);
  Task T;
  fold_task(A, G, b, h, slot, na, k, T);
  run_task<Src>(A, G, T);
}

}  // namespace fast
}  // namespace gdn
