// Mixture-of-experts kernels of layer-std (src/moe-kernels.ts; reference src/moe.cpu.ts;
// KERNELS.md):
//   (std_moe_route and the few-row route kernels: std-moe-route.cu; std_moe_group, which groups
//   the entries by expert for the grouped kernels: std-moe-group.cu)
//   std_moe_experts_up    h[rj] = silu(gate_e x_r) ⊙ (up_e x_r) for every entry rj = r·topK + j of
//                         expert e; grid [⌈I / 32⌉, min(E, rows·topK) expert slots], 128 threads:
//                         a CTA takes 4 tiles of 8 intermediate rows in turn, a warp 2 rows of a
//                         tile, the expert's entries 16 at a time, their inputs staged in shared
//                         memory once for the 4 tiles where they fit (EntryStage)
//   std_moe_experts_down  y[rj] = down_e h[rj]; grid [⌈D / 64⌉, min(E, rows·topK)], 128 threads,
//                         8 tiles of 8 output values a CTA, a warp 2 values of a tile, staged alike
//   std_moe_experts       out[r] = Σ_j w_rj · y[r][j], summed in order j (no atomics: deterministic,
//                         `out` overwritten, never accumulated)
//   std_moe_combine       out = routed + σ(gate) · shared (or + shared)
//   std_moe_experts_up_rowwise, std_moe_experts_rowwise: the per-(row, expert) kernels (each row
//                         re-reads its experts' weights), the layer's path for small batches; the
//                         grouped ones are bit-identical to them (test/gpu)
//
// Types: the rows x, the activations h, the expert outputs y and every output are of the row type R
// (f32, bf16, f16); the expert weights of type W: f32 / bf16 / f16 (R's own type), or FP8 E4M3
// codes with f32 scales per 128 × 128 block (bf16 / f16 rows). The four expert kernels are
// templates on (W, R), one symbol per pair (suffix: none for f32, _bf16, _f16, _fp8_bf16,
// _fp8_f16), since they are heavy on registers; std_moe_experts and std_moe_combine take the row
// type as a code. Products and sums are f32; h and y are rounded to R where they are stored, as the
// row-wise down kernel rounds each expert's sum before weighting it.
//
// FP8: a lane takes 16 codes of a weight row at once (one 16-byte load: kSteps<W> = 4 steps of 4
// elements), which lie in one 128-column block, so each 4-element step adds scale · (codes · x)
// with one fma; float weights take one 4-element step at a time. The scalar path (a width not a
// multiple of 4 · kSteps<W>) dequantizes each code. Scales of an expert's gate and up are
// two grids [⌈I/128⌉][⌈D/128⌉] (the part structure of the stacked [2I][D] weight, whether or not I
// is a whole number of blocks), of its down one [⌈D/128⌉][⌈I/128⌉].
//
// Decode reads every weight of a chosen expert once per step, whatever the number of rows that
// chose it: a CTA owns (expert, a few tiles of 8 weight rows) and runs the expert's entries through
// each tile 16 at a time. Each value is computed exactly as by the row-wise kernels (lane l sums
// its chunks of kSteps<W> 4-element steps, c ≡ l mod 32, in order, the same fma sequence, the
// xor-butterfly tree over lanes), so a row's result is bit-identical whatever the batch and
// whichever rows share its experts.
#include "std-common.cuh"
#include "std-mma.cuh"
#include "std-moe-groups.cuh"

using namespace stdk;

