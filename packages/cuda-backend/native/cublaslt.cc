#include "cublaslt.h"

#include <dlfcn.h>

#include <mutex>

#include "driver.h"

namespace metrale {

namespace {

CublasLtApi g_api;
CublasLtLoad g_load;
const CublasLtApi* g_loaded = nullptr;
std::mutex g_loading;  // worker threads may each create a backend

constexpr int kHeuristicCandidates = 8;

/** Resolves every entry point of an opened library; returns the names it lacks. */
std::string resolve(void* lib, CublasLtApi& api) {
  std::string missing;
#define METRALE_LT_RESOLVE(name, ret, params)                        \
  api.name = reinterpret_cast<PFN_##name>(dlsym(lib, #name));        \
  if (!api.name) missing += (missing.empty() ? "" : ", ") + std::string(#name);
  METRALE_CUBLASLT_FUNCTIONS(METRALE_LT_RESOLVE)
#undef METRALE_LT_RESOLVE
#define METRALE_LT_RESOLVE_OPTIONAL(name, ret, params) api.name = reinterpret_cast<PFN_##name>(dlsym(lib, #name));
  METRALE_CUBLASLT_OPTIONAL_FUNCTIONS(METRALE_LT_RESOLVE_OPTIONAL)
#undef METRALE_LT_RESOLVE_OPTIONAL
  return missing;
}

[[noreturn]] void throwStatus(Napi::Env env, const std::string& call, cublasStatus_t status, const std::string& context) {
  throwCallError(env, call, cublasStatusText(status) + (context.empty() ? "" : " (" + context + ")"), cublasStatusName(status));
}

void checkStatus(Napi::Env env, cublasStatus_t status, const char* call, const std::string& context = "") {
  if (status != CUBLAS_STATUS_SUCCESS) throwStatus(env, call, status, context);
}

uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001b3ULL; }

}  // namespace

const CublasLtLoad& loadCublasLt(const std::vector<std::string>& candidates) {
  std::lock_guard<std::mutex> lock(g_loading);
  if (g_loaded) return g_load;
  g_load.tried.clear();
  for (const std::string& candidate : candidates) {
    void* lib = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* why = dlerror();
      g_load.tried.emplace_back(candidate, why ? why : "dlopen failed");
      continue;
    }
    CublasLtApi api;
    const std::string missing = resolve(lib, api);
    if (!missing.empty()) {
      g_load.tried.emplace_back(candidate, "opened, but lacks " + missing);
      dlclose(lib);
      continue;
    }
    // A library newer than the driver opens fine but cannot create a handle (e.g. a CUDA 13
    // cuBLASLt on a CUDA 12 driver): try the next candidate then. Needs a current context.
    cublasLtHandle_t probe = nullptr;
    const cublasStatus_t created = api.cublasLtCreate(&probe);
    if (created != CUBLAS_STATUS_SUCCESS) {
      g_load.tried.emplace_back(candidate, "opened, but cublasLtCreate returned status " + std::to_string(created) +
                                               " (a cuBLASLt newer than the driver?)");
      dlclose(lib);
      continue;
    }
    api.cublasLtDestroy(probe);
    g_api = api;
    g_loaded = &g_api;
    g_load.ok = true;
    g_load.path = candidate;
    g_load.version = g_api.cublasLtGetVersion();
    break;
  }
  return g_load;
}

const CublasLtApi* cublasLt() { return g_loaded; }

std::string cublasStatusName(cublasStatus_t status) {
  if (g_loaded && g_api.cublasLtGetStatusName) {
    if (const char* name = g_api.cublasLtGetStatusName(status)) return name;
  }
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "cublasStatus " + std::to_string(status);
  }
}

std::string cublasStatusText(cublasStatus_t status) {
  if (g_loaded && g_api.cublasLtGetStatusString) {
    if (const char* text = g_api.cublasLtGetStatusString(status)) return text;
  }
  return "cuBLASLt status " + std::to_string(status);
}

bool GemmProblem::operator==(const GemmProblem& o) const {
  return abType == o.abType && cType == o.cType && transA == o.transA && transB == o.transB && m == o.m &&
         n == o.n && k == o.k && lda == o.lda && ldb == o.ldb && ldc == o.ldc && alignA == o.alignA &&
         alignB == o.alignB && alignC == o.alignC;
}

size_t GemmProblemHash::operator()(const GemmProblem& p) const {
  uint64_t h = 0xcbf29ce484222325ULL;
  h = mix(h, static_cast<uint64_t>(p.abType) | static_cast<uint64_t>(p.cType) << 8 |
                 static_cast<uint64_t>(p.transA) << 16 | static_cast<uint64_t>(p.transB) << 17);
  for (uint64_t v : {p.m, p.n, p.k, static_cast<uint64_t>(p.lda), static_cast<uint64_t>(p.ldb),
                     static_cast<uint64_t>(p.ldc)}) {
    h = mix(h, v);
  }
  h = mix(h, static_cast<uint64_t>(p.alignA) | static_cast<uint64_t>(p.alignB) << 16 |
                 static_cast<uint64_t>(p.alignC) << 32);
  return static_cast<size_t>(h);
}

GemmEngine::GemmEngine(Napi::Env env, void* workspace, size_t workspaceBytes)
    : workspace_(workspace), workspaceBytes_(workspaceBytes) {
  checkStatus(env, g_api.cublasLtCreate(&handle_), "cublasLtCreate");
}

