/*
 * A stand-in for libcuda.so.1 that runs on the host, for testing the addon on machines without a
 * GPU (test/mock-driver.test.ts loads it through METRALE_LIBCUDA_PATH). "Device" memory is host
 * memory; kernels are the ones of kernels/backend-test.cu, re-implemented here by symbol name;
 * streams run work at once unless they are capturing, in which case the work is recorded (with
 * its argument values) and replayed by cuGraphLaunch.
 *
 * It follows the driver's documented capture rules as metrale relies on them: in THREAD_LOCAL or
 * GLOBAL mode, "potentially unsafe" calls (allocation, synchronous copies, cuCtxSynchronize,
 * module loading) fail with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidate the capture;
 * work on an invalidated capture fails with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, and so does
 * cuStreamEndCapture, returning a NULL graph. The real driver is the judge: this mock only lets
 * the plumbing (argument marshalling, handle tables, error conversion) be tested anywhere.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum {
  SUCCESS = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, NOT_INITIALIZED = 3, NO_DEVICE = 100, INVALID_IMAGE = 200,
  INVALID_HANDLE = 400, ILLEGAL_STATE = 401, NOT_FOUND = 500, NOT_READY = 600, CAPTURE_UNSUPPORTED = 900,
  CAPTURE_INVALIDATED = 901, CAPTURE_WRONG_THREAD = 908,
};
enum { MODE_GLOBAL = 0, MODE_THREAD_LOCAL = 1, MODE_RELAXED = 2 };

#define EXPORT __attribute__((visibility("default")))
#define MAX_PARAMS 16
#define MAX_PARAM_BYTES 64

/* ---- recorded work ------------------------------------------------------------------------ */

typedef struct Kernel Kernel;
typedef struct Op Op;
typedef struct Graph {
  Op* ops;
  size_t count, capacity;
} Graph;

enum { OP_MEMSET, OP_COPY, OP_KERNEL, OP_EVENT, OP_GRAPH, OP_HOST };
struct Op {
  int kind;
  void* dst;
  const void* src;
  size_t bytes;
  unsigned char value;
  const Kernel* kernel;
  unsigned grid[3], block[3], shared;
  unsigned char params[MAX_PARAMS][8];
  struct Event* event;
  Graph child;
  void (*host)(void*);
  void* hostArg;
};

typedef struct Stream {
  int capturing, invalidated;
  Graph graph;
} Stream;

typedef struct Event {
  double ms;
  int recorded;
} Event;

typedef struct Module {
  unsigned char* image;
  size_t bytes;
} Module;

typedef struct Function {
  const Kernel* kernel;
  int maxDynamicShared;
} Function;

static int g_captures = 0;            /* streams capturing in a mode that forbids unsafe calls */
static int g_threadMode = MODE_GLOBAL; /* cuThreadExchangeStreamCaptureMode */
static size_t g_allocated = 0;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void push(Graph* g, Op op) {
  if (g->count == g->capacity) {
    g->capacity = g->capacity ? g->capacity * 2 : 16;
    g->ops = realloc(g->ops, g->capacity * sizeof(Op));
  }
  g->ops[g->count++] = op;
}

static Graph clone(const Graph* g) {
  Graph out = {0};
  for (size_t i = 0; i < g->count; i++) {
    Op op = g->ops[i];
    if (op.kind == OP_GRAPH) op.child = clone(&g->ops[i].child);
    push(&out, op);
  }
  return out;
}

static void release(Graph* g) {
  for (size_t i = 0; i < g->count; i++) if (g->ops[i].kind == OP_GRAPH) release(&g->ops[i].child);
  free(g->ops);
  memset(g, 0, sizeof *g);
}

static size_t nodes(const Graph* g) { return g->count; }

/** A call CUDA calls potentially unsafe: refused, and every capture invalidated, while one is active. */
static int unsafe_refused(void) { return g_captures > 0 && g_threadMode != MODE_RELAXED; }

static Stream* g_streams[4096];
static int g_streamCount = 0;
static void invalidate_all(void) {
  for (int i = 0; i < g_streamCount; i++) if (g_streams[i] && g_streams[i]->capturing) g_streams[i]->invalidated = 1;
}
#define REFUSE_UNSAFE()        \
  if (unsafe_refused()) {      \
    invalidate_all();          \
    return CAPTURE_UNSUPPORTED; \
  }

