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

// What one CTA of gdn_prefill_wy works on: chunk c of sequence s (rows rowc .. rowc + n − 1 of the
// step, positions Pc ..), key head g and its r value heads, and its shared memory (WyLay).
struct WyCta {
  Geo G;
  Seq s;
  WyLay L;
  Scratch X;
  unsigned char* sm;
  float *gkk, *am, *fq, *fk, *beta, *gam;  // G_kk, A then T [C][FT]; norm factors [C]; β, γ [r][C]
  int g, n, rowc, Pc;
  int tid, lane, warp, rb, cb;  // rb, cb: a warp's 16-row block and 32- (or 64-) column block
  int dkPlane, vPlane, tPlane;  // bytes of one plane of the q / k, v and T' tiles
  bool vec;                     // the vectorised conv (4 channels × 8 rows a work item)
};

// Zeroes the pad columns of the q / k tiles (d_k..127) and of the v tile (d_v..dvp−1).
template <int P>
__device__ __forceinline__ void wy_zero_pads(const Args& A, const WyCta& W) {
  const int dk = A.dk, dv = A.dv;
  for (int idx = W.tid; idx < P * C * (DK - dk); idx += WY_THREADS) {
    const int p = idx / (C * (DK - dk)), rem = idx - p * C * (DK - dk);
    const int i = rem / (DK - dk), e = dk + rem % (DK - dk);
    reinterpret_cast<bf16_t*>(W.sm + W.L.qr + p * W.dkPlane)[i * DKT + e] = 0;
    reinterpret_cast<bf16_t*>(W.sm + W.L.kr + p * W.dkPlane)[i * DKT + e] = 0;
  }
  for (int idx = W.tid; idx < P * C * (W.G.dvp - dv); idx += WY_THREADS) {
    const int p = idx / (C * (W.G.dvp - dv)), rem = idx - p * C * (W.G.dvp - dv);
    const int i = rem / (W.G.dvp - dv), e = dv + rem % (W.G.dvp - dv);
    reinterpret_cast<bf16_t*>(W.sm + W.L.v + p * W.vPlane)[i * W.L.vt + e] = 0;
  }
}

// Conv + SiLU of q and k (2·d_k channels, contiguous in qkvz): channel e < d_k is q (tile qr),
// else k (tile kr, column e − d_k). The fast build does both in one pass (two work items per
// thread); the exact one in two (registers).
template <int P>
__device__ __forceinline__ void wy_conv_qk(const Args& A, const WyCta& W) {
  const int dk = A.dk, g = W.g, keyDim = W.G.keyDim, grp = W.G.grp;
  auto chq = [&](int e) { return e < dk ? g * dk + e : keyDim + g * dk + (e - dk); };
  auto colq = [&](int e) { return g * grp + e; };
  if (P == 1) {
    conv_tile<P>(A, W.G, W.s, W.Pc, W.n, 2 * dk, W.vec, chq, colq, W.sm + W.L.qr, W.dkPlane, DKT, W.tid, 0, WY_THREADS, dk, W.sm + W.L.kr);
  } else {
    conv_tile<P>(A, W.G, W.s, W.Pc, W.n, dk, W.vec, chq, colq, W.sm + W.L.qr, W.dkPlane, DKT, W.tid, 0, WY_THREADS);
    auto chk = [&](int e) { return keyDim + g * dk + e; };
    auto colk = [&](int e) { return g * grp + dk + e; };
    conv_tile<P>(A, W.G, W.s, W.Pc, W.n, dk, W.vec, chk, colk, W.sm + W.L.kr, W.dkPlane, DKT, W.tid, 0, WY_THREADS);
  }
}

// Gates of the r value heads (one warp per head): β, g, γ = inclusive cumsum over the chunk.
__device__ __forceinline__ void wy_gates(const Args& A, const WyCta& W) {
  const int r = W.G.r, g = W.g, lane = W.lane;
  for (int hl = W.warp; hl < r; hl += WY_THREADS / 32) {
    const int h = g * r + hl;
    const float aL = expf(A.aLog[h]), dtb = A.dtBias[h];
    float bt[2], gt[2];
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const int i = lane + 32 * q;
      bt[q] = 0.f;
      gt[q] = 0.f;
      if (i < W.n) {
        const float* bar = A.qkvz + (size_t)(W.rowc + i) * W.G.width + W.G.baCol + g * 2 * r;
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
      W.beta[hl * C + i] = bt[q];
      W.gam[hl * C + i] = run + v;
      run += __shfl_sync(0xffffffffu, v, 31);
    }
  }
}

