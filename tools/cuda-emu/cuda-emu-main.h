// The runner of tools/cuda-emu: `<binary> MANIFEST` runs one launch of one kernel over buffers in
// files and writes the buffers back. device.mjs writes the manifest and generates the translation
// unit that includes cuda-emu.h, a kernel file, this header, then the kernel table:
//   CUDA_EMU_KERNELS(CUDA_EMU_KERNEL(symbol, ctasPerCluster), ...)
//
// Manifest, one item per line:
//   kernel <symbol>
//   grid <x> <y> <z>
//   block <x> <y> <z>
//   shared <bytes>
//   buffer <id> <bytes> <path>            (repeated)
//   param p <buffer id or -1> <offset>    (a pointer; repeated, in signature order)
//   param i <int> | param f <float bits, hex>
//
// Every CUDA thread is a fiber (ucontext) on this one OS thread; the CTAs of one cluster run
// together, clusters one after another. A fiber runs until it blocks on a barrier or returns; when
// no fiber can run and some have not returned, the launch deadlocked: the runner says where each
// CTA's threads wait and exits 4. A failed check (cuda_emu::fail, __trap) exits 3.
#pragma once
#include <ucontext.h>

#include <deque>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace cuda_emu {

Fiber* g_cur = nullptr;
dim3 g_blockDim, g_gridDim;
static ucontext_t g_sched;
static std::deque<Fiber*> g_run;
static std::function<void()> g_body;

[[noreturn]] void fail(const char* what) {
  if (g_cur) {
    std::fprintf(stderr, "cuda-emu: %s (block %u %u %u, thread %u %u %u)\n", what, g_cur->cta->idx.x, g_cur->cta->idx.y, g_cur->cta->idx.z,
                 g_cur->tid.x, g_cur->tid.y, g_cur->tid.z);
  } else {
    std::fprintf(stderr, "cuda-emu: %s\n", what);
  }
  std::exit(3);
}

static void release(std::vector<Fiber*>& waiters) {
  for (Fiber* f : waiters) g_run.push_back(f);
  waiters.clear();
}

static void block_current() { swapcontext(static_cast<ucontext_t*>(g_cur->ctx), &g_sched); }

void wait(Barrier& b) {
  if (b.count <= 0) fail("a barrier without participants");
  if (++b.arrived == b.count) {
    b.arrived = 0;
    release(b.waiters);
    return;
  }
  b.waiters.push_back(g_cur);
  block_current();
}

void arrive(PhaseBarrier& b) {
  if (g_cur->clusterToken >= 0) fail("a cluster barrier arrived at twice without a wait");
  g_cur->clusterToken = b.phase;
  if (++b.arrived == b.count) {
    b.arrived = 0;
    b.phase++;
    release(b.waiters);
  }
}

void wait_phase(PhaseBarrier& b) {
  if (g_cur->clusterToken < 0) fail("a cluster barrier waited on without an arrive");
  while (b.phase == g_cur->clusterToken) {
    b.waiters.push_back(g_cur);
    block_current();
  }
  g_cur->clusterToken = -1;
}

void syncthreads() { wait(cta().sync); }

/** A returning thread leaves its barriers: the others no longer wait for it. */
static void leave(Barrier& b) {
  b.count--;
  if (b.count > 0 && b.arrived == b.count) {
    b.arrived = 0;
    release(b.waiters);
  }
}
static void leave(PhaseBarrier& b) {
  b.count--;
  if (b.count > 0 && b.arrived == b.count) {
    b.arrived = 0;
    b.phase++;
    release(b.waiters);
  }
}

static void fiber_entry() {
  g_body();
  Fiber* f = g_cur;
  if (!f->uncommitted.empty() || !f->groups.empty()) cp_async_wait(0);  // what it copied lands before it is gone
  leave(f->cta->sync);
  leave(f->cta->warps[f->linear >> 5].bar);
  PhaseBarrier& cluster = f->cta->group->cluster;
  if (f->clusterToken == cluster.phase) cluster.arrived--;  // its arrival at a phase still open goes with it
  leave(cluster);
  f->done = true;
  swapcontext(static_cast<ucontext_t*>(f->ctx), &g_sched);
}

/** Fiber stacks: the kernels' register arrays live there (a thread of the general GDN kernel holds a column of 128 floats). */
constexpr size_t kStackBytes = 256 * 1024;

