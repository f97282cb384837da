// The prologue of a row block (gdn-fast.cuh row_block): the pending rows' keys and coefficients,
// the conv inputs' sources and conv + SiLU, the warp-per-dot Gram entries and the block's scalars.
// Its own file: none of it reads S (it runs while the copy lands), and gdn-pipe.cuh reuses it.
#pragma once
#include "gdn-common.cuh"
#include "gdn-fast-layout.cuh"

namespace gdn {
namespace fast {

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

}  // namespace fast
}  // namespace gdn