namespace {

/** Intermediate rows of one (row, expert) per CTA tile of std_moe_experts_up_rowwise (expertsUpRowwiseLaunch): two a warp. */
constexpr int kUpRows = 16;
/** Output values of one row per CTA tile of std_moe_experts_rowwise (expertsRowwiseLaunch): one a warp. */
constexpr int kDownRows = 8;
/** One row (decode at batch 1): output values per CTA of std_moe_experts_rowwise, two warps a value. */
constexpr int kSplitValues = 4;
/** The most slots (top-k and shared) of the one-row split; more take the one-warp-a-value path. */
constexpr int kSplitSlots = 32;
// One row (decode at batch 1) takes more loads in flight: the up pass unrolled by 8 with a warp's
// two rows at once (its launch gives a CTA half the rows), the down pass taking 4 of the row's
// experts a round and splitting each value's slots over two warps (kSplitValues values a CTA);
// several rows keep unroll 4, one row and one expert at a time and a warp a value, which measured
// faster there (docs/benchmarks.md). The sums are the same sequences either way, and the slots
// are added in the same order, so the bits are too.
/** Weight rows per warp of the grouped kernels (tile of a CTA: 2 · warps; launches: src/moe-kernels.ts). */
constexpr int kRowsPerWarp = 2;
/** Entries (row, slot) of one expert run through a warp's weight rows at a time. */
constexpr int kEntries = 16;
static_assert(kRowsPerWarp * kEntries == 32, "one value per lane after warp_sum_32");

/**
 * The dot product of 4 elements as the expert kernels round it (mul y, fma x, fma z, fma w: the
 * order nvcc gave the plain expression in the f32 kernels, kept so their results are unchanged),
 * spelled out so the grouped and the row-wise kernels round alike.
 */
__device__ __forceinline__ float dot4_rn(const float4 a, const float4 b) {
  return __fmaf_rn(a.w, b.w, __fmaf_rn(a.z, b.z, __fmaf_rn(a.x, b.x, __fmul_rn(a.y, b.y))));
}


/** The weight-type code a kernel takes (FLOAT_DTYPE_CODE, and 3 for FP8 E4M3). */
template <typename W>
__device__ __forceinline__ int weight_code() {
  if constexpr (is_fp8<W>) return 3;
  else return row_code<W>;
}

/** A kernel of (W, R) launched with other type codes would read garbage: trap instead. */
template <typename W, typename R>
__device__ __forceinline__ void check_codes(int wDtype, int rowDtype) {
  if (wDtype != weight_code<W>() || rowDtype != row_code<R>) __trap();
}

/** FP8 scales of row i of part p (0 gate, 1 up) of expert e's gate/up weight; nullptr for a float W. */
template <typename W>
__device__ __forceinline__ const float* gate_up_scales(const float* scales, int e, int part, int i, int I, int D) {
  if constexpr (is_fp8<W>) {
    const int bI = (I + metrale::kFp8Block - 1) / metrale::kFp8Block, bD = (D + metrale::kFp8Block - 1) / metrale::kFp8Block;
    return scales + ((size_t)(2 * e + part) * bI + i / metrale::kFp8Block) * bD;
  } else {
    return nullptr;
  }
}

/** FP8 scales of row d of expert e's down weight [D][I]; nullptr for a float W. */
template <typename W>
__device__ __forceinline__ const float* down_scales(const float* scales, int e, int d, int D, int I) {
  if constexpr (is_fp8<W>) {
    const int bD = (D + metrale::kFp8Block - 1) / metrale::kFp8Block, bI = (I + metrale::kFp8Block - 1) / metrale::kFp8Block;
    return scales + ((size_t)e * bD + d / metrale::kFp8Block) * bI;
  } else {
    return nullptr;
  }
}

/** The scale of 128-column block b of a weight row (1 for a float W, never read). */
template <typename W>
__device__ __forceinline__ float block_scale(const float* rowScales, int b) {
  if constexpr (is_fp8<W>) return __ldg(rowScales + b);
  else return 1.f;
}

/** One 4-element step of a lane's dot product: + w·x (float W), + scale · (codes·x) (FP8). */
template <typename W>
__device__ __forceinline__ float dot_step4(float acc, const float4 w, const float4 x, float scale) {
  if constexpr (is_fp8<W>) return __fmaf_rn(scale, dot4_rn(w, x), acc);
  else return __fadd_rn(acc, dot4_rn(w, x));
}

/** One element of the scalar path: + w·x (float W), + (code · scale)·x (FP8). */
template <typename W>
__device__ __forceinline__ float dot_step1(float acc, float w, float x, float scale) {
  if constexpr (is_fp8<W>) return __fmaf_rn(__fmul_rn(w, scale), x, acc);
  else return __fmaf_rn(w, x, acc);
}

/**
 * 4-element steps a lane takes at once on the vector path: 4 for FP8 weights (16 codes, one 16-byte
 * load; 4 codes a load left too few bytes in flight), 1 for float weights.
 */
template <typename W>
constexpr int kSteps = is_fp8<W> ? 4 : 1;

/** Whether a width of W's weight rows takes the vector path (whole chunks of kSteps<W> steps). */
template <typename W>
__device__ __forceinline__ bool vector_width(int width) { return (width & (4 * kSteps<W> - 1)) == 0; }

/** Chunk c of a weight row as loaded: FP8, its 16 codes (one 16-byte load); a float W, its one step. */
template <typename W>
using WeightChunk = std::conditional_t<is_fp8<W>, uint4, float4>;

template <typename W>
__device__ __forceinline__ WeightChunk<W> ldg_chunk(const W* p, int c) {
  if constexpr (is_fp8<W>) return __ldg(reinterpret_cast<const uint4*>(p) + c);
  else return ldg4(p, c);
}

/** Step t of a loaded chunk as values (the codes unpacked when they are used, so a chunk holds 4 registers). */
template <typename W>
__device__ __forceinline__ float4 step_of(const WeightChunk<W>& w, int t) {
  if constexpr (is_fp8<W>) return unpack_e4m3x4(t == 0 ? w.x : t == 1 ? w.y : t == 2 ? w.z : w.w);
  else return w;
}

/** The 128-column block of chunk c (its steps lie in one). */
template <typename W>
__device__ __forceinline__ int chunk_block(int c) { return (c * kSteps<W>) >> 5; }

/**
 * Lane sums of N gate / up row pairs (g[n], u[n]) against x at once (the vector path), U steps of 4
 * unrolled (U / kSteps chunks): the N rows' loads are in flight together. Each row's sums are the
 * sequence it gets alone (N = 1), in the same order.
 */
template <int U, int N, typename W, typename R>
__device__ __forceinline__ void up_dots4(const R* __restrict__ x, const W* const (&g)[N], const W* const (&u)[N], const float* const (&gs)[N],
                                         const float* const (&us)[N], int D, int lane, float (&sg)[N], float (&su)[N]) {
  constexpr int V = kSteps<W>;
#pragma unroll(U / V)
  for (int c = lane; c < (D >> 2) / V; c += 32) {
    WeightChunk<W> gc[N], uc[N];
    float gsc[N], usc[N];
#pragma unroll
    for (int n = 0; n < N; n++) {
      gc[n] = ldg_chunk(g[n], c);
      uc[n] = ldg_chunk(u[n], c);
      gsc[n] = block_scale<W>(gs[n], chunk_block<W>(c));
      usc[n] = block_scale<W>(us[n], chunk_block<W>(c));
    }
#pragma unroll
    for (int t = 0; t < V; t++) {
      const float4 xv = ldg4(x, (size_t)c * V + t);
#pragma unroll
      for (int n = 0; n < N; n++) {
        sg[n] = dot_step4<W>(sg[n], step_of<W>(gc[n], t), xv, gsc[n]);
        su[n] = dot_step4<W>(su[n], step_of<W>(uc[n], t), xv, usc[n]);
      }
    }
  }
}

/**
 * h[i[n]] = silu(g · x) · (u · x) for N intermediate rows of expert e whose gate and up rows start
 * at G and Ug (N = 2: a warp's two rows of a one-row step, their loads in flight together); rows
 * n ≥ `count` repeat row 0's addresses and are not stored. Each row's sums are the sequence it
 * gets alone.
 */
template <int U, int N, typename W, typename R>
__device__ __forceinline__ void up_rows(const R* __restrict__ x, const W* __restrict__ G, const W* __restrict__ Ug, const float* __restrict__ scales,
                                        R* __restrict__ hr, const int (&i)[N], int count, int e, int I, int D, bool vec, int lane) {
  const W* g[N];
  const W* u[N];
  const float* gs[N];
  const float* us[N];
  float sg[N], su[N];
#pragma unroll
  for (int n = 0; n < N; n++) {
    const int row = n < count ? i[n] : i[0];
    g[n] = G + (size_t)row * D;
    u[n] = Ug + (size_t)row * D;
    gs[n] = gate_up_scales<W>(scales, e, 0, row, I, D);
    us[n] = gate_up_scales<W>(scales, e, 1, row, I, D);
    sg[n] = su[n] = 0.f;
  }
  if (vec) {
    up_dots4<U, N, W, R>(x, g, u, gs, us, D, lane, sg, su);
  } else {
    for (int k = lane; k < D; k += 32) {
      const float xv = ldg_value(x, k);
#pragma unroll
      for (int n = 0; n < N; n++) {
        sg[n] = dot_step1<W>(sg[n], ldg_value(g[n], k), xv, block_scale<W>(gs[n], k >> 7));
        su[n] = dot_step1<W>(su[n], ldg_value(u[n], k), xv, block_scale<W>(us[n], k >> 7));
      }
    }
  }
#pragma unroll
  for (int n = 0; n < N; n++) {
    const float a = warp_sum(sg[n]), b = warp_sum(su[n]);
    if (lane == 0 && n < count) store_value(hr, i[n], silu(a) * b);
  }
}

template <typename W, typename R>
__device__ __forceinline__ void experts_up_rowwise(const R* __restrict__ input, const int32_t* __restrict__ ids, const W* __restrict__ gateUp,
                                                   const float* __restrict__ scales, R* __restrict__ h, int rows, int hidden, int inter, int experts,
                                                   int topK) {
  const int D = hidden, I = inter;
  const int lane = lane_id(), nw = num_warps();
  const bool vec = vector_width<W>(D) && aligned16(input) && aligned16(gateUp);
  for (int rj = blockIdx.x; rj < rows * topK; rj += gridDim.x) {
    const int r = rj / topK;
    const int e = ids[rj];
    const bool valid = e >= 0 && e < experts;
    const int ev = valid ? e : 0;
    const R* x = input + (size_t)r * D;
    R* hr = h + (size_t)rj * I;
    const W* G = gateUp + (size_t)ev * 2 * I * D;
    const W* U = G + (size_t)I * D;
    for (int i0 = blockIdx.y * kUpRows; i0 < I; i0 += gridDim.y * kUpRows) {
      const int iEnd = min(I, i0 + kUpRows);
      if (!valid) {
        for (int i = i0 + warp_id(); i < iEnd; i += nw)
          if (lane == 0) store_value(hr, i, 0.f);
      } else if (rows == 1) {
        // One row: a warp's two rows of the tile (i, i + nw) at once.
        for (int i = i0 + warp_id(); i < iEnd; i += 2 * nw) {
          const int pair[2] = {i, i + nw};
          up_rows<8, 2, W, R>(x, G, U, scales, hr, pair, i + nw < iEnd ? 2 : 1, ev, I, D, vec, lane);
        }
      } else {
        for (int i = i0 + warp_id(); i < iEnd; i += nw) {
          const int one[1] = {i};
          up_rows<4, 1, W, R>(x, G, U, scales, hr, one, 1, ev, I, D, vec, lane);
        }
      }
    }
  }
}

/**
 * The rounded expert outputs round_R(down_e[d] · h[rj]) of row r's slots j in [j0, j1), given in
 * order j to sink(j, y) (every lane the same y); slots whose id is outside the experts are skipped.
 * The experts are taken Q at a time, each expert's sum the same sequence as alone. Each sits
 * behind its own `if`, so the compiler issues an expert's loads just before its products, not the
 * Q experts' together (SASS of sm_90a; hoisting them spills under the 64-register bound:
 * docs/benchmarks.md).
 */
template <int Q, typename W, typename R, typename Sink>
__device__ __forceinline__ void down_outputs(const R* __restrict__ h, const int32_t* __restrict__ ids, const W* __restrict__ down,
                                             const float* __restrict__ scales, int r, int d, int D, int I, int experts, int topK, int j0, int j1,
                                             bool vec, int lane, Sink sink) {
  for (int jq = j0; jq < j1; jq += Q) {
    const W* dn[Q];
    const R* hj[Q];
    const float* ds[Q];
    float s[Q];
#pragma unroll
    for (int q = 0; q < Q; q++) {
      const int j = jq + q;
      const int e = j < j1 ? ids[(size_t)r * topK + j] : -1;
      const bool use = e >= 0 && e < experts;
      dn[q] = use ? down + ((size_t)e * D + d) * I : nullptr;
      hj[q] = h + ((size_t)r * topK + (use ? j : 0)) * I;
      ds[q] = down_scales<W>(scales, use ? e : 0, d, D, I);
      s[q] = 0.f;
    }
    if (vec) {
      constexpr int V = kSteps<W>;
#pragma unroll(4 / V)
      for (int c = lane; c < (I >> 2) / V; c += 32)
#pragma unroll
        for (int q = 0; q < Q; q++)
          if (dn[q]) {
            const WeightChunk<W> wc = ldg_chunk(dn[q], c);
            const float sc = block_scale<W>(ds[q], chunk_block<W>(c));
#pragma unroll
            for (int t = 0; t < V; t++) s[q] = dot_step4<W>(s[q], step_of<W>(wc, t), ldg4(hj[q], (size_t)c * V + t), sc);
          }
    } else {
      for (int k = lane; k < I; k += 32)
#pragma unroll
        for (int q = 0; q < Q; q++)
          if (dn[q]) s[q] = dot_step1<W>(s[q], ldg_value(dn[q], k), ldg_value(hj[q], k), block_scale<W>(ds[q], k >> 7));
    }
#pragma unroll
    for (int q = 0; q < Q; q++) {
      // The expert's output rounded to R, as the grouped down kernel stores it in y.
      const float y = round_to<R>(warp_sum(s[q]));
      if (dn[q]) sink(jq + q, y);
    }
  }
}

/** Output value d of row r: Σ_j w_rj · round_R(down_e[d] · h[rj]) in order j. */
template <int Q, typename W, typename R>
__device__ __forceinline__ float down_value(const R* __restrict__ h, const int32_t* __restrict__ ids, const float* __restrict__ weights,
                                            const W* __restrict__ down, const float* __restrict__ scales, int r, int d, int D, int I, int experts,
                                            int topK, bool vec, int lane) {
  float acc = 0.f;
  down_outputs<Q, W, R>(h, ids, down, scales, r, d, D, I, experts, topK, 0, topK, vec, lane,
                        [&](int j, float y) { acc = __fmaf_rn(weights[(size_t)r * topK + j], y, acc); });
  return acc;
}

template <typename W, typename R>
__device__ __forceinline__ void experts_rowwise(const R* __restrict__ h, const int32_t* __restrict__ ids, const float* __restrict__ weights,
                                                const W* __restrict__ down, const float* __restrict__ scales, R* __restrict__ output, int rows,
                                                int hidden, int inter, int experts, int topK) {
  const int D = hidden, I = inter;
  const int lane = lane_id(), nw = num_warps();
  const bool vec = vector_width<W>(I) && aligned16(h) && aligned16(down);
  if (rows == 1 && topK <= kSplitSlots && nw == 2 * kSplitValues) {
    // One row: two warps a value, each the expert outputs of half the slots (one value a warp
    // leaves too few loads in flight); the first adds all of them in order j, as down_value does.
    __shared__ float ys[kSplitValues][kSplitSlots];
    const int slot = warp_id() >> 1, half = warp_id() & 1, jMid = (topK + 1) >> 1;
    for (int d0 = blockIdx.y * kSplitValues; d0 < D; d0 += gridDim.y * kSplitValues) {
      const int d = d0 + slot;
      if (d < D)
        down_outputs<4, W, R>(h, ids, down, scales, 0, d, D, I, experts, topK, half ? jMid : 0, half ? topK : jMid, vec, lane,
                              [&](int j, float y) { ys[slot][j] = y; });
      __syncthreads();
      if (half == 0 && lane == 0 && d < D) {
        float acc = 0.f;
        for (int j = 0; j < topK; j++) {
          const int e = ids[j];
          if (e >= 0 && e < experts) acc = __fmaf_rn(weights[j], ys[slot][j], acc);
        }
        store_value(output, d, acc);
      }
      __syncthreads();
    }
    return;
  }
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    for (int d0 = blockIdx.y * kDownRows; d0 < D; d0 += gridDim.y * kDownRows) {
      for (int d = d0 + warp_id(); d < min(D, d0 + kDownRows); d += nw) {
        const float acc = rows == 1 ? down_value<4, W, R>(h, ids, weights, down, scales, r, d, D, I, experts, topK, vec, lane)
                                    : down_value<1, W, R>(h, ids, weights, down, scales, r, d, D, I, experts, topK, vec, lane);
        if (lane == 0) store_value(output, (size_t)r * D + d, acc);
      }
    }
  }
}