/* ---- the test kernels (kernels/backend-test.cu) -------------------------------------------- */

typedef void (*KernelFn)(unsigned char (*p)[8], const unsigned grid[3], const unsigned block[3], unsigned shared);
struct Kernel {
  const char* name;
  int count;
  int sizes[MAX_PARAMS];
  KernelFn run;
};

#define ARG(type, i) (*(type*)p[i])
static unsigned threads(const unsigned g[3], const unsigned b[3]) { return g[0] * b[0]; }

static void k_vector_add(unsigned char (*p)[8], const unsigned* g, const unsigned* b, unsigned s) {
  const float *x = ARG(float*, 0), *y = ARG(float*, 1);
  float* out = ARG(float*, 2);
  unsigned n = ARG(unsigned, 3);
  (void)g; (void)b; (void)s;
  for (unsigned i = 0; i < n; i++) out[i] = x[i] + y[i];
}
static void k_fill(unsigned char (*p)[8], const unsigned* g, const unsigned* b, unsigned s) {
  unsigned* dst = ARG(unsigned*, 0);
  unsigned value = ARG(unsigned, 1), n = ARG(unsigned, 2);
  (void)g; (void)b; (void)s;
  for (unsigned i = 0; i < n; i++) dst[i] = value;
}
static void k_scale(unsigned char (*p)[8], const unsigned* g, const unsigned* b, unsigned s) {
  float* x = ARG(float*, 0);
  float scale = ARG(float, 1);
  unsigned n = ARG(unsigned, 2);
  (void)g; (void)b; (void)s;
  for (unsigned i = 0; i < n; i++) x[i] *= scale;
}
static void k_noop(unsigned char (*p)[8], const unsigned* g, const unsigned* b, unsigned s) {
  (void)p; (void)g; (void)b; (void)s;
}
static void k_params_probe(unsigned char (*p)[8], const unsigned* g, const unsigned* b, unsigned s) {
  unsigned long long* out = ARG(unsigned long long*, 0);
  float e = ARG(float, 3);
  double f = ARG(double, 4);
  uint32_t ebits;
  uint64_t fbits;
  (void)g; (void)b; (void)s;
  memcpy(&ebits, &e, 4);
  memcpy(&fbits, &f, 8);
  out[0] = (unsigned long long)(long long)ARG(int, 1);
  out[1] = (unsigned long long)ARG(long long, 2);
  out[2] = ebits;
  out[3] = fbits;
  out[4] = ARG(unsigned, 5);
  out[5] = ARG(unsigned long long, 6);
  out[6] = (unsigned long long)(long long)ARG(int, 7);
}
static void k_shared_reverse(unsigned char (*p)[8], const unsigned* g, const unsigned* b, unsigned s) {
  const float* src = ARG(float*, 0);
  float* dst = ARG(float*, 1);
  unsigned n = ARG(unsigned, 2);
  float* staged = malloc(s ? s : 1);
  (void)g; (void)b;
  if (n * 4 > s) { fprintf(stderr, "mock: shared_reverse_f32 overran its shared memory\n"); abort(); }
  for (unsigned i = 0; i < n; i++) staged[i] = src[i];
  for (unsigned i = 0; i < n; i++) dst[i] = staged[n - 1 - i];
  free(staged);
}
static void k_accumulate(unsigned char (*p)[8], const unsigned* g, const unsigned* b, unsigned s) {
  unsigned* acc = ARG(unsigned*, 0);
  const unsigned* src = ARG(unsigned*, 1);
  unsigned mul = ARG(unsigned, 2), n = ARG(unsigned, 3);
  (void)g; (void)b; (void)s;
  for (unsigned i = 0; i < n; i++) acc[i] = acc[i] * mul + src[i];
}
static void k_xorshift(unsigned char (*p)[8], const unsigned* g, const unsigned* b, unsigned s) {
  unsigned* x = ARG(unsigned*, 0);
  unsigned n = ARG(unsigned, 1);
  (void)g; (void)b; (void)s;
  for (unsigned i = 0; i < n; i++) {
    unsigned v = x[i];
    v ^= v << 13;
    v ^= v >> 17;
    v ^= v << 5;
    x[i] = v;
  }
}

