// Kernels the backend's own tests and benchmark launch (src/test-kernels.ts declares each one
// with defineKernel, with a CPU implementation of the same computation). Grid-stride loops, so
// any grid covers any n.
#include <cstdint>

#define GRID_STRIDE(i, n) \
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += gridDim.x * blockDim.x)

extern "C" __global__ void vector_add_f32(const float* a, const float* b, float* out, unsigned n) {
  GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

extern "C" __global__ void fill_u32(unsigned* dst, unsigned value, unsigned n) {
  GRID_STRIDE(i, n) dst[i] = value;
}

extern "C" __global__ void scale_inplace_f32(float* x, float scale, unsigned n) {
  GRID_STRIDE(i, n) x[i] *= scale;
}

// Launch-overhead benchmark: does nothing.
extern "C" __global__ void noop() {}

// One parameter of every kernel parameter type, in an order that needs padding (i32 then i64),
// written back as 64-bit words so the host can check each value arrived intact.
extern "C" __global__ void params_probe(unsigned long long* out, int a, long long c, float e, double f, unsigned b,
                                        unsigned long long d, int g) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  out[0] = static_cast<unsigned long long>(static_cast<long long>(a));
  out[1] = static_cast<unsigned long long>(c);
  out[2] = __float_as_uint(e);
  out[3] = static_cast<unsigned long long>(__double_as_longlong(f));
  out[4] = b;
  out[5] = d;
  out[6] = static_cast<unsigned long long>(static_cast<long long>(g));
}

// Dynamic shared memory: one block stages n floats in shared memory and writes them reversed.
// With n = 16384 it needs 64 KiB, above the default 48 KiB limit, so the backend must opt in.
extern "C" __global__ void shared_reverse_f32(const float* src, float* dst, unsigned n) {
  extern __shared__ float staged[];
  for (unsigned i = threadIdx.x; i < n; i += blockDim.x) staged[i] = src[i];
  __syncthreads();
  for (unsigned i = threadIdx.x; i < n; i += blockDim.x) dst[i] = staged[n - 1 - i];
}

// Graph replay tests: acc = acc * mul + src (mod 2^32), then src advances by xorshift, so each
// replay depends on the previous one and integer arithmetic makes replay == eager bit for bit.
extern "C" __global__ void accumulate_u32(unsigned* acc, const unsigned* src, unsigned mul, unsigned n) {
  GRID_STRIDE(i, n) acc[i] = acc[i] * mul + src[i];
}

extern "C" __global__ void xorshift_u32(unsigned* x, unsigned n) {
  GRID_STRIDE(i, n) {
    unsigned v = x[i];
    v ^= v << 13;
    v ^= v >> 17;
    v ^= v << 5;
    x[i] = v;
  }
}

// Early-start tests: the copy of src into dst once the previous kernel on the stream has finished
// (griddepcontrol.wait on sm_90: with LaunchConfig.earlyStart this kernel may begin before it).
extern "C" __global__ void copy_after_u32(unsigned* dst, const unsigned* src, unsigned n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  GRID_STRIDE(i, n) dst[i] = src[i];
}

// The CTA's xor of its threads' acc into sink[blockIdx.x] (at most 256 threads a CTA).
__device__ __forceinline__ void store_cta_xor(unsigned acc, unsigned* sink) {
  for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
  __shared__ unsigned warps[8];
  if ((threadIdx.x & 31) == 0) warps[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned all = 0;
    for (unsigned w = 0; w < (blockDim.x + 31) / 32; w++) all ^= warps[w];
    sink[blockIdx.x] = all;
  }
}

// The kernel-chain kernels' order on sm_90: wait for the kernel ahead, then let
// the next one be scheduled (layer-std's decode kernels do the same).
__device__ __forceinline__ void wait_then_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Kernel-chain benchmark: reads n4 16-byte words once (the bytes a decode kernel must stream) and
// stores each CTA's xor of them in sink[blockIdx.x], so the reads cannot be dropped. It waits for
// the kernel ahead and lets the next one start early (griddepcontrol on sm_90), as layer-std's
// decode chain does.
extern "C" __global__ void __launch_bounds__(256) read_xor_u32(const uint4* src, unsigned* sink, unsigned n4) {
  wait_then_release();
  unsigned acc = 0;
  GRID_STRIDE(i, n4) {
    const uint4 v = __ldcs(src + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  store_cta_xor(acc, sink);
}

// Kernel-chain benchmark, the reader that starts its bytes before it waits: CTA b reads the
// contiguous words [b·per, (b + 1)·per) of src's n4 16-byte words (per = ⌈n4 / gridDim.x⌉),
// its threads striding by blockDim.x, and stores its xor in sink[b]. Before griddepcontrol.wait
// (sm_90) it starts on its bytes, which no kernel ahead writes: ahead 0 nothing (the order of
// read_xor_u32), 1 its threads' first kAheadLoads words into registers, 2 its whole range into L2
// (cp.async.bulk.prefetch, threads of the first warp each a share of up to 64 KiB at a time).
// What a decode kernel could do with its weights while the kernel ahead still runs.
constexpr int kAheadLoads = 4;
extern "C" __global__ void __launch_bounds__(256) read_xor_ahead_u32(const uint4* src, unsigned* sink, unsigned n4, int ahead) {
  const unsigned per = (n4 + gridDim.x - 1) / gridDim.x;
  const unsigned lo = min(n4, blockIdx.x * per), hi = min(n4, lo + per);
  unsigned acc = 0;
  uint4 early[kAheadLoads];
  if (ahead == 1) {
#pragma unroll
    for (int r = 0; r < kAheadLoads; r++) {
      const unsigned i = lo + threadIdx.x + r * blockDim.x;
      early[r] = i < hi ? __ldcs(src + i) : make_uint4(0, 0, 0, 0);
    }
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (ahead == 2 && threadIdx.x < 32) {
    constexpr unsigned kChunk4 = 4096;  // 64 KiB in 16-byte words
    for (unsigned c = lo + threadIdx.x * kChunk4; c < hi; c += 32 * kChunk4) {
      const unsigned bytes = 16 * min(kChunk4, hi - c);
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src + c), "r"(bytes) : "memory");
    }
  }
#endif
  wait_then_release();
  unsigned i = lo + threadIdx.x;
  if (ahead == 1) {
#pragma unroll
    for (int r = 0; r < kAheadLoads; r++) acc ^= early[r].x ^ early[r].y ^ early[r].z ^ early[r].w;
    i += kAheadLoads * blockDim.x;
  }
  for (; i < hi; i += blockDim.x) {
    const uint4 v = __ldcs(src + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  store_cta_xor(acc, sink);
}

// Kernel-chain benchmark, a kernel that moves no bytes (a norm's or a route's serial work): waits
// for the kernel ahead, lets the next start early, then thread 0 of CTA 0 spins for `cycles` SM
// clocks and stores the clocks it spun in sink[0].
extern "C" __global__ void spin_cycles(unsigned* sink, unsigned cycles) {
  wait_then_release();
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  const long long t0 = clock64();
  long long t = t0;
  while (t - t0 < cycles) t = clock64();
  sink[0] = static_cast<unsigned>(t - t0);
}