/** A 4-element step of a row of R as stored: 8 bytes for 16-bit rows, 16 for f32. */
template <typename R>
using RowStep = std::conditional_t<sizeof(R) == 4, float4, uint2>;

template <typename R>
__device__ __forceinline__ float4 step_values(const RowStep<R>& s) {
  if constexpr (sizeof(R) == 4) return s;
  else return unpack4<R>(s);
}

/** Steps of one entry's row a grouped CTA stages as one block: the 32 lanes' chunks of kSteps<W> steps. */
template <typename W>
constexpr int kBlockSteps = 32 * kSteps<W>;

/** Bytes of the entries' rows table at the start of a grouped CTA's dynamic shared memory (the steps after it stay 16-byte aligned). */
constexpr int kStageRowBytes = kEntries * 4;

/**
 * The inputs of a grouped CTA's pass (its expert's entries q0 … q0 + nq − 1) in shared memory, in
 * blocks of 32 chunks: step t of chunk c0 + l of entry q at [(q · V + t) · 32 + l] of the block's
 * buffer, so a warp's read of one step of one entry is 32 consecutive steps, and each input step
 * is read from L2 once a CTA, not once a warp (every warp runs the same entries through its own
 * weight rows). The launch's dynamic shared memory sets the buffers (`blocks`, at least two; src/
 * moe-kernels.ts groupedStageBytes). When a pass's blocks all fit (`resident`) they are loaded once
 * at its start and each of the CTA's tiles reads them; else two buffers stream them for each tile,
 * block b + 1 landing by cp.async while block b is used. `row` holds the entries' first elements
 * (their row of the input, in elements), written at the pass's start.
 */
