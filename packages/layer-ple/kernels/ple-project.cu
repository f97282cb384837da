// The model-level half of Gemma 3n's per-layer input, for decoder layer l (KERNELS.md):
//   e   = embed_tokens[id] · embScale                                  (ple_embed_gather)
//   q   = e · W_lᵀ                                                     (gpu.gemm, W_l = rows l·P.. of per_layer_model_projection)
//   ple = (RMSNorm_P(q · projScale) · w + table[slot][l·P ..] · tableScale) · inputScale   (ple_combine)
// and the device token → slot map that prestage keeps current (ple_map_set).
// Rows (e, q, ple) are of the row type T (dtype code: 0 f32, 1 bf16, 2 f16); the embedding and the
// table are read in their storage dtype (load_elem) and rounded to T, as a model held in T holds
// them. Arithmetic in f32; a value Hugging Face holds in T (q · projScale, the normed projection,
// the scaled table row, their sum) is rounded to T where the CPU twin rounds it: in f32 none is.
// Every per-step value (token ids, batch slots, row starts) is read from the driver's device
// tables or the layer's map, never passed as a scalar, so one captured graph serves every step.
#include "ple-common.cuh"

using ple::block_sum;
using ple::is_padding;
using ple::load_elem;
using ple::load_value;
using ple::round_to;
using ple::store_value;

namespace {

template <typename T>
__device__ __forceinline__ void embed_gather_row(T* out, const void* embed, int embedDtype, const int32_t* tokens, const int32_t* slots,
                                                 const int32_t* rowStarts, int batch, int firstRow, int count, int hidden, int vocab,
                                                 float scale) {
  const int local = blockIdx.x;
  if (local >= count) return;
  const int row = firstRow + local;
  const size_t base = (size_t)local * hidden;
  const int token = tokens[row];
  const bool skip = is_padding(slots, rowStarts, batch, row) || token < 0 || token >= vocab;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    store_value(out, base + i, skip ? 0.f : round_to<T>(load_elem(embed, (size_t)token * hidden + i, embedDtype)) * scale);
  }
}

template <typename T>
__device__ __forceinline__ void combine_row(T* pleOut, const T* q, const float* normWeight, const void* slotRows, int tableDtype,
                                            const int32_t* rowSlots, const int32_t* map, const int32_t* tokens, const int32_t* slots,
                                            const int32_t* rowStarts, int batch, int firstRow, int count, int perLayer, int rowElems,
                                            int layerOffset, int tableVocab, float projScale, float tableScale, float inputScale,
                                            float eps, float* scratch) {
  const int local = blockIdx.x;
  if (local >= count) return;
  const int row = firstRow + local;
  const size_t at = (size_t)local * perLayer;
  int slot = -1;
  if (!is_padding(slots, rowStarts, batch, row)) {
    if (rowSlots != nullptr) {
      slot = rowSlots[local];
    } else {
      const int token = tokens[row];
      slot = map[(token >= 0 && token < tableVocab) ? token : 0];
    }
  }
  if (slot < 0) {  // block-uniform
    for (int i = threadIdx.x; i < perLayer; i += blockDim.x) store_value(pleOut, at + i, 0.f);
    return;
  }
  float ss = 0.f;
  for (int i = threadIdx.x; i < perLayer; i += blockDim.x) {
    const float v = round_to<T>(load_value(q, at + i) * projScale);
    ss += v * v;
  }
  const float inv = 1.f / sqrtf(block_sum(ss, scratch) / (float)perLayer + eps);
  const size_t base = (size_t)slot * rowElems + layerOffset;
  for (int i = threadIdx.x; i < perLayer; i += blockDim.x) {
    const float normed = round_to<T>(round_to<T>(load_value(q, at + i) * projScale) * inv * normWeight[i]);
    const float table = round_to<T>(round_to<T>(load_elem(slotRows, base + i, tableDtype)) * tableScale);
    store_value(pleOut, at + i, round_to<T>(normed + table) * inputScale);
  }
}

}  // namespace

// One block per row of the range [firstRow, firstRow + count): e of the row's token into out[row - firstRow].
extern "C" __global__ void ple_embed_gather(void* out, const void* embed, int embedDtype, const int32_t* tokens, const int32_t* slots,
                                            const int32_t* rowStarts, int batch, int firstRow, int count, int hidden, int vocab,
                                            float scale, int dtype) {
  METRALE_BY_ROW_TYPE(dtype, embed_gather_row, static_cast<T*>(out), embed, embedDtype, tokens, slots, rowStarts, batch, firstRow, count,
                      hidden, vocab, scale);
}

// One block per row: the row's ple[l] (P values) into ple[row - firstRow].
// The table row is slot `rowSlots[row - firstRow]` when rowSlots is given (prefill), otherwise
// map[id'] with id' = the row's token, or 0 when the token is at or past the table (decode, verify).
extern "C" __global__ void ple_combine(void* pleOut, const void* q, const float* normWeight, const void* slotRows, int tableDtype,
                                       const int32_t* rowSlots, const int32_t* map, const int32_t* tokens, const int32_t* slots,
                                       const int32_t* rowStarts, int batch, int firstRow, int count, int perLayer, int rowElems,
                                       int layerOffset, int tableVocab, float projScale, float tableScale, float inputScale, float eps,
                                       int dtype) {
  __shared__ float scratch[32];
  METRALE_BY_ROW_TYPE(dtype, combine_row, static_cast<T*>(pleOut), static_cast<const T*>(q), normWeight, slotRows, tableDtype, rowSlots,
                      map, tokens, slots, rowStarts, batch, firstRow, count, perLayer, rowElems, layerOffset, tableVocab, projScale,
                      tableScale, inputScale, eps, scratch);
}

// map[t_i] = s_i for the first n of up to four (token, slot) pairs: the device side of prestage's
// host map, for the rows it uploaded or found out of date. One thread per pair.
extern "C" __global__ void ple_map_set(int32_t* map, int n, int t0, int s0, int t1, int s1, int t2, int s2, int t3,
                                       int s3) {
  const int i = threadIdx.x;
  if (i >= n) return;
  const int t = i == 0 ? t0 : i == 1 ? t1 : i == 2 ? t2 : t3;
  const int s = i == 0 ? s0 : i == 1 ? s1 : i == 2 ? s2 : s3;
  map[t] = s;
}