static void k_copy_after(unsigned char (*p)[8], const unsigned* g, const unsigned* b, unsigned s) {
  unsigned* dst = ARG(unsigned*, 0);
  const unsigned* src = ARG(unsigned*, 1);
  unsigned n = ARG(unsigned, 2);
  (void)g; (void)b; (void)s;
  memmove(dst, src, (size_t)n * 4);
}

static void k_read_xor(unsigned char (*p)[8], const unsigned* g, const unsigned* b, unsigned s) {
  const unsigned* src = ARG(unsigned*, 0);
  unsigned* sink = ARG(unsigned*, 1);
  unsigned n4 = ARG(unsigned, 2);
  unsigned threads = g[0] * b[0];
  (void)s;
  for (unsigned c = 0; c < g[0]; c++) sink[c] = 0;
  for (unsigned i = 0; i < n4; i++) sink[(i % threads) / b[0]] ^= src[4 * i] ^ src[4 * i + 1] ^ src[4 * i + 2] ^ src[4 * i + 3];
}

static void k_read_xor_ahead(unsigned char (*p)[8], const unsigned* g, const unsigned* b, unsigned s) {
  const unsigned* src = ARG(unsigned*, 0);
  unsigned* sink = ARG(unsigned*, 1);
  unsigned n4 = ARG(unsigned, 2);
  unsigned per = (n4 + g[0] - 1) / g[0];
  (void)b; (void)s;
  for (unsigned c = 0; c < g[0]; c++) sink[c] = 0;
  for (unsigned i = 0; i < n4; i++) sink[i / per] ^= src[4 * i] ^ src[4 * i + 1] ^ src[4 * i + 2] ^ src[4 * i + 3];
}

static void k_spin_cycles(unsigned char (*p)[8], const unsigned* g, const unsigned* b, unsigned s) {
  unsigned* sink = ARG(unsigned*, 0);
  (void)g; (void)b; (void)s;
  sink[0] = ARG(unsigned, 1);
}

/* The data path's kernels of kernels/convert.cu and kernels/gemm-fp8.cu, on the host: the same
 * functions (rounding to nearest even where they store), so the GPU lane's precision suite runs
 * its plumbing here too. */
static uint32_t f32_bits(float v) { uint32_t u; memcpy(&u, &v, 4); return u; }
static float bits_f32(uint32_t u) { float v; memcpy(&v, &u, 4); return v; }
static float bf16_value(uint16_t h) { return bits_f32((uint32_t)h << 16); }
static uint16_t bf16_bits(float v) {
  uint32_t u = f32_bits(v);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x7fffffu)) return (uint16_t)((u >> 16) | 0x40);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static float f16_value(uint16_t h) { return (float)*(_Float16*)&h; }