template <typename W, typename R>
struct EntryStage {
  static constexpr int kBlockSize = kEntries * kBlockSteps<W>;
  int* row;
  RowStep<R>* steps;
  int blocks;

  /** Issues the copies of chunks c0 … c0 + 31 of every entry into buffer `buf`, one commit group. */
  __device__ __forceinline__ void copy(const R* __restrict__ src, int nq, int c0, int chunks, int buf) const {
    constexpr int V = kSteps<W>;
    RowStep<R>* to = steps + (size_t)buf * kBlockSize;
    for (int u = threadIdx.x; u < nq * kBlockSteps<W>; u += blockDim.x) {
      const int l = u & 31, t = (u >> 5) % V, q = (u >> 5) / V;
      if (c0 + l < chunks) {
        const RowStep<R>* from = reinterpret_cast<const RowStep<R>*>(src + row[q]) + (size_t)(c0 + l) * V + t;
        if constexpr (sizeof(RowStep<R>) == 16) cp_async16(to + u, from, true);
        else cp_async8(to + u, from);
      }
    }
    cp_async_commit();
  }

  /** Step t of this lane's chunk of the block in buffer `buf`, entry q. */
  __device__ __forceinline__ float4 at(int buf, int q, int t, int lane) const {
    return step_values<R>(steps[(size_t)buf * kBlockSize + (q * kSteps<W> + t) * 32 + lane]);
  }