// L2-norm factors per row (from the tiles: hi + lo ≈ the f32 value), q with 1/√d_k.
template <int P>
__device__ __forceinline__ void wy_norm_factors(const Args& A, const WyCta& W) {
  if (W.tid >= 2 * C) return;
  const int which = W.tid >> 6, i = W.tid & 63;
  const unsigned char* t = W.sm + (which ? W.L.kr : W.L.qr);
  float ss = 0.f;
  for (int e = 0; e < DK; e += 8) {
    const uint4 h4 = *reinterpret_cast<const uint4*>(t + 2 * (i * DKT + e));
    uint4 l4 = make_uint4(0, 0, 0, 0);
    if (P == 2) l4 = *reinterpret_cast<const uint4*>(t + W.dkPlane + 2 * (i * DKT + e));
    const uint32_t hw[4] = {h4.x, h4.y, h4.z, h4.w}, lw[4] = {l4.x, l4.y, l4.z, l4.w};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float x0 = bf_lo(hw[q]) + bf_lo(lw[q]), x1 = bf_hi(hw[q]) + bf_hi(lw[q]);
      ss += x0 * x0 + x1 * x1;
    }
  }
  const float f = i < W.n ? (which ? 1.0f : 1.0f / sqrtf((float)A.dk)) / sqrtf(ss + 1e-6f) : 0.f;
  (which ? W.fk : W.fq)[i] = f;
}

// Raw q and k of the chunk's rows to the scratch (16-byte pieces, columns < dks): a thread's
// piece q and first row i0 are fixed, its rows step by 16 from one pointer per tile and plane.
template <int P>
__device__ __forceinline__ void wy_store_raw_qk(const Args& A, const WyCta& W) {
  const int pieces = W.G.dks / 8, q = W.tid & 15, i0 = W.tid >> 4;
  const long long step = 16LL * W.G.dks;
  if (q >= pieces) return;
#pragma unroll
  for (int p = 0; p < P; ++p)
#pragma unroll
    for (int which = 0; which < 2; ++which) {
      const unsigned char* src = W.sm + (which ? W.L.kr : W.L.qr) + p * W.dkPlane + 2 * (i0 * DKT + 8 * q);
      bf16_t* dst = (which ? W.X.kr : W.X.qr) + p * W.X.qrPlane + ((long long)W.g * A.rows + W.rowc + i0) * W.G.dks + 8 * q;
#pragma unroll
      for (int m = 0; m < C / 16; ++m)
        if (i0 + 16 * m < W.n) *reinterpret_cast<uint4*>(dst + m * step) = *reinterpret_cast<const uint4*>(src + 2 * 16 * m * DKT);
    }
}

// G_kk = K_raw K_rawᵀ (f32, lower part): warp (rb = w & 3, 32-column block cb = w >> 2).
template <int P>
__device__ __forceinline__ void wy_gram_kk(const Args& A, const WyCta& W) {
  const int nks = (A.dk + 15) >> 4, rb = W.rb, cb = W.cb, lane = W.lane;
  const uint32_t kh = saddr(W.sm + W.L.kr), kl = kh + W.dkPlane;
  if (32 * cb > 16 * rb + 15) return;
  float acc[4][4];
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[a][e] = 0.f;
  gram_block<P>(kh, kl, kh, kl, rb, cb, nks, lane, acc);
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
    const int i0 = 16 * rb + (lane >> 2), j0 = 32 * cb + 8 * nt + 2 * (lane & 3);
    W.gkk[i0 * FT + j0] = acc[nt][0];
    W.gkk[i0 * FT + j0 + 1] = acc[nt][1];
    W.gkk[(i0 + 8) * FT + j0] = acc[nt][2];
    W.gkk[(i0 + 8) * FT + j0 + 1] = acc[nt][3];
  }
}