/** Runs the CTAs of one cluster (or one CTA) to completion. */
static void run_group(const std::vector<dim3>& idxs, size_t sharedBytes, const std::function<void()>& body) {
  const int threads = (int)(g_blockDim.x * g_blockDim.y * g_blockDim.z);
  Group group;
  std::vector<std::unique_ptr<Cta>> ctas;
  for (size_t r = 0; r < idxs.size(); r++) {
    auto c = std::make_unique<Cta>();
    c->idx = idxs[r];
    c->rank = (int)r;
    c->smemBytes = sharedBytes;
    c->smem.assign(sharedBytes + 64, 0xFF);  // NaN-poisoned, with a guard past the end
    c->sync.count = threads;
    c->warps.resize((threads + 31) / 32);
    for (size_t w = 0; w < c->warps.size(); w++) c->warps[w].bar.count = std::min(32, threads - 32 * (int)w);
    c->group = &group;
    group.ctas.push_back(c.get());
    ctas.push_back(std::move(c));
  }
  group.cluster.count = threads * (int)idxs.size();
  g_body = body;
  // Stacks are pooled across groups and never cleared (a kernel's locals are its own).
  static std::vector<std::unique_ptr<char[]>> stackPool;
  std::vector<std::unique_ptr<Fiber>> fibers;
  std::vector<std::unique_ptr<ucontext_t>> ctxs;
  size_t stackNext = 0;
  for (auto& c : ctas) {
    for (int t = 0; t < threads; t++) {
      auto f = std::make_unique<Fiber>();
      f->linear = t;
      f->tid.x = t % g_blockDim.x;
      f->tid.y = (t / g_blockDim.x) % g_blockDim.y;
      f->tid.z = t / (g_blockDim.x * g_blockDim.y);
      f->cta = c.get();
      auto ctx = std::make_unique<ucontext_t>();
      if (stackNext == stackPool.size()) stackPool.emplace_back(new char[kStackBytes]);
      getcontext(ctx.get());
      ctx->uc_stack.ss_sp = stackPool[stackNext++].get();
      ctx->uc_stack.ss_size = kStackBytes;
      ctx->uc_link = nullptr;
      makecontext(ctx.get(), fiber_entry, 0);
      f->ctx = ctx.get();
      g_run.push_back(f.get());
      fibers.push_back(std::move(f));
      ctxs.push_back(std::move(ctx));
    }
  }
  size_t done = 0;
  while (done < fibers.size()) {
    if (g_run.empty()) {
      std::fprintf(stderr, "cuda-emu: deadlock: %zu of %zu threads still waiting\n", fibers.size() - done, fibers.size());
      for (auto& c : ctas) {
        std::fprintf(stderr, "  block (%u %u %u): __syncthreads %d/%d waiting", c->idx.x, c->idx.y, c->idx.z, (int)c->sync.waiters.size(),
                     c->sync.count);
        for (auto& [id, b] : c->named) std::fprintf(stderr, ", bar %d %d/%d", id, (int)b.waiters.size(), b.count);
        int ww = 0;
        for (auto& w : c->warps) ww += (int)w.bar.waiters.size();
        std::fprintf(stderr, ", in warp collectives %d\n", ww);
      }
      std::fprintf(stderr, "  cluster barrier: %d waiting, %d/%d arrived\n", (int)group.cluster.waiters.size(), group.cluster.arrived,
                   group.cluster.count);
      std::exit(4);
    }
    Fiber* f = g_run.front();
    g_run.pop_front();
    g_cur = f;
    swapcontext(&g_sched, static_cast<ucontext_t*>(f->ctx));
    if (f->done) done++;
  }
  g_cur = nullptr;
}

/** A launch argument: a pointer, an int or a float's bits, converted to the kernel parameter's type. */
struct Arg {
  uint64_t v = 0;
  template <typename P>
  P as() const {
    if constexpr (std::is_pointer_v<P>) {
      return reinterpret_cast<P>(v);
    } else if constexpr (std::is_same_v<P, float>) {
      return bits_float((uint32_t)v);
    } else {
      static_assert(std::is_integral_v<P> && sizeof(P) <= 4, "kernel parameters are pointers, 32-bit integers or floats");
      return (P)(int32_t)(uint32_t)v;
    }
  }
};

struct KernelEntry {
  int cluster;  // CTAs per cluster along x where clusters are emulated
  size_t params;
  std::function<void(const std::vector<Arg>&)> call;
};