GemmEngine::~GemmEngine() {
  for (auto& [problem, plan] : plans_) destroy(plan);
  if (handle_) g_api.cublasLtDestroy(handle_);
}

void GemmEngine::destroy(Plan& plan) {
  if (plan.layoutC) g_api.cublasLtMatrixLayoutDestroy(plan.layoutC);
  if (plan.layoutB) g_api.cublasLtMatrixLayoutDestroy(plan.layoutB);
  if (plan.layoutA) g_api.cublasLtMatrixLayoutDestroy(plan.layoutA);
  if (plan.desc) g_api.cublasLtMatmulDescDestroy(plan.desc);
  plan = Plan{};
}

const GemmEngine::Plan& GemmEngine::plan(Napi::Env env, const GemmProblem& p) {
  if (auto found = plans_.find(p); found != plans_.end()) return found->second;

  // Row-major C (m×n, ldc) read column-major is Cᵀ (n×m, ldc), and Cᵀ = op(B)ᵀ · op(A)ᵀ. Any
  // row-major matrix stored R×C with leading dimension ld reads column-major as its transpose,
  // C×R with the same ld. So cuBLASLt's A is our B and its B is our A, its (m, n, k) is our
  // (n, m, k), and each operand keeps its own transpose flag.
  const auto dataType = [](GemmType t) { return t == GemmType::BF16 ? CUDA_R_16BF : t == GemmType::F16 ? CUDA_R_16F : CUDA_R_32F; };
  const cudaDataType_t abType = dataType(p.abType);
  const cudaDataType_t cType = dataType(p.cType);
  const uint64_t ltARows = p.transB ? p.k : p.n, ltACols = p.transB ? p.n : p.k;  // our B as stored
  const uint64_t ltBRows = p.transA ? p.m : p.k, ltBCols = p.transA ? p.k : p.m;  // our A as stored
  const cublasOperation_t opA = p.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opB = p.transA ? CUBLAS_OP_T : CUBLAS_OP_N;

  Plan plan;
  cublasLtMatmulPreference_t preference = nullptr;
  try {
    // FP32 accumulation and FP32 alpha/beta for both input types; no TF32 for f32 inputs.
    checkStatus(env, g_api.cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    checkStatus(env, g_api.cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof(opA)),
                "cublasLtMatmulDescSetAttribute", "TRANSA");
    checkStatus(env, g_api.cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof(opB)),
                "cublasLtMatmulDescSetAttribute", "TRANSB");
    checkStatus(env, g_api.cublasLtMatrixLayoutCreate(&plan.layoutA, abType, ltARows, ltACols, p.ldb),
                "cublasLtMatrixLayoutCreate", "B");
    checkStatus(env, g_api.cublasLtMatrixLayoutCreate(&plan.layoutB, abType, ltBRows, ltBCols, p.lda),
                "cublasLtMatrixLayoutCreate", "A");
    checkStatus(env, g_api.cublasLtMatrixLayoutCreate(&plan.layoutC, cType, p.n, p.m, p.ldc),
                "cublasLtMatrixLayoutCreate", "C");

    checkStatus(env, g_api.cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
    const uint64_t maxWorkspace = workspaceBytes_;
    checkStatus(env, g_api.cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                &maxWorkspace, sizeof(maxWorkspace)),
                "cublasLtMatmulPreferenceSetAttribute", "MAX_WORKSPACE_BYTES");
    const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, p.alignB},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, p.alignA},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, p.alignC},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, p.alignC},
    };
    for (const auto& [attribute, bytes] : alignments) {
      checkStatus(env, g_api.cublasLtMatmulPreferenceSetAttribute(preference, attribute, &bytes, sizeof(bytes)),
                  "cublasLtMatmulPreferenceSetAttribute", "MIN_ALIGNMENT");
    }

    cublasLtMatmulHeuristicResult_t results[kHeuristicCandidates] = {};
    int count = 0;
    checkStatus(env, g_api.cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.layoutA, plan.layoutB, plan.layoutC,
                                                          plan.layoutC, preference, kHeuristicCandidates, results, &count),
                "cublasLtMatmulAlgoGetHeuristic");
    const cublasLtMatmulHeuristicResult_t* chosen = nullptr;
    for (int i = 0; i < count && !chosen; i++) {
      if (results[i].state == CUBLAS_STATUS_SUCCESS && results[i].workspaceSize <= workspaceBytes_) chosen = &results[i];
    }
    if (!chosen) {
      throwCallError(env, "cublasLtMatmulAlgoGetHeuristic",
                     "no algorithm for this GEMM (m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) +
                         " k=" + std::to_string(p.k) + ", " + std::to_string(count) + " candidate(s))",
                     "CUBLAS_STATUS_NOT_SUPPORTED");
    }
    plan.algo = chosen->algo;
    g_api.cublasLtMatmulPreferenceDestroy(preference);
  } catch (...) {
    if (preference) g_api.cublasLtMatmulPreferenceDestroy(preference);
    destroy(plan);
    throw;
  }
  return plans_.emplace(p, plan).first->second;
}

void GemmEngine::run(Napi::Env env, const GemmProblem& problem, const void* a, const void* b, void* c, float alpha,
                     float beta, cudaStream_t stream) {
  const Plan& p = plan(env, problem);
  checkStatus(env,
              g_api.cublasLtMatmul(handle_, p.desc, &alpha, b, p.layoutA, a, p.layoutB, &beta, c, p.layoutC, c,
                                   p.layoutC, &p.algo, workspace_, workspaceBytes_, stream),
              "cublasLtMatmul");
}

}  // namespace metrale