// A[i][j] = β_i f_i f_j G_kk[i][j] e^{γ_i − γ_j}, j < i < n, for the value head of β bt and γ gm.
// A thread's 4 columns are fixed (256 threads, 16 groups), its rows step by 16: the row factors
// load once per 4 entries, G_kk and A move as float4. Every entry is computed and the strict lower
// part selected (G_kk is unwritten above it): a branch around the loads cost more than the product.
__device__ __forceinline__ void wy_build_a(const WyCta& W, const float* bt, const float* gm) {
  const int j = 4 * (W.tid & 15);
  const float4 fj = *reinterpret_cast<const float4*>(W.fk + j), gj = *reinterpret_cast<const float4*>(gm + j);
  for (int i = W.tid >> 4; i < C; i += WY_THREADS / 16) {
    const float ri = bt[i] * W.fk[i], gi = gm[i];
    const float4 g = *reinterpret_cast<const float4*>(W.gkk + i * FT + j);
    const bool row = i < W.n;
    float4 v;
    v.x = row && j < i ? ri * fj.x * g.x * exp_ftz(gi - gj.x) : 0.f;
    v.y = row && j + 1 < i ? ri * fj.y * g.y * exp_ftz(gi - gj.y) : 0.f;
    v.z = row && j + 2 < i ? ri * fj.z * g.z * exp_ftz(gi - gj.z) : 0.f;
    v.w = row && j + 3 < i ? ri * fj.w * g.w * exp_ftz(gi - gj.w) : 0.f;
    *reinterpret_cast<float4*>(W.am + i * FT + j) = v;
  }
}

// T = (I + A)⁻¹ in place of A, by blocks of 16 (the whole CTA; one thread per column of the 64
// took 2 × 64 dependent steps per head while the other warps waited at the barrier). First the
// diagonal blocks, by forward substitution (thread = block, column).
__device__ __forceinline__ void wy_solve_diagonal(const WyCta& W) {
  if (W.tid >= C) return;
  const int bd = W.tid >> 4, col = W.tid & 15;
  const float* ab = W.am + 16 * bd * FT + 16 * bd;
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
  for (int i = 0; i < 16; ++i) W.am[(16 * bd + i) * FT + 16 * bd + col] = x[i];
}

// Then block rows ib = 1..3 (after wy_solve_diagonal and a barrier): M_jb = Σ_{k ∈ [16jb, 16ib)}
// A[ib-row][k] T[k][jb-col] (into the T'_W tile's room, free until wy_t_primes), T_{ib,jb} =
// −T_{ib,ib} M_jb. The block rows unrolled (ib a constant in each copy, so the loops have fixed
// trips); ends at a barrier.
__device__ __forceinline__ void wy_solve_rows(const WyCta& W) {
  float* mt = reinterpret_cast<float*>(W.sm + W.L.tw);  // ≤ 3 blocks of 16 × 16 f32
  const int tid = W.tid;
  float* am = W.am;
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
}

// Conv + SiLU of value head h's v channels (hl: its index in key head g), by every thread.
template <int P>
__device__ __forceinline__ void wy_conv_v(const Args& A, const WyCta& W, int h, int hl) {
  const int vbase = 2 * W.G.keyDim + h * A.dv, cbase = W.g * W.G.grp + 2 * A.dk + hl * A.dv;
  auto chv = [&](int e) { return vbase + e; };
  auto colv = [&](int e) { return cbase + e; };
  conv_tile<P>(A, W.G, W.s, W.Pc, W.n, A.dv, W.vec, chv, colv, W.sm + W.L.v, W.vPlane, W.L.vt, W.tid, 0, WY_THREADS);
}

// T'_W = T diag(β e^γ f_k), T'_U = T diag(β) as bf16 planes (the A operands of W and U); a thread's
// 4 columns are fixed (256 threads, 16 groups of 4 columns): a float4 of T in, 8-byte pieces of
// each plane out (a column per thread stored 2-byte pieces: many more store instructions).
template <int P>
__device__ __forceinline__ void wy_t_primes(const WyCta& W, const float* bt, const float* gm) {
  const int j = 4 * (W.tid & 15);
  float cw[4], cu[4];
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    cu[u] = bt[j + u];
    cw[u] = cu[u] * exp_ftz(gm[j + u]) * W.fk[j + u];
  }
  unsigned char* tw = W.sm + W.L.tw;
  unsigned char* tu = W.sm + W.L.tu;
  for (int i = W.tid >> 4; i < C; i += WY_THREADS / 16) {
    const float4 x = *reinterpret_cast<const float4*>(W.am + i * FT + j);
    uint32_t w01[2], w23[2], u01[2], u23[2];
    to_planes<P>(x.x * cw[0], x.y * cw[1], w01);
    to_planes<P>(x.z * cw[2], x.w * cw[3], w23);
    to_planes<P>(x.x * cu[0], x.y * cu[1], u01);
    to_planes<P>(x.z * cu[2], x.w * cu[3], u23);
    const int off = 2 * (i * CT + j);
    *reinterpret_cast<uint2*>(tw + off) = make_uint2(w01[0], w23[0]);
    *reinterpret_cast<uint2*>(tu + off) = make_uint2(u01[0], u23[0]);
    if (P == 2) {
      *reinterpret_cast<uint2*>(tw + W.tPlane + off) = make_uint2(w01[1], w23[1]);
      *reinterpret_cast<uint2*>(tu + W.tPlane + off) = make_uint2(u01[1], u23[1]);
    }
  }
}