static uint16_t f16_bits(float v) { _Float16 h = (_Float16)v; uint16_t u; memcpy(&u, &h, 2); return u; }
static float load_el(const void* base, size_t i, int code) {
  if (code == 1) return bf16_value(((const uint16_t*)base)[i]);
  if (code == 2) return f16_value(((const uint16_t*)base)[i]);
  return ((const float*)base)[i];
}
static void store_el(void* base, size_t i, float v, int code) {
  if (code == 1) ((uint16_t*)base)[i] = bf16_bits(v);
  else if (code == 2) ((uint16_t*)base)[i] = f16_bits(v);
  else ((float*)base)[i] = v;
}
static float e4m3_value(uint8_t b) {
  int e = (b >> 3) & 15, m = b & 7;
  float sign = (b & 0x80) ? -1.0f : 1.0f;
  if (e == 15 && m == 7) return NAN;
  if (e == 0) return sign * (float)m * 0x1p-9f;
  return sign * (1.0f + (float)m / 8.0f) * bits_f32((uint32_t)(e - 7 + 127) << 23);
}
static void k_convert(unsigned char (*p)[8], const unsigned* g, const unsigned* b, unsigned s) {
  const void* src = ARG(void*, 0);
  int srcCode = ARG(int, 1);
  void* dst = ARG(void*, 2);
  int dstCode = ARG(int, 3);
  unsigned long long n = ARG(unsigned long long, 4);
  (void)g; (void)b; (void)s;
  for (unsigned long long i = 0; i < n; i++) store_el(dst, i, load_el(src, i, srcCode), dstCode);
}
static void k_gemm_fp8(unsigned char (*p)[8], const unsigned* g, const unsigned* b, unsigned s) {
  const void* a = ARG(void*, 0);
  int aCode = ARG(int, 1);
  const uint8_t* w = ARG(uint8_t*, 2);
  const float* scales = ARG(float*, 3);
  void* c = ARG(void*, 4);
  int cCode = ARG(int, 5);
  int m = ARG(int, 6), n = ARG(int, 7), k = ARG(int, 8), lda = ARG(int, 9), ldc = ARG(int, 10);
  float alpha = ARG(float, 11), beta = ARG(float, 12);
  int kb = (k + 127) / 128;
  (void)g; (void)b; (void)s;
  for (int i = 0; i < m; i++) {
    for (int j = 0; j < n; j++) {
      float acc = 0.0f;
      for (int q0 = 0; q0 < k; q0 += 128) {
        float part = 0.0f;
        for (int q = q0; q < q0 + 128 && q < k; q++) part += load_el(a, (size_t)i * lda + q, aCode) * e4m3_value(w[(size_t)j * k + q]);
        acc += scales[(j / 128) * kb + q0 / 128] * part;
      }
      size_t at = (size_t)i * ldc + j;
      float v = alpha * acc;
      if (beta != 0.0f) v += beta * load_el(c, at, cCode);
      store_el(c, at, v, cCode);
    }
  }
}

static const Kernel KERNELS[] = {
    {"backend_convert", 5, {8, 4, 8, 4, 8}, k_convert},
    {"backend_gemm_fp8_rows", 13, {8, 4, 8, 8, 8, 4, 4, 4, 4, 4, 4, 4, 4}, k_gemm_fp8},
    {"backend_gemm_fp8_rows_wide", 13, {8, 4, 8, 8, 8, 4, 4, 4, 4, 4, 4, 4, 4}, k_gemm_fp8},
    {"backend_gemm_fp8_tiled", 13, {8, 4, 8, 8, 8, 4, 4, 4, 4, 4, 4, 4, 4}, k_gemm_fp8},
    {"vector_add_f32", 4, {8, 8, 8, 4}, k_vector_add},
    {"fill_u32", 3, {8, 4, 4}, k_fill},
    {"scale_inplace_f32", 3, {8, 4, 4}, k_scale},
    {"noop", 0, {0}, k_noop},
    {"params_probe", 8, {8, 4, 8, 4, 8, 4, 8, 4}, k_params_probe},
    {"shared_reverse_f32", 3, {8, 8, 4}, k_shared_reverse},
    {"accumulate_u32", 4, {8, 8, 4, 4}, k_accumulate},
    {"xorshift_u32", 2, {8, 4}, k_xorshift},
    {"copy_after_u32", 3, {8, 8, 4}, k_copy_after},
    {"read_xor_u32", 3, {8, 8, 4}, k_read_xor},
    {"read_xor_ahead_u32", 4, {8, 8, 4, 4}, k_read_xor_ahead},
    {"spin_cycles", 2, {8, 4}, k_spin_cycles},
};

/* ---- running recorded work ---------------------------------------------------------------- */

static void run(const Graph* g);
static void run_op(const Op* op) {
  switch (op->kind) {
    case OP_MEMSET: memset(op->dst, op->value, op->bytes); break;
    case OP_COPY: memmove(op->dst, op->src, op->bytes); break;
    case OP_KERNEL: op->kernel->run((unsigned char(*)[8])op->params, op->grid, op->block, op->shared); break;
    case OP_EVENT: op->event->ms = now_ms(); op->event->recorded = 1; break;
    case OP_GRAPH: run(&op->child); break;
    case OP_HOST: op->host(op->hostArg); break;
  }
}
static void run(const Graph* g) {
  for (size_t i = 0; i < g->count; i++) run_op(&g->ops[i]);
}

/** Runs the work now, or records it when the stream captures. */
static CUresult submit(Stream* s, Op op) {
  if (s && s->capturing) {
    if (s->invalidated) return CAPTURE_INVALIDATED;
    push(&s->graph, op);
    return SUCCESS;
  }
  run_op(&op);
  return SUCCESS;
}

