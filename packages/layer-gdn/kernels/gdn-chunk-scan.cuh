// Kernel 2 of the chunked prefill (gdn_prefill_scan[_x3], entry points in gdn-chunk.cu): the
// recurrence over a sequence's chunks, in order, with the gated RMSNorm fused where a cluster holds
// the whole head.
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
#pragma once
#include "gdn-chunk-prims.cuh"
#include "gdn-chunk-seq.cuh"

namespace gdnp {

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
// clusters of 2): a thread's piece and rows are fixed, and its
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
// its mma (ncu, 8 192 rows: integer ops were most of the scan's instructions).
template <int P>
__device__ __forceinline__ void scan_load(const Args& A, const Geo& G, const Scratch& X, const ScanLay& L, unsigned char* bufp, int kg,
                                          int h, int rowc, int n, int colU0, int mpc, int tid, int nthr) {
  const uint32_t sb = saddr(bufp);
  const int dkp = G.dks / 8;  // pieces of a d_k row present in the scratch
  const int up = 2 * mpc;     // pieces of the U tile row (≤ 8)
  const int dkPlane = C * DKT * 2;
  const long long kRow = (long long)kg * A.rows + rowc, hRow = (long long)h * A.rows + rowc;
  if (P == 1 && dkp == 16 && G.dvs == 128 && nthr == 256 && up == 8) {
    scan_load_fast<256>(L, sb, X, kRow, hRow, n, colU0, tid);
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
        const size_t yr = row * (size_t)A.hv * dv + (size_t)h * dv;
        if (j0 + g8 < dv) store_y(A, yr + j0 + g8, nw0 * op[q][e2] * inv * siluf_(zr[0]));
        if (j0 + g8 + 8 < dv) store_y(A, yr + j0 + g8 + 8, nw1 * op[q][2 + e2] * inv * siluf_(zr[8]));
      }
    }
}

// The ring after the step: positions [max(L, end − K), end) from the conv stash / the step's rows,
// spread over the sequence's CTAs (CTA `me` of gridDim.x · H_v; nothing in the scan reads the ring:
// gdn_prefill_wy, before it, did). The last piece's scan does it.
__device__ __forceinline__ void commit_ring(const Args& A, const Geo& G, const Seq& s, int me, int nthr, int tid) {
  const int dk = A.dk, dv = A.dv;
  const int end = s.P0 + s.nrows, pa = max(s.L, end - A.K);
  const int npos = end - pa;
  if (npos <= 0) return;
  const int ctas = gridDim.x * A.hv;
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

// The slot's pending carried rows folded into this warp's S^T fragment (the first piece's scan):
// S ← e^{γ_{n−1}} S + Σ_t e^{γ_{n−1} − γ_t} k_t u_tᵀ (stash, KERNELS.md). Fragment layout as scan_seq's sf.
__device__ __forceinline__ void fold_pending_rows(const Args& A, const Geo& G, const Seq& s, int nPend, int h, int hh, int t4, int g8, int j0,
                                                  float (&sf)[8][4]) {
  const int dk = A.dk, dv = A.dv;
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

  if (ce == nch) commit_ring(A, G, s, h * gridDim.x + t, nthr, tid);

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
  if (nPend > 0 && cb == 0) fold_pending_rows(A, G, s, nPend, h, hh, t4, g8, j0, sf);

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
    float* ybase = A.o + (size_t)prevRow * yStride + (size_t)h * dv + colU0;  // raw O, f32: gdn_prefill_norm reads it
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
      a_operand<P>(sf[2 * ks], sf[2 * ks + 1], ah, al);
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
    // chunk's start they stalled the warps before any mma issued, and the scan was slower).
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
      a_operand<P>(px[2 * ks], px[2 * ks + 1], ah, al);
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
        a_operand<P>(px[2 * ks], px[2 * ks + 1], ah, al, k0a, k0b, k1a, k1b);
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
            float* yr = A.o + (size_t)(rowc + rr) * yStride + (size_t)h * dv;
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

}  // namespace gdnp