// W = T'_W K_raw (rows 16rb.., d_k columns 64cb..: 8 n-tiles; T' is lower triangular) and U =
// T'_U V (rows 16rb.., columns of half cb of dvp, 64 at a time) of value head h, to the scratch.
template <int P>
__device__ __forceinline__ void wy_w_and_u(const Args& A, const WyCta& W, int h) {
  const uint32_t twh = saddr(W.sm + W.L.tw), twl = twh + W.tPlane;
  const uint32_t tuh = saddr(W.sm + W.L.tu), tul = tuh + W.tPlane;
  const uint32_t krh = saddr(W.sm + W.L.kr), krl = krh + W.dkPlane;
  const uint32_t vh = saddr(W.sm + W.L.v), vl = vh + W.vPlane;
  const int t4 = W.lane & 3, rb = W.rb, cb = W.cb;
  const int rA = 16 * rb + (W.lane >> 2), rB = rA + 8;  // rows of this thread's accumulators
  const Geo& G = W.G;
  {
    float acc[8][4];
#pragma unroll
    for (int a = 0; a < 8; ++a)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[a][e] = 0.f;
    lower_times<P>(twh, twl, krh, krl, DKT, 64 * cb, 64, rb, W.lane, acc);
    st_block<P>(W.X.w + ((long long)h * A.rows + W.rowc + rA) * G.dks + 64 * cb + 2 * t4, W.X.wPlane, G.dks, acc, rA < W.n, rB < W.n,
                G.dks - 64 * cb, t4);
  }
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
    lower_times<P>(tuh, tul, vh, vl, W.L.vt, c0, ncols, rb, W.lane, acc);
    st_block<P>(W.X.u + ((long long)h * A.rows + W.rowc + rA) * G.dvs + c0 + 2 * t4, W.X.uPlane, G.dvs, acc, rA < W.n, rB < W.n,
                min(ncols, G.dvs - c0), t4);
  }
}

// A_qk = (Q_raw K_rawᵀ) ⊙ f_q,i f_k,j e^{γ_i − γ_j} for j ≤ i < n (rows 16rb.., cols 32cb..) of value
// head h (γ gm), to the scratch. The row factors once, the column factors per n-tile; entries above
// the diagonal are computed and selected away (as in wy_build_a).
template <int P>
__device__ __forceinline__ void wy_aqk(const Args& A, const WyCta& W, int h, const float* gm) {
  const uint32_t krh = saddr(W.sm + W.L.kr), krl = krh + W.dkPlane;
  const uint32_t qrh = saddr(W.sm + W.L.qr), qrl = qrh + W.dkPlane;
  const int t4 = W.lane & 3, rb = W.rb, cb = W.cb, nks = (A.dk + 15) >> 4;
  const int rA = 16 * rb + (W.lane >> 2), rB = rA + 8;
  float acc[4][4];
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[a][e] = 0.f;
  if (32 * cb <= 16 * rb + 15) {
    gram_block<P>(qrh, qrl, krh, krl, rb, cb, nks, W.lane, acc);
  }
  const float fqr[2] = {W.fq[rA], W.fq[rB]}, gmr[2] = {gm[rA], gm[rB]};
  bf16_t* const qrow[2] = {W.X.aqk + ((long long)h * A.rows + W.rowc + rA) * C + 32 * cb + 2 * t4,
                           W.X.aqk + ((long long)h * A.rows + W.rowc + rB) * C + 32 * cb + 2 * t4};
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
    const int j0 = 32 * cb + 8 * nt + 2 * t4;
    const float fk0 = W.fk[j0], fk1 = W.fk[j0 + 1], gm0 = gm[j0], gm1 = gm[j0 + 1];
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int i = hf ? rB : rA;
      if (i < W.n) {
        const float v0 = acc[nt][2 * hf] * fqr[hf] * fk0 * exp_ftz(gmr[hf] - gm0);
        const float v1 = acc[nt][2 * hf + 1] * fqr[hf] * fk1 * exp_ftz(gmr[hf] - gm1);
        st_pair<P>(qrow[hf], W.X.aqkPlane, 8 * nt, j0 <= i ? v0 : 0.f, j0 + 1 <= i ? v1 : 0.f);
      }
    }
  }
}