  /** Whether a pass over rows of `chunks` chunks keeps all its blocks (on the vector path). */
  __device__ __forceinline__ bool holds(int chunks) const { return (chunks + 31) / 32 <= blocks; }
};

/** The CTA's EntryStage over its dynamic shared memory (a launch with less than two buffers traps). */
template <typename W, typename R>
__device__ __forceinline__ EntryStage<W, R> entry_stage() {
  STD_DYNAMIC_SMEM(smem);
  const unsigned bytes = dynamic_smem_bytes();
  const int blocks = bytes < kStageRowBytes ? 0 : (int)((bytes - kStageRowBytes) / (EntryStage<W, R>::kBlockSize * sizeof(RowStep<R>)));
  if (blocks < 2) __trap();
  return {reinterpret_cast<int*>(smem), reinterpret_cast<RowStep<R>*>(smem + kStageRowBytes), blocks};
}

/**
 * Starts a pass of a grouped CTA: after the barrier (the previous pass's reads of `stage` are done)
 * the first nq threads write the row of each entry (`rowOf(rj)`); after the second, on the vector
 * path (`vec`), the copies of the first block are issued, or, `resident`, of every block, waited
 * for behind a third barrier.
 */
template <typename W, typename R, typename RowOf>
__device__ __forceinline__ void start_pass(const EntryStage<W, R>& stage, const Groups& gr, const R* __restrict__ src, int q0, int nq, int chunks, bool vec,
                                           bool resident, RowOf rowOf) {
  __syncthreads();
  if (threadIdx.x < nq) stage.row[threadIdx.x] = rowOf(gr.order[q0 + threadIdx.x]);
  __syncthreads();
  if (!vec) return;
  if (!resident) {
    stage.copy(src, nq, 0, chunks, 0);
    return;
  }
  for (int c0 = 0, b = 0; c0 < chunks; c0 += 32, b++) stage.copy(src, nq, c0, chunks, b);
  cp_async_wait<0>();
  __syncthreads();
}

/**
 * The buffer of block b of a pass on the vector path. Streamed, it waits for the block's copies
 * (every thread's, by the barrier, which also ends every warp's reads of block b − 1's buffer) and
 * issues block b + 1's into that buffer; resident, block b is in buffer b already.
 */
template <typename W, typename R>
__device__ __forceinline__ int next_block(const EntryStage<W, R>& stage, const R* __restrict__ src, int nq, int c0, int chunks, int b, bool resident) {
  if (resident) return b;
  cp_async_wait<0>();
  __syncthreads();
  if (c0 + 32 < chunks) stage.copy(src, nq, c0 + 32, chunks, (b + 1) & 1);
  return b & 1;
}

/**
 * The outputs a grouped CTA writes zero: those of the entries whose id is outside the experts, for
 * the first row of CTAs (`n` outputs an entry, tiles of `tile`).
 */
template <typename R>
__device__ __forceinline__ void zero_outside(const Groups& gr, R* __restrict__ out, int n, int tile) {
  if (blockIdx.y != 0) return;
  const int lane = lane_id(), nw = num_warps();
  for (int i0 = blockIdx.x * tile; i0 < n; i0 += gridDim.x * tile)
    for (int q = warp_id(); q < gr.nInvalid; q += nw) {
      R* row = out + (size_t)gr.order[gr.nValid + q] * n;
      for (int i = i0 + lane; i < min(n, i0 + tile); i += 32) store_value(row, i, 0.f);
    }
}

/**
 * The walk of a grouped CTA over its work: the slots of the grid's row (from the last expert: the
 * stacked shared expert, every row's and so the most passes, starts first), each slot's entries in
 * passes of kEntries, and each pass's tiles of `tile` of the `n` outputs an entry (blockIdx.x,
 * + gridDim.x, …). The stage is loaded once a pass (`resident`) or once a tile (streamed);
 * `tileBody(e, q0, nq, o0)` computes the tile of expert e's entries q0 … q0 + nq − 1 from output o0.
 */
template <typename W, typename R, typename RowOf, typename TileBody>
__device__ __forceinline__ void grouped_walk(const EntryStage<W, R>& stage, const Groups& gr, const R* __restrict__ src, int n, int tile, int chunks,
                                             bool vec, bool resident, RowOf rowOf, TileBody tileBody) {
  for (int a = gr.nActive - 1 - blockIdx.y; a >= 0; a -= gridDim.y) {
    const int e = gr.expert[a], s0 = gr.start[a], s1 = gr.start[a + 1];
    for (int q0 = s0; q0 < s1; q0 += kEntries) {
      const int nq = min(kEntries, s1 - q0);
      if (resident) start_pass(stage, gr, src, q0, nq, chunks, vec, true, rowOf);
      for (int o0 = blockIdx.x * tile; o0 < n; o0 += gridDim.x * tile) {
        if (!resident) start_pass(stage, gr, src, q0, nq, chunks, vec, false, rowOf);
        tileBody(e, q0, nq, o0);
      }
    }
  }
}

