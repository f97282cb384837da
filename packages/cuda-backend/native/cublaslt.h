// cuBLASLt, opened at run time, and the GEMMs of one device: row-major problems mapped onto its
// column-major API, one plan (descriptors + heuristic algorithm) cached per problem shape, and a
// preallocated workspace so that a GEMM can be recorded into a CUDA graph.
#pragma once

#include <napi.h>

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cublaslt-api.h"

namespace metrale {

using namespace metrale::cublaslt;

struct CublasLtApi {
#define METRALE_LT_FIELD(name, ret, params) PFN_##name name = nullptr;
  METRALE_CUBLASLT_FUNCTIONS(METRALE_LT_FIELD)
  METRALE_CUBLASLT_OPTIONAL_FUNCTIONS(METRALE_LT_FIELD)
#undef METRALE_LT_FIELD
};

struct CublasLtLoad {
  bool ok = false;
  std::string path;
  size_t version = 0;  // cublasLtGetVersion(): major * 10000 + minor * 100 + patch
  std::vector<std::pair<std::string, std::string>> tried;  // (candidate, why it failed)
};

/**
 * Opens the first candidate that dlopens, has every entry point and can create a handle (so a
 * context must be current). The first success is kept for the process; after a failure, a later
 * call may try other candidates.
 */
const CublasLtLoad& loadCublasLt(const std::vector<std::string>& candidates);

/** The loaded library, or nullptr. */
const CublasLtApi* cublasLt();

std::string cublasStatusName(cublasStatus_t status);
std::string cublasStatusText(cublasStatus_t status);

/** Element types of GEMM operands, as the TypeScript layer numbers them. */
enum class GemmType : int { F32 = 0, BF16 = 1, F16 = 2 };

/** One row-major GEMM problem: C[m×n] = alpha · op(A)[m×k] · op(B)[k×n] + beta · C. */
struct GemmProblem {
  GemmType abType = GemmType::F32;
  GemmType cType = GemmType::F32;
  bool transA = false;
  bool transB = false;
  uint64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  // Largest power of two (up to 256) dividing each pointer: cuBLASLt's heuristics pick kernels
  // that assume 256-byte alignment unless told otherwise.
  uint32_t alignA = 256, alignB = 256, alignC = 256;

  bool operator==(const GemmProblem& o) const;
};

struct GemmProblemHash {
  size_t operator()(const GemmProblem& p) const;
};

class GemmEngine {
 public:
  /** Creates the cuBLASLt handle; the workspace is the caller's and must outlive the engine. */
  GemmEngine(Napi::Env env, void* workspace, size_t workspaceBytes);
  ~GemmEngine();
  GemmEngine(const GemmEngine&) = delete;
  GemmEngine& operator=(const GemmEngine&) = delete;

  void run(Napi::Env env, const GemmProblem& problem, const void* a, const void* b, void* c, float alpha,
           float beta, cudaStream_t stream);

  size_t plans() const { return plans_.size(); }

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t layoutA = nullptr;  // cuBLASLt's A: our B
    cublasLtMatrixLayout_t layoutB = nullptr;  // cuBLASLt's B: our A
    cublasLtMatrixLayout_t layoutC = nullptr;  // C and D
    cublasLtMatmulAlgo_t algo{};
  };

  const Plan& plan(Napi::Env env, const GemmProblem& problem);
  void destroy(Plan& plan);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_;
  size_t workspaceBytes_;
  std::unordered_map<GemmProblem, Plan, GemmProblemHash> plans_;
};

}  // namespace metrale
