// Kernel 1 of the chunked prefill (gdn_prefill_wy[_x3], entry points in gdn-chunk.cu): the WY
// factors of every chunk, written to the prefill scratch for the scan (gdn-chunk-scan.cuh).
#pragma once
#include "gdn-chunk-conv.cuh"

namespace gdnp {

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

// acc += X Yᵀ over d_k for a warp's block: rows 16rb .. of X, rows 32cb .. + 31 of Y (both
// [row][d_k] bf16 tiles in shared memory, hi and lo planes; nks k-steps of 16). G_kk (X = Y = K) and
// A_qk (X = Q, Y = K) are this product.
template <int P>
__device__ __forceinline__ void gram_block(uint32_t xh, uint32_t xl, uint32_t yh, uint32_t yl, int rb, int cb, int nks, int lane, float (&acc)[4][4]) {
  for (int ks = 0; ks < nks; ++ks) {
    uint32_t ah[4], al[4] = {0, 0, 0, 0};
    ldsm4(ah, a_addr(xh, DKT, 16 * rb, 16 * ks, lane));
    if (P == 2) ldsm4(al, a_addr(xl, DKT, 16 * rb, 16 * ks, lane));
#pragma unroll
    for (int np = 0; np < 2; ++np) {
      uint32_t bh[4], bl[4] = {0, 0, 0, 0};
      ldsm4(bh, bnk_addr(yh, DKT, 32 * cb + 16 * np, 16 * ks, lane));
      if (P == 2) ldsm4(bl, bnk_addr(yl, DKT, 32 * cb + 16 * np, 16 * ks, lane));
      mmaP<P>(acc[2 * np], ah, al, bh[0], bh[1], bl[0], bl[1]);
      mmaP<P>(acc[2 * np + 1], ah, al, bh[2], bh[3], bl[2], bl[3]);
    }
  }
}

// acc += T' Y for a warp's block: rows 16rb .. of the lower-triangular T' (a [row][64] bf16 tile,
// k-steps up to its diagonal block), columns c0 .. c0 + ncols − 1 (< 64; pairs of n-tiles) of Y
// (a [row][col] bf16 tile of row stride yStride, read transposed); hi and lo planes. W = T'_W K_raw
// and U = T'_U V are this product.
template <int P>
__device__ __forceinline__ void lower_times(uint32_t th, uint32_t tl, uint32_t yh, uint32_t yl, int yStride, int c0, int ncols, int rb, int lane,
                                            float (&acc)[8][4]) {
  for (int ks = 0; ks <= rb; ++ks) {
    uint32_t ah[4], al[4] = {0, 0, 0, 0};
    ldsm4(ah, a_addr(th, CT, 16 * rb, 16 * ks, lane));
    if (P == 2) ldsm4(al, a_addr(tl, CT, 16 * rb, 16 * ks, lane));
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      if (16 * np < ncols) {
        uint32_t bh[4], bl[4] = {0, 0, 0, 0};
        ldsm4t(bh, bkn_addr(yh, yStride, 16 * ks, c0 + 16 * np, lane));
        if (P == 2) ldsm4t(bl, bkn_addr(yl, yStride, 16 * ks, c0 + 16 * np, lane));
        mmaP<P>(acc[2 * np], ah, al, bh[0], bh[1], bl[0], bl[1]);
        mmaP<P>(acc[2 * np + 1], ah, al, bh[2], bh[3], bl[2], bl[3]);
      }
    }
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
      gram_block<P>(kh, kl, kh, kl, rb, cb, nks, lane, acc);
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
      lower_times<P>(twh, twl, krh, krl, DKT, 64 * cb, 64, rb, lane, acc);
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
        // (A pair of n-tiles: the second may lie past dvp when ncols % 16 == 8; it reads the tile's
        // zero padding columns, vt = dvp + 8, and is not stored.)
        lower_times<P>(tuh, tul, vh, vl, L.vt, c0, ncols, rb, lane, acc);
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
        gram_block<P>(qrh, qrl, krh, krl, rb, cb, nks, lane, acc);
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

}  // namespace gdnp