template <typename W, typename R>
__device__ __forceinline__ void experts_up(const R* __restrict__ input, const int32_t* __restrict__ groups, const W* __restrict__ gateUp,
                                           const float* __restrict__ scales, R* __restrict__ h, int hidden, int inter, int experts, int topK) {
  const int D = hidden, I = inter;
  const int lane = lane_id(), nw = num_warps();
  const Groups gr(groups, experts);
  const bool vec = vector_width<W>(D) && aligned16(input) && aligned16(gateUp);
  const int tile = nw * kRowsPerWarp;
  constexpr int V = kSteps<W>;
  const int chunks = (D >> 2) / V;
  const EntryStage<W, R> stage = entry_stage<W, R>();
  const bool resident = vec && stage.holds(chunks);
  const auto rowOf = [&](int rj) { return (rj / topK) * D; };
  zero_outside(gr, h, I, tile);
  grouped_walk(stage, gr, input, I, tile, chunks, vec, resident, rowOf, [&](int e, int q0, int nq, int i0) {
    const W* G = gateUp + (size_t)e * 2 * I * D;
    const W* U = G + (size_t)I * D;
    // Every warp takes part in the stage and its barriers; a warp whose rows start past I computes nothing.
    const int ib = i0 + warp_id() * kRowsPerWarp;
    const bool rows = ib < I;
    // This warp's weight rows (a row past I repeats the last one; its sums are not written).
    size_t wrow[kRowsPerWarp];
    const float* gs[kRowsPerWarp];
    const float* us[kRowsPerWarp];
#pragma unroll
    for (int m = 0; m < kRowsPerWarp; m++) {
      const int i = min(ib + m, I - 1);
      wrow[m] = (size_t)i * D;
      gs[m] = gate_up_scales<W>(scales, e, 0, i, I, D);
      us[m] = gate_up_scales<W>(scales, e, 1, i, I, D);
    }
    float sg[32], su[32];  // [m · kEntries + q]
#pragma unroll
    for (int t = 0; t < 32; t++) sg[t] = 0.f, su[t] = 0.f;
    if (vec) {
      // Each block's weights are loaded a block ahead: they are in flight through the block before.
      WeightChunk<W> gc[kRowsPerWarp], uc[kRowsPerWarp], gn[kRowsPerWarp], un[kRowsPerWarp];
      float gsc[kRowsPerWarp], usc[kRowsPerWarp], gsn[kRowsPerWarp], usn[kRowsPerWarp];
      const auto load = [&](int c, WeightChunk<W>* g, WeightChunk<W>* u, float* gsx, float* usx) {
#pragma unroll
        for (int m = 0; m < kRowsPerWarp; m++) {
          if (rows && c < chunks) {
            g[m] = ldg_chunk(G + wrow[m], c), u[m] = ldg_chunk(U + wrow[m], c);
            gsx[m] = block_scale<W>(gs[m], chunk_block<W>(c)), usx[m] = block_scale<W>(us[m], chunk_block<W>(c));
          }
        }
      };
      load(lane, gn, un, gsn, usn);
      for (int c0 = 0, b = 0; c0 < chunks; c0 += 32, b++) {
        const int c = c0 + lane;
        const bool mine = rows && c < chunks;
#pragma unroll
        for (int m = 0; m < kRowsPerWarp; m++) gc[m] = gn[m], uc[m] = un[m], gsc[m] = gsn[m], usc[m] = usn[m];
        if (c0 + 32 < chunks) load(c + 32, gn, un, gsn, usn);
        const int buf = next_block(stage, input, nq, c0, chunks, b, resident);
        if (mine) {
#pragma unroll 1
          for (int t = 0; t < V; t++) {
            float4 gv[kRowsPerWarp], uv[kRowsPerWarp];
#pragma unroll
            for (int m = 0; m < kRowsPerWarp; m++) gv[m] = step_of<W>(gc[m], t), uv[m] = step_of<W>(uc[m], t);
#pragma unroll
            for (int q = 0; q < kEntries; q++) {
              if (q < nq) {
                const float4 xv = stage.at(buf, q, t, lane);
#pragma unroll
                for (int m = 0; m < kRowsPerWarp; m++) {
                  sg[m * kEntries + q] = dot_step4<W>(sg[m * kEntries + q], gv[m], xv, gsc[m]);
                  su[m * kEntries + q] = dot_step4<W>(su[m * kEntries + q], uv[m], xv, usc[m]);
                }
              }
            }
          }
        }
      }
    } else if (rows) {
      for (int k = lane; k < D; k += 32) {
        float gv[kRowsPerWarp], uv[kRowsPerWarp];
        float gsc[kRowsPerWarp], usc[kRowsPerWarp];
#pragma unroll
        for (int m = 0; m < kRowsPerWarp; m++) {
          gv[m] = ldg_value(G + wrow[m], k), uv[m] = ldg_value(U + wrow[m], k);
          gsc[m] = block_scale<W>(gs[m], k >> 7), usc[m] = block_scale<W>(us[m], k >> 7);
        }
#pragma unroll
        for (int q = 0; q < kEntries; q++) {
          if (q < nq) {
            const float xv = ldg_value(input + stage.row[q], k);
#pragma unroll
            for (int m = 0; m < kRowsPerWarp; m++) {
              sg[m * kEntries + q] = dot_step1<W>(sg[m * kEntries + q], gv[m], xv, gsc[m]);
              su[m * kEntries + q] = dot_step1<W>(su[m * kEntries + q], uv[m], xv, usc[m]);
            }
          }
        }
      }
    }
    const float g = warp_sum_32(sg);
    const float u = warp_sum_32(su);
    const int m = lane / kEntries, q = lane % kEntries;
    if (q < nq && ib + m < I) store_value(h, (size_t)gr.order[q0 + q] * I + ib + m, silu(g) * u);
  });
}

