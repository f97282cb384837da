/*
 * A stand-in for libcublasLt that computes on the host, for the mock-driver tests: column-major
 * D = alpha * op(A) * op(B) + beta * C exactly as cuBLASLt defines it, with f32, bf16 or f16 operands.
 * It checks what the real library checks (attribute sizes, leading dimensions, that the layouts
 * fit m, n and k, supported type combinations), so a wrong row-major mapping in the addon fails
 * here. Work goes through the mock driver's stream (mockSubmitHost), so GEMMs can be captured.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))
enum { OK = 0, NOT_INITIALIZED = 1, INVALID_VALUE = 7, NOT_SUPPORTED = 15 };
enum { R_32F = 0, R_16F = 2, R_16BF = 14 };

typedef struct { int compute, scale, transa, transb; } Desc;
typedef struct { int type; uint64_t rows, cols; int64_t ld; } Layout;
typedef struct { uint64_t workspace; uint32_t align[4]; } Pref;
typedef struct { uint64_t data[8]; } Algo;
typedef struct { Algo algo; size_t workspaceSize; int state; float wavesCount; int reserved[4]; } Heuristic;

EXPORT int cublasLtCreate(void** h) { *h = malloc(1); return OK; }
EXPORT int cublasLtDestroy(void* h) { free(h); return OK; }
EXPORT size_t cublasLtGetVersion(void) { return 130000; }
EXPORT const char* cublasLtGetStatusName(int s) {
  switch (s) {
    case 0: return "CUBLAS_STATUS_SUCCESS";
    case 1: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case 3: return "CUBLAS_STATUS_ALLOC_FAILED";
    case 7: return "CUBLAS_STATUS_INVALID_VALUE";
    case 8: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case 13: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case 14: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case 15: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_UNKNOWN";
  }
}
EXPORT const char* cublasLtGetStatusString(int s) { return s == 0 ? "success" : "mock cuBLASLt error"; }

EXPORT int cublasLtMatmulDescCreate(Desc** d, int compute, int scale) {
  if (compute != 68 || scale != R_32F) return NOT_SUPPORTED; /* CUBLAS_COMPUTE_32F, CUDA_R_32F */
  *d = calloc(1, sizeof(Desc));
  (*d)->compute = compute;
  (*d)->scale = scale;
  return OK;
}
EXPORT int cublasLtMatmulDescDestroy(Desc* d) { free(d); return OK; }
EXPORT int cublasLtMatmulDescSetAttribute(Desc* d, int attr, const void* buf, size_t size) {
  if (size != 4) return INVALID_VALUE; /* TRANSA and TRANSB are int32_t */
  int32_t v;
  memcpy(&v, buf, 4);
  if (v != 0 && v != 1) return INVALID_VALUE;
  if (attr == 3) d->transa = v;
  else if (attr == 4) d->transb = v;
  else return INVALID_VALUE;
  return OK;
}
EXPORT int cublasLtMatrixLayoutCreate(Layout** l, int type, uint64_t rows, uint64_t cols, int64_t ld) {
  if (type != R_32F && type != R_16BF && type != R_16F) return NOT_SUPPORTED;
  if (ld < (int64_t)rows || rows == 0 || cols == 0) return INVALID_VALUE;
  *l = malloc(sizeof(Layout));
  **l = (Layout){type, rows, cols, ld};
  return OK;
}
EXPORT int cublasLtMatrixLayoutDestroy(Layout* l) { free(l); return OK; }
EXPORT int cublasLtMatmulPreferenceCreate(Pref** p) { *p = calloc(1, sizeof(Pref)); return OK; }
EXPORT int cublasLtMatmulPreferenceDestroy(Pref* p) { free(p); return OK; }
EXPORT int cublasLtMatmulPreferenceSetAttribute(Pref* p, int attr, const void* buf, size_t size) {
  if (attr == 1) {
    if (size != 8) return INVALID_VALUE; /* uint64_t */
    memcpy(&p->workspace, buf, 8);
    return OK;
  }
  if (attr >= 5 && attr <= 8) {
    if (size != 4) return INVALID_VALUE; /* uint32_t */
    memcpy(&p->align[attr - 5], buf, 4);
    return OK;
  }
  return INVALID_VALUE;
}

/** m, n, k of D = op(A) op(B), or 0 when the layouts do not fit together. */
static int shape(const Desc* d, const Layout* a, const Layout* b, const Layout* c, uint64_t* m, uint64_t* n, uint64_t* k) {
  *m = c->rows;
  *n = c->cols;
  uint64_t am = d->transa ? a->cols : a->rows, ak = d->transa ? a->rows : a->cols;
  uint64_t bk = d->transb ? b->cols : b->rows, bn = d->transb ? b->rows : b->cols;
  *k = ak;
  return am == *m && bn == *n && bk == ak;
}

