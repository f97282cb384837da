// What bandwidth an in-place read-modify-write of per-head states can reach on this GPU, with no
// GDN math, in several patterns beside the device-to-device copy: the exploration behind the
// ceilings gdn.bench.mjs measures in its own run (kernels/gdn-state-ceilings.cuh: head-read-256
// and head-reg-256 here). Build and run on the GPU machine:
//   nvcc -O3 -std=c++17 -arch=sm_90a -o /tmp/rmw bench/rmw-ceiling.cu && /tmp/rmw
// Prints one line per (pattern, batch): µs per launch (median of 20 repetitions of 8 launches,
// state sets rotated so each repetition touches ≥ 4 × L2) and TB/s of the bytes moved (read +
// written; read alone for the read patterns).
//   copy        cudaMemcpyAsync device to device of the same bytes (read one buffer, write another)
//   read        grid-stride read of the batch's states, 4 float4 per thread in flight, one float
//               written per thread: the most a pass that only reads S (a write-on-accept verify)
//               can move
//   head-read-256  one CTA of 256 threads per head through the slot table, 16 float4 each, one
//               float written per CTA: the verify's pattern without its math
//   flat        grid-stride x ← 0.999 x + 1e-3 over the batch's states, 4 float4 per thread in flight
//   head-reg    one CTA of 128 threads per head: the whole 64 KiB in registers (32 float4 per
//               thread), then written back (the dependency shape of a decode step: all of a column
//               read before any of it is written)
//   head-smem   one CTA per head: the 64 KiB copied to shared memory (cp.async 16 B), then written
//               back from there (the smem decode kernel without its math)
//   head-split  two CTAs per head, 32 KiB each in registers (columns split)
//   head-reg-256  one CTA of 256 threads per head, 16 float4 each (the regs kernel's layout), its
//               head found through a slot table (the decode kernels' indirection)
//   head-reg-256-2cta  the same with 90 KiB of unused dynamic shared memory, so that 2 CTAs fit on
//               an SM, as the decode state kernel's 128 registers allow (the plain one runs 3 at
//               70 registers): what occupancy alone costs the pattern
//   head-dots-3cta / head-dots-2cta  head-reg-256 with the decode state pass's shape of work between
//               the loads and the stores (dot products over the thread's 16 rows, the 8 warps' parts
//               added through shared memory, u and o per column, Σo² across warps, the rank-1 update,
//               y written; three barriers) with 3 or 2 CTAs per SM: what that phase costs, and
//               whether a third CTA per SM hides it
//   head-dots-pfN  head-dots-2cta whose CTAs each also ask L2 for the head of the CTA N places after
//               them (cp.async.bulk.prefetch.L2), so that DRAM has requests while the resident CTAs
//               sit between their loads and their stores
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>
#include "../kernels/gdn-l2-ahead.cuh"  // the layer's L2 requests (head-dots-pfN asks as the decode state kernel does)
#include "kernels/gdn-state-ceilings.cuh"  // head-read-256 and head-reg-256, as gdn.bench measures them

#define CK(x)                                                                                 \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

constexpr int kHeadFloats = 128 * 128;  // d_k × d_v
constexpr int kHeads = 32;              // H_v

__device__ __forceinline__ float4 step(float4 v) {
  return make_float4(fmaf(v.x, 0.999f, 1e-3f), fmaf(v.y, 0.999f, 1e-3f), fmaf(v.z, 0.999f, 1e-3f), fmaf(v.w, 0.999f, 1e-3f));
}

__global__ void flat(float4* p, long long n4) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += 4 * stride) {
    float4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = i + u * stride < n4 ? p[i + u * stride] : make_float4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < 4; ++u)
      if (i + u * stride < n4) p[i + u * stride] = step(v[u]);
  }
}

__device__ __forceinline__ float sum4(float4 v) { return (v.x + v.y) + (v.z + v.w); }

// Read only: every float4 of the states added into the thread's one output.
__global__ void read_flat(const float4* p, long long n4, float* out) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  float acc = 0.0f;
  for (long long i = t; i < n4; i += 4 * stride) {
    float4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = i + u * stride < n4 ? __ldcs(p + i + u * stride) : make_float4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < 4; ++u) acc += sum4(v[u]);
  }
  out[t] = acc;
}

// Read only, a CTA per head in head-reg-256's layout (gdn_ceiling::read_head).
__global__ void __launch_bounds__(256) head_read256(const float4* p, const int* slots, float* out) {
  gdn_ceiling::read_head(p + (size_t)slots[blockIdx.x] * (kHeadFloats / 4), out + blockIdx.x);
}