template <typename W, typename R>
__device__ __forceinline__ void experts_down(const R* __restrict__ h, const int32_t* __restrict__ groups, const W* __restrict__ down,
                                             const float* __restrict__ scales, R* __restrict__ y, int hidden, int inter, int experts) {
  const int D = hidden, I = inter;
  const int lane = lane_id(), nw = num_warps();
  const Groups gr(groups, experts);
  const bool vec = vector_width<W>(I) && aligned16(h) && aligned16(down);
  const int tile = nw * kRowsPerWarp;
  constexpr int V = kSteps<W>;
  const int chunks = (I >> 2) / V;
  const EntryStage<W, R> stage = entry_stage<W, R>();
  const bool resident = vec && stage.holds(chunks);
  const auto rowOf = [&](int rj) { return rj * I; };
  zero_outside(gr, y, D, tile);
  grouped_walk(stage, gr, h, D, tile, chunks, vec, resident, rowOf, [&](int e, int q0, int nq, int d0) {
    const W* Wt = down + (size_t)e * D * I;
    const int db = d0 + warp_id() * kRowsPerWarp;
    const bool rows = db < D;
    size_t wrow[kRowsPerWarp];
    const float* ws[kRowsPerWarp];
#pragma unroll
    for (int m = 0; m < kRowsPerWarp; m++) {
      const int d = min(db + m, D - 1);
      wrow[m] = (size_t)d * I;
      ws[m] = down_scales<W>(scales, e, d, D, I);
    }
    float s[32];  // [m · kEntries + q]
#pragma unroll
    for (int t = 0; t < 32; t++) s[t] = 0.f;
    if (vec) {
      for (int c0 = 0, b = 0; c0 < chunks; c0 += 32, b++) {
        const int c = c0 + lane;
        const bool mine = rows && c < chunks;
        WeightChunk<W> wc[kRowsPerWarp];
        float sc[kRowsPerWarp];
#pragma unroll
        for (int m = 0; m < kRowsPerWarp; m++)
          if (mine) wc[m] = ldg_chunk(Wt + wrow[m], c), sc[m] = block_scale<W>(ws[m], chunk_block<W>(c));
        const int buf = next_block(stage, h, nq, c0, chunks, b, resident);
        if (mine) {
#pragma unroll 1
          for (int t = 0; t < V; t++) {
            float4 wv[kRowsPerWarp];
#pragma unroll
            for (int m = 0; m < kRowsPerWarp; m++) wv[m] = step_of<W>(wc[m], t);
#pragma unroll
            for (int q = 0; q < kEntries; q++) {
              if (q < nq) {
                const float4 hv = stage.at(buf, q, t, lane);
#pragma unroll
                for (int m = 0; m < kRowsPerWarp; m++) s[m * kEntries + q] = dot_step4<W>(s[m * kEntries + q], wv[m], hv, sc[m]);
              }
            }
          }
        }
      }
    } else if (rows) {
      for (int k = lane; k < I; k += 32) {
        float wv[kRowsPerWarp];
        float sc[kRowsPerWarp];
#pragma unroll
        for (int m = 0; m < kRowsPerWarp; m++) wv[m] = ldg_value(Wt + wrow[m], k), sc[m] = block_scale<W>(ws[m], k >> 7);
#pragma unroll
        for (int q = 0; q < kEntries; q++) {
          if (q < nq) {
            const float hv = ldg_value(h + stage.row[q], k);
#pragma unroll
            for (int m = 0; m < kRowsPerWarp; m++) s[m * kEntries + q] = dot_step1<W>(s[m * kEntries + q], wv[m], hv, sc[m]);
          }
        }
      }
    }
    const float t = warp_sum_32(s);
    const int m = lane / kEntries, q = lane % kEntries;
    if (q < nq && db + m < D) store_value(y, (size_t)gr.order[q0 + q] * D + db + m, t);
  });
}

template <typename T>
__device__ __forceinline__ void experts_sum(const T* __restrict__ y, const int32_t* __restrict__ ids, const float* __restrict__ weights,
                                            T* __restrict__ output, int rows, int hidden, int experts, int topK) {
  const int D = hidden;
  const bool vec = (D & 3) == 0 && aligned16(y) && aligned16(output);
  const int per = vec ? 4 : 1;
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const int32_t* id = ids + (size_t)r * topK;
    const float* w = weights + (size_t)r * topK;
    for (int d = (blockIdx.y * blockDim.x + threadIdx.x) * per; d < D; d += gridDim.y * blockDim.x * per) {
      if (vec) {
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int j = 0; j < topK; j++) {
          const int e = id[j];
          if (e < 0 || e >= experts) continue;
          const float wj = w[j];
          const float4 v = ldg4(y + ((size_t)r * topK + j) * D, d >> 2);
          acc.x = __fmaf_rn(wj, v.x, acc.x), acc.y = __fmaf_rn(wj, v.y, acc.y), acc.z = __fmaf_rn(wj, v.z, acc.z), acc.w = __fmaf_rn(wj, v.w, acc.w);
        }
        store4(output + (size_t)r * D, d >> 2, acc);
      } else {
        float acc = 0.f;
        for (int j = 0; j < topK; j++) {
          const int e = id[j];
          if (e < 0 || e >= experts) continue;
          acc = __fmaf_rn(w[j], ldg_value(y, ((size_t)r * topK + j) * D + d), acc);
        }
        store_value(output, (size_t)r * D + d, acc);
      }
    }
  }
}