EXPORT int cublasLtMatmulAlgoGetHeuristic(void* h, Desc* d, Layout* a, Layout* b, Layout* c, Layout* dl, Pref* p,
                                          int requested, Heuristic* out, int* returned) {
  uint64_t m, n, k;
  (void)h;
  (void)p;
  if (requested <= 0) return INVALID_VALUE;
  if (!shape(d, a, b, c, &m, &n, &k)) return INVALID_VALUE;
  if (c->type != dl->type || c->rows != dl->rows || c->cols != dl->cols) return INVALID_VALUE;
  if (a->type != b->type) return NOT_SUPPORTED;
  if (a->type == R_32F && c->type != R_32F) return NOT_SUPPORTED; /* no f32 x f32 -> bf16 or f16 */
  memset(out, 0, sizeof(Heuristic));
  out[0].algo.data[0] = 42;
  out[0].state = OK;
  out[0].wavesCount = 1.0f;
  *returned = 1;
  return OK;
}

static float load(int type, const void* base, uint64_t index) {
  if (type == R_32F) return ((const float*)base)[index];
  if (type == R_16F) return (float)((const _Float16*)base)[index];
  uint32_t bits = (uint32_t)((const uint16_t*)base)[index] << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}
static void store(int type, void* base, uint64_t index, float value) {
  if (type == R_32F) {
    ((float*)base)[index] = value;
    return;
  }
  if (type == R_16F) {
    ((_Float16*)base)[index] = (_Float16)value; /* round to nearest even */
    return;
  }
  uint32_t bits;
  memcpy(&bits, &value, 4);
  bits += 0x7fff + ((bits >> 16) & 1); /* round to nearest even */
  ((uint16_t*)base)[index] = (uint16_t)(bits >> 16);
}

typedef struct {
  Desc d;
  Layout a, b, c;
  float alpha, beta;
  const void *A, *B, *C;
  void* D;
} Job;

static void compute(void* arg) {
  const Job* j = arg;
  uint64_t m, n, k;
  shape(&j->d, &j->a, &j->b, &j->c, &m, &n, &k);
  for (uint64_t col = 0; col < n; col++) {
    for (uint64_t row = 0; row < m; row++) {
      float sum = 0;
      for (uint64_t l = 0; l < k; l++) {
        uint64_t ai = j->d.transa ? l + row * (uint64_t)j->a.ld : row + l * (uint64_t)j->a.ld;
        uint64_t bi = j->d.transb ? col + l * (uint64_t)j->b.ld : l + col * (uint64_t)j->b.ld;
        sum += load(j->a.type, j->A, ai) * load(j->b.type, j->B, bi);
      }
      uint64_t ci = row + col * (uint64_t)j->c.ld;
      float prior = j->beta != 0 ? load(j->c.type, j->C, ci) : 0;
      store(j->c.type, j->D, ci, j->alpha * sum + j->beta * prior);
    }
  }
}

EXPORT int cublasLtMatmul(void* h, Desc* d, const float* alpha, const void* A, Layout* a, const void* B, Layout* b,
                          const float* beta, const void* C, Layout* c, void* D, Layout* dl, const Algo* algo,
                          void* workspace, size_t workspaceBytes, void* stream) {
  uint64_t m, n, k;
  (void)h;
  (void)workspace;
  (void)workspaceBytes;
  if (!algo || algo->data[0] != 42) return INVALID_VALUE;
  if (!shape(d, a, b, c, &m, &n, &k) || dl->rows != c->rows || dl->cols != c->cols) return INVALID_VALUE;
  Job* job = malloc(sizeof(Job));
  *job = (Job){*d, *a, *b, *c, *alpha, *beta, A, B, C, D};
  /* Through the mock driver, so the GEMM is recorded when the stream captures. */
  static int (*submitHost)(void*, void (*)(void*), void*) = NULL;
  if (!submitHost) {
    void* driver = dlopen(getenv("METRALE_LIBCUDA_PATH"), RTLD_NOW | RTLD_NOLOAD);
    if (driver) submitHost = (int (*)(void*, void (*)(void*), void*))dlsym(driver, "mockSubmitHost");
    if (!submitHost) return NOT_INITIALIZED;
  }
  return submitHost(stream, compute, job) == 0 ? OK : 13 /* EXECUTION_FAILED */;
}
