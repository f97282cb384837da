// The ceilings of the GDN state passes (gdn-state-ceilings.cuh), as gdn.bench.mjs launches them:
// grid [batch, H_v], 256 threads; batch position b's heads are those of slot slots[b] (the
// layer's indirection), at the Qwen3-Next-80B head shape (d_k = d_v = 128). Built with the bench
// (metrale-build-kernels --package-dir bench), not shipped.
#include "gdn-state-ceilings.cuh"

/** The in-place read-modify-write of every head of the batch: the ceiling of a decode step's state pass. */
extern "C" __global__ void __launch_bounds__(256) gdn_ceiling_rmw(float* state, const int* slots, int hv) {
  const int slot = slots[blockIdx.x];
  if (slot < 0) return;
  gdn_ceiling::rmw_head(reinterpret_cast<float4*>(state) + ((size_t)slot * hv + blockIdx.y) * (gdn_ceiling::kHeadFloats / 4));
}

/** The read of every head of the batch (one float per CTA into out): the ceiling of a write-on-accept verify's. */
extern "C" __global__ void __launch_bounds__(256) gdn_ceiling_read(const float* state, const int* slots, int hv, float* out) {
  const int slot = slots[blockIdx.x];
  if (slot < 0) return;
  gdn_ceiling::read_head(reinterpret_cast<const float4*>(state) + ((size_t)slot * hv + blockIdx.y) * (gdn_ceiling::kHeadFloats / 4),
                         out + (size_t)blockIdx.x * gridDim.y + blockIdx.y);
}