/* ---- the driver API ------------------------------------------------------------------------ */

static const struct { CUresult code; const char* name; const char* text; } NAMES[] = {
    {SUCCESS, "CUDA_SUCCESS", "no error"},
    {INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
    {NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing"},
    {CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "operation failed due to a previous error during capture"},
    {CAPTURE_WRONG_THREAD, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", "attempted operation not permitted"},
};

EXPORT CUresult cuGetErrorName(CUresult e, const char** s) {
  for (size_t i = 0; i < sizeof NAMES / sizeof *NAMES; i++) if (NAMES[i].code == e) return *s = NAMES[i].name, SUCCESS;
  *s = NULL;
  return INVALID_VALUE;
}
EXPORT CUresult cuGetErrorString(CUresult e, const char** s) {
  for (size_t i = 0; i < sizeof NAMES / sizeof *NAMES; i++) if (NAMES[i].code == e) return *s = NAMES[i].text, SUCCESS;
  *s = NULL;
  return INVALID_VALUE;
}

static int g_init = 0;
EXPORT CUresult cuInit(unsigned flags) {
  if (flags != 0) return INVALID_VALUE;
  if (getenv("MOCK_CUDA_NO_DEVICE")) return NO_DEVICE;
  g_init = 1;
  return SUCCESS;
}
#define NEED_INIT() if (!g_init) return NOT_INITIALIZED
EXPORT CUresult cuDriverGetVersion(int* v) { return *v = 13000, SUCCESS; }
EXPORT CUresult cuDeviceGetCount(int* n) { NEED_INIT(); return *n = 1, SUCCESS; }
EXPORT CUresult cuDeviceGet(int* d, int ordinal) { NEED_INIT(); if (ordinal != 0) return INVALID_VALUE; return *d = 0, SUCCESS; }
EXPORT CUresult cuDeviceGetName(char* name, int len, int dev) {
  NEED_INIT();
  (void)dev;
  snprintf(name, (size_t)len, "Mock H200 (metrale test driver)");
  return SUCCESS;
}
EXPORT CUresult cuDeviceGetAttribute(int* v, int attr, int dev) {
  NEED_INIT();
  (void)dev;
  switch (attr) {
    case 1: *v = 1024; break;       /* MAX_THREADS_PER_BLOCK */
    case 8: *v = 49152; break;      /* MAX_SHARED_MEMORY_PER_BLOCK */
    case 16: *v = 132; break;       /* MULTIPROCESSOR_COUNT */
    case 38: *v = 52428800; break;  /* L2_CACHE_SIZE */
    case 75: *v = 9; break;         /* COMPUTE_CAPABILITY_MAJOR */
    case 76: *v = 0; break;         /* COMPUTE_CAPABILITY_MINOR */
    case 97: *v = 232448; break;    /* MAX_SHARED_MEMORY_PER_BLOCK_OPTIN */
    default: return INVALID_VALUE;
  }
  return SUCCESS;
}
EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, int dev) { NEED_INIT(); (void)dev; return *bytes = (size_t)1 << 34, SUCCESS; }

static int g_ctxRefs = 0;
static int g_ctx;
EXPORT CUresult cuDevicePrimaryCtxRetain(void** ctx, int dev) { NEED_INIT(); (void)dev; g_ctxRefs++; *ctx = &g_ctx; return SUCCESS; }
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(int dev) { (void)dev; if (g_ctxRefs == 0) return INVALID_VALUE; g_ctxRefs--; return SUCCESS; }
static void* g_current = NULL;
EXPORT CUresult cuCtxSetCurrent(void* ctx) { g_current = ctx; return SUCCESS; }
#define NEED_CTX() if (!g_current) return 201 /* CUDA_ERROR_INVALID_CONTEXT */
EXPORT CUresult cuCtxSynchronize(void) { NEED_CTX(); REFUSE_UNSAFE(); return SUCCESS; }
EXPORT CUresult cuMemGetInfo_v2(size_t* freeBytes, size_t* total) {
  NEED_CTX();
  *total = (size_t)1 << 34;
  *freeBytes = *total - g_allocated;
  return SUCCESS;
}

/* Allocations are tracked so frees of unknown pointers fail as they do on the driver. */
static struct { void* p; size_t bytes; } g_allocs[65536];
static int g_allocCount = 0;
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* out, size_t bytes) {
  NEED_CTX();
  if (bytes == 0) return INVALID_VALUE;
  REFUSE_UNSAFE();
  if (g_allocCount == 65536) return OUT_OF_MEMORY;
  void* p = aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (!p) return OUT_OF_MEMORY;
  g_allocs[g_allocCount].p = p;
  g_allocs[g_allocCount++].bytes = bytes;
  g_allocated += bytes;
  *out = (CUdeviceptr)(uintptr_t)p;
  return SUCCESS;
}
EXPORT CUresult cuMemFree_v2(CUdeviceptr ptr) {
  NEED_CTX();
  REFUSE_UNSAFE();
  for (int i = 0; i < g_allocCount; i++) {
    if ((CUdeviceptr)(uintptr_t)g_allocs[i].p == ptr) {
      free(g_allocs[i].p);
      g_allocated -= g_allocs[i].bytes;
      g_allocs[i] = g_allocs[--g_allocCount];
      return SUCCESS;
    }
  }
  return INVALID_VALUE;
}
EXPORT CUresult cuMemHostAlloc(void** p, size_t bytes, unsigned flags) {
  NEED_CTX();
  if (flags & ~0x7u) return INVALID_VALUE;
  REFUSE_UNSAFE();
  *p = calloc(1, bytes);
  return *p ? SUCCESS : OUT_OF_MEMORY;
}
EXPORT CUresult cuMemFreeHost(void* p) { NEED_CTX(); REFUSE_UNSAFE(); free(p); return SUCCESS; }

#define STREAM(h) ((Stream*)(h))
EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, void* s) {
  Op op = {.kind = OP_MEMSET, .dst = (void*)(uintptr_t)dst, .value = v, .bytes = n};
  return submit(STREAM(s), op);
}
EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, void* s) {
  Op op = {.kind = OP_COPY, .dst = (void*)(uintptr_t)dst, .src = src, .bytes = n};
  return submit(STREAM(s), op);
}
EXPORT CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, void* s) {
  Op op = {.kind = OP_COPY, .dst = dst, .src = (const void*)(uintptr_t)src, .bytes = n};
  return submit(STREAM(s), op);
}
EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void* s) {
  Op op = {.kind = OP_COPY, .dst = (void*)(uintptr_t)dst, .src = (const void*)(uintptr_t)src, .bytes = n};
  return submit(STREAM(s), op);
}
EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  NEED_CTX();
  REFUSE_UNSAFE();
  memcpy((void*)(uintptr_t)dst, src, n);
  return SUCCESS;
}
EXPORT CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  NEED_CTX();
  REFUSE_UNSAFE();
  memcpy(dst, (const void*)(uintptr_t)src, n);
  return SUCCESS;
}

