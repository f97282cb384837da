// Gated DeltaNet write-on-accept fold with the head in registers (gdn_fold_state): gdn_fold's
// semantics (../KERNELS.md, "Write-on-accept stash"; kernels/gdn-fold.cu) in gdn_decode_state's
// layout. Per (batch position b, value head h), n = naTab[b] accepted rows of the last verify:
//   S ← e^{γ_{n−1}} S + Σ_{t<n} e^{γ_{n−1}−γ_t} k_t u_tᵀ,
// and the ring takes the pre-conv inputs of verify rows 0..n−1 (qkvz rows b·k + t) at positions
// L..L+n−1 (only the last K survive), each CTA its owned channels (gdn-common.cuh owned_channel).
//
// Why: a fold is a read-modify-write of the head with no prologue chain — the accepted count, the
// slot and the stash rows are all it waits on — so it runs as the decode state pass does: each of
// 256 threads loads its 16 rows × 4 columns as soon as it has the slot, the stash rows and the
// ring's inputs load alongside, one barrier (the accepted rows in shared memory), then the rank-n
// update and 16-byte evict-first stores. The smem fold (gdn_fold_smem) copies the head into
// shared memory and back, and measured slower (docs/benchmarks.md, GDN verify and fold).
//
// Launch: grid [batch, H_v], 256 threads, the dynamic shared memory of fold_state_smem_floats()
// (gdn-decode-launch.ts computes the same). Takes maxK ≤ 8, d_k ≤ 128, d_v ≤ 128 and a multiple
// of 4 (gdn_decode_state's limits); else traps.
#pragma once
#include "gdn-decode-state.cuh"

namespace gdn {
namespace decode {

// Dynamic shared memory, in floats: the accepted rows' keys [maxK][d_kp] and u [maxK][d_vp], their γ [maxK].
__host__ __device__ __forceinline__ int fold_state_smem_floats(int dk, int dv, int maxK) {
  return maxK * (fast::pad4(dk) + fast::pad4(dv)) + fast::pad4(maxK);
}

// The accepted rows' k_t, u_t and γ_t from the stash into shared memory (zero past d_k, d_v), one
// round: every row's loads issue before the first store. (Held in registers beside the head's 64,
// the u rows of an 8-row fold spilled.)
__device__ __forceinline__ void stage_accepted(const Args& A, const Geo& G, const float* pendSh, int M, float* kf, float* uf, float* gam) {
  const int tid = tid_lin(), dkp = fast::pad4(A.dk), dvp = fast::pad4(A.dv);
  const int e = tid;  // e < d_kp: key entry e; else u entry e − d_kp (d_kp + d_vp ≤ 256 threads)
  const bool isKey = e < dkp;
  const int i = isKey ? e : e - dkp;
  const bool in = isKey ? i < A.dk : i < A.dv && e < dkp + dvp;
  const int off = isKey ? i : A.dk + i;
  float x[fast::kMaxRows];
#pragma unroll
  for (int t = 0; t < fast::kMaxRows; ++t) x[t] = (t < M && in) ? pendSh[(size_t)t * G.stashRow + off] : 0.0f;
  if (e < dkp + dvp) {
    float* dst = isKey ? kf + i : uf + i;
    const int stride = isKey ? dkp : dvp;
#pragma unroll
    for (int t = 0; t < fast::kMaxRows; ++t)
      if (t < M) dst[t * stride] = x[t];
  }
  if (tid < M) gam[tid] = pendSh[(size_t)tid * G.stashRow + A.dk + A.dv];
}

// S ← e^{γ_{M−1}} S + Σ_t e^{γ_{M−1}−γ_t} k_t u_tᵀ over the thread's rows (keys and u from shared memory).
__device__ __forceinline__ void fold_rows(const Args& A, const Part& p, int M, const float* kf, const float* uf, const float* gam, float4 (&s)[kRows]) {
  if (!p.act) return;  // no columns (4·lane ≥ d_v)
  const int dkp = fast::pad4(A.dk), dvp = fast::pad4(A.dv);
  const float gl = gam[M - 1];
  const float c0 = expf(gl);
#pragma unroll
  for (int r = 0; r < kRows; ++r) s[r] = scale4(c0, s[r]);
  for (int t = 0; t < M; ++t) {
    const float4 u = scale4(expf(gl - gam[t]), fast::ld4s(uf + t * dvp + 4 * p.lane));
    const float* kt = kf + t * dkp + p.r0;
#pragma unroll
    for (int r0 = 0; r0 < kRows; r0 += 4) {
      if (r0 >= p.nr || p.r0 + r0 >= dkp) break;  // keys are zero from d_k to d_kp
      const float4 kk = fast::ld4s(kt + r0);
      fma4(kk.x, u, s[r0]), fma4(kk.y, u, s[r0 + 1]), fma4(kk.z, u, s[r0 + 2]), fma4(kk.w, u, s[r0 + 3]);
    }
  }
}

__device__ __forceinline__ void fold_state_entry(const Args& A, const uint32_t* naTab, int batch, int k) {
  const bool ok = A.maxK <= fast::kMaxRows && A.dk <= kWarps * kRows && A.dv % 4 == 0 && A.dv <= kMaxDv && nthreads() == kThreads &&
                  fast::dyn_smem_bytes() >= 4u * (unsigned)fold_state_smem_floats(A.dk, A.dv, A.maxK);
  if (!ok) __trap();
  int b, h, slot, na;
  if (!fold_cta(A, naTab, batch, k, b, h, slot, na)) return;
  const Part p = part_for<kWarps, kRows>(A);
  float* headS = pipe::head_state(A, slot, h);
  float4 s[kRows];
  load_state(A, p, headS, s);
  prefetch_head_ahead(A, batch, kCtasPerSm, GDN_STATE_AHEAD_EIGHTHS, naTab);
  const Geo G = geo_of(A);
  Task T;
  fold_task(A, G, b, h, slot, na, k, T);
  float* kf = fast::dyn_smem();
  float* uf = kf + A.maxK * fast::pad4(A.dk);
  float* gam = uf + A.maxK * fast::pad4(A.dv);
  stage_accepted(A, G, T.pendK + (size_t)h * A.maxK * G.stashRow, na, kf, uf, gam);
  // The ring's entries: their loads go out with the state's (nothing here reads ring history).
  write_conv_state(A, G, T);
  __syncthreads();  // the accepted rows staged
  fold_rows(A, p, na, kf, uf, gam, s);
  store_state(A, p, headS, s);
}

}  // namespace decode
}  // namespace gdn