// parts CTAs per head, each holding kHeadFloats / parts floats in registers.
template <int PARTS>
__global__ void __launch_bounds__(128) head_reg(float4* p) {
  constexpr int per = kHeadFloats / 4 / PARTS / 128;  // float4 per thread
  float4* h = p + (size_t)(blockIdx.x / PARTS) * (kHeadFloats / 4) + (blockIdx.x % PARTS) * (kHeadFloats / 4 / PARTS);
  float4 v[per];
#pragma unroll
  for (int u = 0; u < per; ++u) v[u] = h[u * 128 + threadIdx.x];
  __syncthreads();  // the column's dot product would be here
#pragma unroll
  for (int u = 0; u < per; ++u) h[u * 128 + threadIdx.x] = step(v[u]);
}

// The regs decode kernel's layout: warp w holds rows 16w .. 16w + 15, lane l columns 4l .. 4l + 3 (gdn_ceiling::rmw_head).
__global__ void __launch_bounds__(256) head_reg256(float4* p, const int* slots) {
  gdn_ceiling::rmw_head(p + (size_t)slots[blockIdx.x] * (kHeadFloats / 4));
}

// head-reg-256 with the decode state kernel's work between the loads and the stores (fixed k̂, q̂,
// β, α instead of a prep record). MINB: CTAs per SM its registers are capped for.
// pf > 0: the CTA also asks L2 for the head of the CTA pf places after it (cp.async.bulk.prefetch,
// 4 × 16 KiB), so that DRAM has requests while the resident CTAs sit between loads and stores.
template <int MINB>
__global__ void __launch_bounds__(256, MINB) head_dots(float4* p, const int* slots, float* y, int pf) {
  __shared__ float sums[2][8][128];
  __shared__ float usm[128];
  __shared__ float osq[8];
  float4* h = p + (size_t)slots[blockIdx.x] * (kHeadFloats / 4);
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31, j = threadIdx.x;
  float4 v[16];
#pragma unroll
  for (int r = 0; r < 16; ++r) v[r] = h[(16 * w + r) * 32 + l];
  if (pf > 0 && threadIdx.x < 4 && blockIdx.x + pf < gridDim.x)
    gdn_ahead::prefetch_l2_part(p + (size_t)slots[blockIdx.x + pf] * (kHeadFloats / 4), 4u * kHeadFloats, threadIdx.x, 4);
  float4 a = make_float4(0, 0, 0, 0), b = a;
#pragma unroll
  for (int r = 0; r < 16; ++r) {
    const float kr = 0.01f * (float)(16 * w + r + 1), qr = 0.02f - 1e-4f * (float)(16 * w + r);
    a.x = fmaf(kr, v[r].x, a.x), a.y = fmaf(kr, v[r].y, a.y), a.z = fmaf(kr, v[r].z, a.z), a.w = fmaf(kr, v[r].w, a.w);
    b.x = fmaf(qr, v[r].x, b.x), b.y = fmaf(qr, v[r].y, b.y), b.z = fmaf(qr, v[r].z, b.z), b.w = fmaf(qr, v[r].w, b.w);
  }
  *reinterpret_cast<float4*>(&sums[0][w][4 * l]) = a;
  *reinterpret_cast<float4*>(&sums[1][w][4 * l]) = b;
  __syncthreads();
  float o = 0.0f;
  if (j < 128) {
    float sa = 0.0f, sb = 0.0f;
#pragma unroll
    for (int q = 0; q < 8; ++q) sa += sums[0][q][j], sb += sums[1][q][j];
    const float u = 0.5f * (1e-3f * (float)j - 0.999f * sa);
    o = 0.999f * sb + 0.3f * u;
    usm[j] = u;
  }
  float ss = o * o;
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, m);
  if (l == 0) osq[w] = ss;
  __syncthreads();
  const float4 u4 = *reinterpret_cast<const float4*>(&usm[4 * l]);
#pragma unroll
  for (int r = 0; r < 16; ++r) {
    const float kr = 0.01f * (float)(16 * w + r + 1);
    float4 x = v[r];
    x.x = fmaf(kr, u4.x, 0.999f * x.x), x.y = fmaf(kr, u4.y, 0.999f * x.y), x.z = fmaf(kr, u4.z, 0.999f * x.z), x.w = fmaf(kr, u4.w, 0.999f * x.w);
    __stcs(h + (16 * w + r) * 32 + l, x);
  }
  if (j < 128) {
    float tot = 0.0f;
#pragma unroll
    for (int q = 0; q < 8; ++q) tot += osq[q];
    y[(size_t)blockIdx.x * 128 + j] = o * rsqrtf(tot / 128.0f + 1e-6f);
  }
}

__global__ void __launch_bounds__(128) head_smem(float4* p) {
  extern __shared__ float4 s[];
  float4* h = p + (size_t)blockIdx.x * (kHeadFloats / 4);
  for (int e = threadIdx.x; e < kHeadFloats / 4; e += 128) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(s + e);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(h + e) : "memory");
  }
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
  __syncthreads();
  for (int e = threadIdx.x; e < kHeadFloats / 4; e += 128) h[e] = step(s[e]);
}