EXPORT CUresult cuStreamCreate(void** out, unsigned flags) {
  NEED_CTX();
  if (flags != 1) return INVALID_VALUE; /* metrale only makes non-blocking streams */
  Stream* s = calloc(1, sizeof(Stream));
  g_streams[g_streamCount++] = s;
  *out = s;
  return SUCCESS;
}
EXPORT CUresult cuStreamDestroy_v2(void* h) {
  for (int i = 0; i < g_streamCount; i++) {
    if (g_streams[i] == h) {
      if (STREAM(h)->capturing) return ILLEGAL_STATE;
      g_streams[i] = NULL;
      free(h);
      return SUCCESS;
    }
  }
  return INVALID_HANDLE;
}
EXPORT CUresult cuStreamSynchronize(void* h) {
  if (!h) return INVALID_HANDLE;
  if (STREAM(h)->capturing) {
    invalidate_all();
    return CAPTURE_UNSUPPORTED;
  }
  return SUCCESS;
}

EXPORT CUresult cuEventCreate(void** out, unsigned flags) {
  if (flags != 0) return INVALID_VALUE;
  *out = calloc(1, sizeof(Event));
  return SUCCESS;
}
EXPORT CUresult cuEventRecord(void* e, void* s) {
  Op op = {.kind = OP_EVENT, .event = e};
  return submit(STREAM(s), op);
}
EXPORT CUresult cuEventSynchronize(void* e) { return ((Event*)e)->recorded ? SUCCESS : SUCCESS; }
EXPORT CUresult cuEventElapsedTime_v2(float* ms, void* a, void* b) {
  if (!((Event*)a)->recorded || !((Event*)b)->recorded) return INVALID_HANDLE;
  *ms = (float)(((Event*)b)->ms - ((Event*)a)->ms);
  return SUCCESS;
}
EXPORT CUresult cuEventDestroy_v2(void* e) { free(e); return SUCCESS; }