// Per-row scales of value head h (γ gm): f_q e^γ, f_k e^{γ_last − γ}, γ.
__device__ __forceinline__ void wy_row_scales(const Args& A, const WyCta& W, int h, const float* gm) {
  if (W.tid >= W.n) return;
  const int i = W.tid;
  const float gLast = gm[max(W.n - 1, 0)];
  float4 v = make_float4(W.fq[i] * expf(gm[i]), W.fk[i] * expf(gLast - gm[i]), gm[i], 0.f);
  *reinterpret_cast<float4*>(W.X.sc + ((long long)h * A.rows + W.rowc + i) * 4) = v;
}

// One CTA: the chunk's q / k conv, gates, norms, raw rows and G_kk once, then per value head A,
// T = (I + A)⁻¹, the v conv, T'_W and T'_U, and W, U, A_qk and the row scales to the scratch.
template <int P>
__device__ __forceinline__ void wy_chunk(const Args& A) {
  WyCta W;
  W.G = geo_of(A);
  int b, c;
  if (!chunk_of(A, blockIdx.x, b, c)) return;
  if (!seq_of(A, b, W.s)) return;
  W.g = blockIdx.y;
  if (W.g >= A.hk) return;
  W.tid = threadIdx.x, W.lane = W.tid & 31, W.warp = W.tid >> 5;
  W.rb = W.warp & 3, W.cb = W.warp >> 2;
  W.n = min(C, W.s.nrows - c * C);
  W.rowc = W.s.row0 + c * C;  // step row of the chunk's first row
  W.Pc = W.s.P0 + c * C;      // its position
  W.L = wy_lay(P, A.dv, W.G.r);
  W.sm = dyn_smem();
  W.dkPlane = C * DKT * 2, W.vPlane = C * W.L.vt * 2, W.tPlane = C * CT * 2;
  W.gkk = reinterpret_cast<float*>(W.sm + W.L.gkk);
  W.am = reinterpret_cast<float*>(W.sm + W.L.am);
  W.fq = reinterpret_cast<float*>(W.sm + W.L.fq);
  W.fk = reinterpret_cast<float*>(W.sm + W.L.fk);
  W.beta = reinterpret_cast<float*>(W.sm + W.L.beta);
  W.gam = reinterpret_cast<float*>(W.sm + W.L.gam);
  W.X = scratch_of<P>(A, W.G);
  // The vectorised conv for both builds: the exact one took the scalar conv while its unrolled
  // solve left no registers (180 now, no spills, 1 CTA per SM).
  W.vec = (A.dk % 4 == 0) && (A.dv % 4 == 0) && A.K <= KMAX4;

  wy_zero_pads<P>(A, W);
  wy_conv_qk<P>(A, W);
  wy_gates(A, W);
  __syncthreads();
  wy_norm_factors<P>(A, W);
  wy_store_raw_qk<P>(A, W);
  wy_gram_kk<P>(A, W);
  __syncthreads();

  for (int hl = 0; hl < W.G.r; ++hl) {
    const int h = W.g * W.G.r + hl;
    const float* bt = W.beta + hl * C;
    const float* gm = W.gam + hl * C;
    wy_build_a(W, bt, gm);
    __syncthreads();
    wy_solve_diagonal(W);
    wy_conv_v<P>(A, W, h, hl);
    __syncthreads();
    wy_solve_rows(W);
    wy_t_primes<P>(W, bt, gm);
    __syncthreads();
    wy_w_and_u<P>(A, W, h);
    wy_aqk<P>(A, W, h, gm);
    wy_row_scales(A, W, h, gm);
    __syncthreads();  // am, the T' tiles and the v tile are rewritten by the next head
  }
}

}  // namespace gdnp
