// Element-wise conversion between float types (GpuBackend.convert): f32, bf16 and f16, rounded
// to nearest even. Grid-stride, so any grid covers any count.
#include <metrale/elements.cuh>

extern "C" __global__ void backend_convert(const void* __restrict__ src, int srcCode, void* __restrict__ dst, int dstCode,
                                           unsigned long long count) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < count;
       i += (unsigned long long)gridDim.x * blockDim.x) {
    metrale::store_element(dst, i, metrale::load_element(src, i, srcCode), dstCode);
  }
}