EXPORT CUresult cuStreamBeginCapture_v2(void* h, int mode) {
  Stream* s = STREAM(h);
  if (!s) return INVALID_HANDLE; /* the legacy NULL stream cannot be captured */
  if (mode < 0 || mode > 2) return INVALID_VALUE;
  if (s->capturing) return ILLEGAL_STATE;
  s->capturing = 1;
  s->invalidated = 0;
  if (mode != MODE_RELAXED) g_captures++;
  return SUCCESS;
}
EXPORT CUresult cuStreamEndCapture(void* h, void** graph) {
  Stream* s = STREAM(h);
  *graph = NULL;
  if (!s || !s->capturing) return ILLEGAL_STATE;
  s->capturing = 0;
  g_captures--;
  if (s->invalidated) {
    release(&s->graph);
    return CAPTURE_INVALIDATED;
  }
  Graph* g = malloc(sizeof(Graph));
  *g = s->graph;
  memset(&s->graph, 0, sizeof s->graph);
  *graph = g;
  return SUCCESS;
}
EXPORT CUresult cuStreamIsCapturing(void* h, int* status) {
  Stream* s = STREAM(h);
  *status = s && s->capturing ? (s->invalidated ? 2 : 1) : 0;
  return SUCCESS;
}
EXPORT CUresult cuThreadExchangeStreamCaptureMode(int* mode) {
  int previous = g_threadMode;
  g_threadMode = *mode;
  *mode = previous;
  return SUCCESS;
}
EXPORT CUresult cuGraphGetNodes(void* g, void** out, size_t* n) {
  if (out) return INVALID_VALUE;
  *n = nodes((Graph*)g);
  return SUCCESS;
}
EXPORT CUresult cuGraphInstantiateWithFlags(void** exec, void* g, unsigned long long flags) {
  if (flags) return INVALID_VALUE;
  Graph* copy = malloc(sizeof(Graph));
  *copy = clone((Graph*)g);
  *exec = copy;
  return SUCCESS;
}
EXPORT CUresult cuGraphLaunch(void* exec, void* s) {
  Op op = {.kind = OP_GRAPH, .child = clone((Graph*)exec)};
  CUresult r = submit(STREAM(s), op);
  if (!(STREAM(s) && STREAM(s)->capturing)) release(&op.child);
  return r;
}
EXPORT CUresult cuGraphDestroy(void* g) { release(g); free(g); return SUCCESS; }
EXPORT CUresult cuGraphExecDestroy(void* g) { release(g); free(g); return SUCCESS; }