template <typename T>
__device__ __forceinline__ void combine_rows(const T* __restrict__ routed, const T* __restrict__ shared, const float* __restrict__ gate,
                                             T* __restrict__ output, int rows, int hidden) {
  const bool vec = (hidden & 3) == 0 && aligned16(routed) && aligned16(shared) && aligned16(output);
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const float g = gate ? sigmoid(gate[r]) : 1.0f;
    const size_t o = (size_t)r * hidden;
    if (vec) {
      for (int i = threadIdx.x; i < (hidden >> 2); i += blockDim.x) {
        const float4 a = ldg4(routed + o, i);
        const float4 b = ldg4(shared + o, i);
        store4(output + o, i, make_float4(a.x + g * b.x, a.y + g * b.y, a.z + g * b.z, a.w + g * b.w));
      }
    } else {
      for (int i = threadIdx.x; i < hidden; i += blockDim.x) store_value(output, o + i, ldg_value(routed, o + i) + g * ldg_value(shared, o + i));
    }
  }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(256) std_moe_experts(const void* __restrict__ y, const int32_t* __restrict__ ids,
                                                                  const float* __restrict__ weights, void* __restrict__ output, int rows, int hidden,
                                                                  int experts, int topK, int dtype) {
  early_start();
  METRALE_BY_ROW_TYPE(dtype, experts_sum, static_cast<const T*>(y), ids, weights, static_cast<T*>(output), rows, hidden, experts, topK);
}

extern "C" __global__ void __launch_bounds__(1024) std_moe_combine(const void* __restrict__ routed, const void* __restrict__ shared,
                                                                   const float* __restrict__ gate, void* __restrict__ output, int rows, int hidden,
                                                                   int dtype) {
  METRALE_BY_ROW_TYPE(dtype, combine_rows, static_cast<const T*>(routed), static_cast<const T*>(shared), gate, static_cast<T*>(output), rows, hidden);
}

// The four expert kernels for one (weight type W, row type R): NAME##SUFFIX symbols (moe-kernels.ts
// declares them per pair). `ids` and `rows` are unused by the grouped ones (they read `groups`), kept
// so every variant has the parameters of the row-wise one it replaces.
#define STD_MOE_EXPERT_KERNELS(SUFFIX, W, R)                                                                                                       \
  extern "C" __global__ void __launch_bounds__(256) std_moe_experts_up_rowwise##SUFFIX(                                                          \
      const R* __restrict__ input, const int32_t* __restrict__ ids, const W* __restrict__ gateUp, const float* __restrict__ gateUpScales,          \
      R* __restrict__ h, int rows, int hidden, int inter, int experts, int topK, int wDtype, int rowDtype) {                                      \
    check_codes<W, R>(wDtype, rowDtype);                                                                                                         \
    experts_up_rowwise<W, R>(input, ids, gateUp, gateUpScales, h, rows, hidden, inter, experts, topK);                                           \
  }                                                                                                                                              \
  extern "C" __global__ void __launch_bounds__(256, 4) std_moe_experts_rowwise##SUFFIX(                                                           \
      const R* __restrict__ h, const int32_t* __restrict__ ids, const float* __restrict__ weights, const W* __restrict__ down,                     \
      const float* __restrict__ downScales, R* __restrict__ output, int rows, int hidden, int inter, int experts, int topK, int wDtype,            \
      int rowDtype) {                                                                                                                            \
    check_codes<W, R>(wDtype, rowDtype);                                                                                                         \
    experts_rowwise<W, R>(h, ids, weights, down, downScales, output, rows, hidden, inter, experts, topK);                                        \
  }                                                                                                                                              \
  extern "C" __global__ void __launch_bounds__(128, 3) std_moe_experts_up##SUFFIX(                                                               \
      const R* __restrict__ input, const int32_t* __restrict__ ids, const int32_t* __restrict__ groups, const W* __restrict__ gateUp,             \
      const float* __restrict__ gateUpScales, R* __restrict__ h, int rows, int hidden, int inter, int experts, int topK, int wDtype,              \
      int rowDtype) {                                                                                                                            \
    (void)ids;                                                                                                                                   \
    (void)rows;                                                                                                                                  \
    check_codes<W, R>(wDtype, rowDtype);                                                                                                         \
    experts_up<W, R>(input, groups, gateUp, gateUpScales, h, hidden, inter, experts, topK);                                                       \
  }                                                                                                                                              \
  extern "C" __global__ void __launch_bounds__(128, 4) std_moe_experts_down##SUFFIX(                                                             \
      const R* __restrict__ h, const int32_t* __restrict__ ids, const int32_t* __restrict__ groups, const W* __restrict__ down,                   \
      const float* __restrict__ downScales, R* __restrict__ y, int rows, int hidden, int inter, int experts, int topK, int wDtype, int rowDtype) { \
    (void)ids;                                                                                                                                   \
    (void)rows;                                                                                                                                  \
    (void)topK;                                                                                                                                  \
    check_codes<W, R>(wDtype, rowDtype);                                                                                                         \
    experts_down<W, R>(h, groups, down, downScales, y, hidden, inter, experts);                                                                  \
  }

STD_MOE_EXPERT_KERNELS(, float, float)
STD_MOE_EXPERT_KERNELS(_bf16, bf16, bf16)
STD_MOE_EXPERT_KERNELS(_f16, f16, f16)
STD_MOE_EXPERT_KERNELS(_fp8_bf16, fp8, bf16)
STD_MOE_EXPERT_KERNELS(_fp8_f16, fp8, f16)

#undef STD_MOE_EXPERT_KERNELS

// std_moe_localize (expert parallelism): the rank holds experts [first, first + count) and one
// zero expert after them. Entries of its experts get local ids; the others the zero expert and
// weight 0, so they add nothing to the rank's partial sum. One thread per (row, slot) entry.
extern "C" __global__ void std_moe_localize(int32_t* __restrict__ ids, float* __restrict__ weights, int entries, int first, int count) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= entries) return;
  const int local = ids[i] - first;
  if (local >= 0 && local < count) {
    ids[i] = local;
  } else {
    ids[i] = count;
    weights[i] = 0.0f;
  }
}