int main() {
  int l2 = 0;
  CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const size_t seqBytes = (size_t)kHeads * kHeadFloats * 4;  // 2 MiB
  const size_t total = 2ull << 30;                           // 2 GiB of states, rotated
  float* buf;
  float* dst;
  CK(cudaMalloc(&buf, total));
  CK(cudaMalloc(&dst, total));
  CK(cudaMemset(buf, 0, total));
  // Slot table: head x of a launch at head x (the indirection, not a permutation).
  int* slots;
  {
    const int maxHeads = 256 * kHeads;
    std::vector<int> id(maxHeads);
    for (int i = 0; i < maxHeads; ++i) id[i] = i;
    CK(cudaMalloc(&slots, maxHeads * sizeof(int)));
    CK(cudaMemcpy(slots, id.data(), maxHeads * sizeof(int), cudaMemcpyHostToDevice));
  }
  CK(cudaFuncSetAttribute(head_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, kHeadFloats * 4));
  constexpr int kPad2Cta = 90 << 10;
  CK(cudaFuncSetAttribute(head_reg256, cudaFuncAttributeMaxDynamicSharedMemorySize, kPad2Cta));
  CK(cudaFuncSetAttribute(head_dots<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, kPad2Cta));
  float* ybuf;
  CK(cudaMalloc(&ybuf, (size_t)256 * kHeads * 128 * sizeof(float)));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::printf("%s, %d SMs, L2 %d MiB\n", prop.name, prop.multiProcessorCount, l2 >> 20);
  for (int batch : {32, 256}) {
    const size_t bytes = batch * seqBytes;
    const int sets = (int)std::max<size_t>(1, std::min(total / bytes, (4 * (size_t)l2 + bytes - 1) / bytes));
    for (const char* name : {"copy", "read", "head-read-256", "flat", "head-reg", "head-smem", "head-split", "head-reg-256", "head-reg-256-2cta", "head-dots-3cta", "head-dots-2cta", "head-dots-pf33", "head-dots-pf66", "head-dots-pf99", "head-dots-pf132", "head-dots-pf165", "head-dots-pf198"}) {
      const std::string n(name);
      auto launch = [&](int set) {
        float* p = buf + (size_t)set * bytes / 4;
        float4* p4 = reinterpret_cast<float4*>(p);
        const int heads = batch * kHeads;
        if (n == "copy") CK(cudaMemcpyAsync(dst + (size_t)set * bytes / 4, p, bytes, cudaMemcpyDeviceToDevice));
        else if (n == "read") read_flat<<<prop.multiProcessorCount * 8, 256>>>(p4, (long long)(bytes / 16), ybuf);
        else if (n == "head-read-256") head_read256<<<heads, 256>>>(p4, slots, ybuf);
        else if (n == "flat") flat<<<prop.multiProcessorCount * 8, 256>>>(p4, (long long)(bytes / 16));
        else if (n == "head-reg") head_reg<1><<<heads, 128>>>(p4);
        else if (n == "head-smem") head_smem<<<heads, 128, kHeadFloats * 4>>>(p4);
        else if (n == "head-reg-256") head_reg256<<<heads, 256>>>(p4, slots);
        else if (n == "head-reg-256-2cta") head_reg256<<<heads, 256, kPad2Cta>>>(p4, slots);
        else if (n == "head-dots-3cta") head_dots<3><<<heads, 256>>>(p4, slots, ybuf, 0);
        else if (n == "head-dots-2cta") head_dots<2><<<heads, 256, kPad2Cta>>>(p4, slots, ybuf, 0);
        else if (n.rfind("head-dots-pf", 0) == 0) head_dots<2><<<heads, 256, kPad2Cta>>>(p4, slots, ybuf, std::stoi(n.substr(12)));
        else head_reg<2><<<2 * heads, 128>>>(p4);
      };
      for (int w = 0; w < 2 * sets; ++w) launch(w % sets);
      CK(cudaDeviceSynchronize());
      std::vector<float> ms;
      int at = 0;
      for (int r = 0; r < 20; ++r) {
        CK(cudaEventRecord(e0));
        for (int m = 0; m < 8; ++m) launch(at++ % sets);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float t;
        CK(cudaEventElapsedTime(&t, e0, e1));
        ms.push_back(t / 8);
      }
      CK(cudaGetLastError());
      std::sort(ms.begin(), ms.end());
      const double t = ms[ms.size() / 2] * 1e-3;
      const bool readOnly = n == "read" || n == "head-read-256";
      const size_t moved = readOnly ? bytes : 2 * bytes;
      std::printf("%-10s batch %3d  %8.1f us  %.3f TB/s (%s %zu MiB)\n", name, batch, t * 1e6, (double)moved / t / 1e12, readOnly ? "read" : "read + write", moved >> 20);
    }
  }
  return 0;
}