/* An nvcc fatbin starts with the magic 0xBA55ED50. */
EXPORT CUresult cuModuleLoadData(void** out, const void* image) {
  NEED_CTX();
  REFUSE_UNSAFE();
  uint32_t magic;
  uint64_t size;
  memcpy(&magic, image, 4);
  if (magic != 0xBA55ED50u) return INVALID_IMAGE;
  memcpy(&size, (const char*)image + 8, 8); /* header: magic, version, header size, fat size */
  Module* m = calloc(1, sizeof(Module));
  m->bytes = 16 + size;
  m->image = malloc(m->bytes);
  memcpy(m->image, image, m->bytes);
  *out = m;
  return SUCCESS;
}
EXPORT CUresult cuModuleUnload(void* h) {
  REFUSE_UNSAFE();
  Module* m = h;
  free(m->image);
  free(m);
  return SUCCESS;
}
EXPORT CUresult cuModuleGetFunction(void** out, void* h, const char* name) {
  Module* m = h;
  REFUSE_UNSAFE();
  /* The symbol must be in the image (its ELF string tables hold the names) and be a test kernel. */
  if (!memmem(m->image, m->bytes, name, strlen(name) + 1)) return NOT_FOUND;
  for (size_t i = 0; i < sizeof KERNELS / sizeof *KERNELS; i++) {
    if (strcmp(KERNELS[i].name, name) == 0) {
      Function* f = calloc(1, sizeof(Function));
      f->kernel = &KERNELS[i];
      f->maxDynamicShared = 49152;
      *out = f;
      return SUCCESS;
    }
  }
  return NOT_FOUND;
}
EXPORT CUresult cuFuncLoad(void* h) {
  REFUSE_UNSAFE();
  return h ? SUCCESS : INVALID_HANDLE;
}
EXPORT CUresult cuFuncGetAttribute(int* v, int attr, void* h) {
  Function* f = h;
  switch (attr) {
    case 0: *v = 1024; break;
    case 1: *v = 0; break;
    case 4: *v = 32; break;
    case 8: *v = f->maxDynamicShared; break;
    default: return INVALID_VALUE;
  }
  return SUCCESS;
}
EXPORT CUresult cuFuncSetAttribute(void* h, int attr, int value) {
  Function* f = h;
  if (attr != 8 || value < 0 || value > 232448) return INVALID_VALUE;
  f->maxDynamicShared = value;
  return SUCCESS;
}
EXPORT CUresult cuLaunchKernel(void* h, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                               unsigned shared, void* s, void** params, void** extra) {
  Function* f = h;
  if (extra) return INVALID_VALUE;
  if (!gx || !gy || !gz || !bx || !by || !bz || bx * by * bz > 1024) return INVALID_VALUE;
  if ((int)shared > f->maxDynamicShared) return INVALID_VALUE;
  if (f->kernel->count > 0 && !params) return INVALID_VALUE;
  Op op = {.kind = OP_KERNEL, .kernel = f->kernel, .grid = {gx, gy, gz}, .block = {bx, by, bz}, .shared = shared};
  /* cuLaunchKernel copies the parameter values at the call: later changes are not seen. */
  for (int i = 0; i < f->kernel->count; i++) memcpy(op.params[i], params[i], (size_t)f->kernel->sizes[i]);
  (void)threads;
  return submit(STREAM(s), op);
}

/* cuLaunchKernelEx: cuLaunchKernel with attributes (cuda.h CUlaunchConfig). The only one the addon
   sets is an early start (programmatic stream serialization, id 6); the mock runs work in stream
   order, which that permits. MOCK_CUDA_EARLY_START_LOG names a file that gets a line per such
   launch, so tests can see the attribute arrive. */
typedef struct {
  int id;
  char pad[4];
  union { char bytes[64]; int programmaticStreamSerializationAllowed; } value;
} LaunchAttribute;
typedef struct {
  unsigned gx, gy, gz, bx, by, bz, shared;
  void* stream;
  LaunchAttribute* attrs;
  unsigned numAttrs;
} LaunchConfig;
EXPORT CUresult cuLaunchKernelEx(const LaunchConfig* c, void* h, void** params, void** extra) {
  if (!c || (c->numAttrs && !c->attrs)) return INVALID_VALUE;
  int early = 0;
  for (unsigned i = 0; i < c->numAttrs; i++) {
    if (c->attrs[i].id != 6) return INVALID_VALUE;
    early |= c->attrs[i].value.programmaticStreamSerializationAllowed != 0;
  }
  const CUresult r = cuLaunchKernel(h, c->gx, c->gy, c->gz, c->bx, c->by, c->bz, c->shared, c->stream, params, extra);
  const char* log = getenv("MOCK_CUDA_EARLY_START_LOG");
  if (r == SUCCESS && early && log) {
    FILE* f = fopen(log, "a");
    if (f) fprintf(f, "%s\n", ((Function*)h)->kernel->name), fclose(f);
  }
  return r;
}

/* For mock-cublaslt.c: runs fn(arg) in stream order (recorded when the stream captures). */
EXPORT CUresult mockSubmitHost(void* s, void (*fn)(void*), void* arg) {
  Op op = {.kind = OP_HOST, .host = fn, .hostArg = arg};
  return submit(STREAM(s), op);
}