template <typename... P, size_t... I>
void invoke(void (*f)(P...), const std::vector<Arg>& a, std::index_sequence<I...>) {
  f(a[I].template as<P>()...);
}

template <typename... P>
KernelEntry entry(void (*f)(P...), int cluster) {
  return KernelEntry{cluster, sizeof...(P), [f](const std::vector<Arg>& a) { invoke(f, a, std::index_sequence_for<P...>{}); }};
}

int run_manifest(const char* path, const std::map<std::string, KernelEntry>& table) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "cuda-emu: cannot read %s\n", path);
    return 2;
  }
  std::string line, kernel;
  dim3 grid, block;
  size_t shared = 0;
  struct Buf {
    std::string path;
    std::vector<uint8_t> data;
  };
  std::map<int, Buf> bufs;
  std::vector<std::tuple<char, long long, long long>> params;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string key;
    ls >> key;
    if (key == "kernel") ls >> kernel;
    else if (key == "grid") ls >> grid.x >> grid.y >> grid.z;
    else if (key == "block") ls >> block.x >> block.y >> block.z;
    else if (key == "shared") ls >> shared;
    else if (key == "buffer") {
      int id;
      size_t bytes;
      std::string file;
      ls >> id >> bytes >> file;
      Buf b;
      b.path = file;
      b.data.resize(bytes);
      std::ifstream f(file, std::ios::binary);
      f.read(reinterpret_cast<char*>(b.data.data()), (std::streamsize)bytes);
      if ((size_t)f.gcount() != bytes) {
        std::fprintf(stderr, "cuda-emu: short read of %s\n", file.c_str());
        return 2;
      }
      bufs[id] = std::move(b);
    } else if (key == "param") {
      std::string kind;
      ls >> kind;
      if (kind == "p") {
        long long id, off;
        ls >> id >> off;
        params.emplace_back('p', id, off);
      } else if (kind == "i") {
        long long v;
        ls >> v;
        params.emplace_back('i', v, 0);
      } else {
        std::string hex;
        ls >> hex;
        params.emplace_back('f', (long long)std::stoul(hex, nullptr, 16), 0);
      }
    }
  }
  auto it = table.find(kernel);
  if (it == table.end()) {
    std::fprintf(stderr, "cuda-emu: no kernel %s in this build (its module's kernel table)\n", kernel.c_str());
    return 2;
  }
  if (it->second.params != params.size()) {
    std::fprintf(stderr, "cuda-emu: %s takes %zu parameters, the launch gives %zu\n", kernel.c_str(), it->second.params, params.size());
    return 2;
  }
  std::vector<Arg> args;
  for (auto& [kind, a, b] : params) {
    Arg x;
    if (kind == 'p') x.v = a < 0 ? 0 : reinterpret_cast<uint64_t>(bufs.at((int)a).data.data() + b);
    else x.v = (uint64_t)(uint32_t)(int64_t)a;
    args.push_back(x);
  }
  g_gridDim = grid;
  g_blockDim = block;
  const int cl = CUDA_EMU_CLUSTERS ? it->second.cluster : 1;
  if (grid.x % cl) {
    std::fprintf(stderr, "cuda-emu: grid.x %u is not a multiple of the cluster size %d\n", grid.x, cl);
    return 2;
  }
  const auto call = [&]() { it->second.call(args); };
  for (unsigned z = 0; z < grid.z; z++)
    for (unsigned y = 0; y < grid.y; y++)
      for (unsigned x0 = 0; x0 < grid.x; x0 += cl) {
        std::vector<dim3> idxs;
        for (int r = 0; r < cl; r++) idxs.push_back({x0 + r, y, z});
        run_group(idxs, shared, call);
      }
  for (auto& [id, b] : bufs) {
    std::ofstream f(b.path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(b.data.data()), (std::streamsize)b.data.size());
  }
  return 0;
}

}  // namespace cuda_emu

#define CUDA_EMU_KERNEL(symbol, cluster) {#symbol, ::cuda_emu::entry(symbol, cluster)}
#define CUDA_EMU_KERNELS(...)                                                               \
  int main(int argc, char** argv) {                                                         \
    if (argc != 2) {                                                                        \
      std::fprintf(stderr, "usage: %s MANIFEST\n", argv[0]);                                \
      return 2;                                                                             \
    }                                                                                       \
    const std::map<std::string, ::cuda_emu::KernelEntry> table{__VA_ARGS__};                \
    return ::cuda_emu::run_manifest(argv[1], table);                                        \
  }
