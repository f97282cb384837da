// Sliding-window attention with identity projections, the CUDA side of @metrale/layer-example.
// Every per-step value (slots, lengths, row starts, positions) is read from the driver's device
// tables, never passed as a scalar, so one captured graph serves every later step.
#include <cstdint>

namespace {

// Batch position of a row: the last p with rowStarts[p] <= row (rowStarts has batch + 1 entries).
__device__ int position_of_row(const int32_t* rowStarts, int batch, int row) {
  int lo = 0, hi = batch - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (rowStarts[mid] <= row) lo = mid; else hi = mid - 1;
  }
  return lo;
}

__device__ float block_sum(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.f;
  const int warps = (blockDim.x + 31) / 32;
  for (int w = 0; w < warps; ++w) total += scratch[w];
  return total;
}

}  // namespace

// One block per row: copy the row into its sequence's cache at the row's position.
extern "C" __global__ void sliding_window_append(const float* input, float* cache, const int32_t* slots,
                                                 const int32_t* rowStarts, const int32_t* positions, int batch,
                                                 int hidden, int capacity) {
  const int row = blockIdx.x;
  if (row >= rowStarts[batch]) return;
  const int p = position_of_row(rowStarts, batch, row);
  const int slot = slots[p];
  if (slot < 0) return;  // padding
  const int pos = positions[row];
  float* dst = cache + ((size_t)slot * capacity + pos) * hidden;
  const float* src = input + (size_t)row * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = src[i];
}

// One block per row: softmax over the last `window` cached rows up to the row's own position,
// scores q·k·scale with q = the row and k = v = the cached rows; output = gain ⊙ Σ w·v.
// Dynamic shared memory: `window` floats of scores, then 32 floats of reduction scratch.
extern "C" __global__ void sliding_window_attend(const float* input, float* output, const float* cache,
                                                 const float* gain, const int32_t* slots, const int32_t* rowStarts,
                                                 const int32_t* positions, int batch, int hidden, int capacity,
                                                 int window, float scale) {
  extern __shared__ float shared[];
  float* scores = shared;
  float* scratch = shared + window;
  const int row = blockIdx.x;
  if (row >= rowStarts[batch]) return;
  const int p = position_of_row(rowStarts, batch, row);
  const int slot = slots[p];
  if (slot < 0) return;
  const int pos = positions[row];
  const int first = pos - window + 1 > 0 ? pos - window + 1 : 0;
  const int count = pos - first + 1;
  const float* q = input + (size_t)row * hidden;
  const float* base = cache + (size_t)slot * capacity * hidden;
  float maxScore = -INFINITY;
  for (int j = 0; j < count; ++j) {
    const float* k = base + (size_t)(first + j) * hidden;
    float partial = 0.f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) partial += q[i] * k[i];
    const float s = block_sum(partial, scratch) * scale;
    if (threadIdx.x == 0) scores[j] = s;
    maxScore = fmaxf(maxScore, s);
  }
  __syncthreads();
  float denom = 0.f;
  for (int j = 0; j < count; ++j) denom += expf(scores[j] - maxScore);
  float* out = output + (size_t)row * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    float acc = 0.f;
    for (int j = 0; j < count; ++j) acc += expf(scores[j] - maxScore) * base[(size_t)(first + j) * hidden + i];
    out[i] = gain[i] * acc / denom;
  }
}
