// The DSA kernels on the CPU (see dsa-emu-cuda.h): `dsa-emu MANIFEST` runs one launch described
// by the manifest (written by emu-device.mjs) over buffers in files, and writes the buffers back.
//
// Manifest, one item per line:
//   kernel <symbol>
//   grid <x> <y> <z>
//   block <x> <y> <z>
//   shared <bytes>
//   buffer <id> <bytes> <path>            (repeated)
//   param p <buffer id or -1> <offset>    (pointer; repeated, in signature order)
//   param i <int> | param f <float bits, hex>
#include <ucontext.h>

#include <deque>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "../../../kernels/dsa-append.cu"
#include "../../../kernels/dsa-attn.cu"
#include "../../../kernels/dsa-index.cu"
#include "../../../kernels/dsa-topk.cu"

namespace emu {

Fiber* g_cur = nullptr;
Dim3 g_blockDim, g_gridDim;
static ucontext_t g_sched;
static std::deque<Fiber*> g_run;
static std::function<void()> g_body;
static std::vector<Fiber*> g_all;

[[noreturn]] void fail(const char* what) {
  if (g_cur) {
    std::fprintf(stderr, "dsa-emu: %s (block %u %u %u, thread %u)\n", what, g_cur->cta->idx.x, g_cur->cta->idx.y, g_cur->cta->idx.z,
                 g_cur->tid.x);
  } else {
    std::fprintf(stderr, "dsa-emu: %s\n", what);
  }
  std::exit(3);
}

void wait(Barrier& b) {
  if (b.count <= 0) fail("barrier without a count");
  b.arrived++;
  if (b.arrived == b.count) {
    b.arrived = 0;
    for (Fiber* f : b.waiters) g_run.push_back(f);
    b.waiters.clear();
    return;
  }
  b.waiters.push_back(g_cur);
  swapcontext(static_cast<ucontext_t*>(g_cur->ctx), &g_sched);
}

void syncthreads() { wait(cta().sync); }

static void fiber_entry() {
  g_body();
  g_cur->done = true;
  swapcontext(static_cast<ucontext_t*>(g_cur->ctx), &g_sched);
}

/** Runs the CTAs of one cluster (or one CTA) to completion. */
static void run_group(const std::vector<Dim3>& idxs, size_t sharedBytes, const std::function<void()>& body) {
  const int threads = (int)(g_blockDim.x * g_blockDim.y * g_blockDim.z);
  Group group;
  std::vector<std::unique_ptr<Cta>> ctas;
  for (size_t r = 0; r < idxs.size(); r++) {
    auto c = std::make_unique<Cta>();
    c->idx = idxs[r];
    c->rank = (int)r;
    c->smem.assign(sharedBytes, 0xFF);  // NaN-poisoned: reads of unwritten shared memory show
    c->sync.count = threads;
    c->warps.resize((threads + 31) / 32);
    for (auto& w : c->warps) w.bar.count = 32;
    c->group = &group;
    group.ctas.push_back(c.get());
    ctas.push_back(std::move(c));
  }
  group.cluster.count = threads * (int)idxs.size();
  g_body = body;
  // Fiber stacks are pooled across groups and never zeroed (a kernel's locals are its own).
  constexpr size_t stackBytes = 96 * 1024;
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
      if (stackNext == stackPool.size()) stackPool.emplace_back(new char[stackBytes]);
      getcontext(ctx.get());
      ctx->uc_stack.ss_sp = stackPool[stackNext++].get();
      ctx->uc_stack.ss_size = stackBytes;
      ctx->uc_link = nullptr;
      makecontext(ctx.get(), fiber_entry, 0);
      f->ctx = ctx.get();
      g_run.push_back(f.get());
      ctxs.push_back(std::move(ctx));
      fibers.push_back(std::move(f));
    }
  }
  size_t done = 0;
  while (done < fibers.size()) {
    if (g_run.empty()) {
      g_cur = nullptr;
      std::fprintf(stderr, "dsa-emu: deadlock: %zu of %zu threads blocked (a barrier some threads never reach)\n", fibers.size() - done,
                   fibers.size());
      for (auto& c : ctas) {
        std::fprintf(stderr, "  block (%u %u %u): __syncthreads %d/%d waiting", c->idx.x, c->idx.y, c->idx.z, (int)c->sync.waiters.size(),
                     c->sync.count);
        for (auto& [id, b] : c->named) std::fprintf(stderr, ", bar %d %d/%d", id, (int)b.waiters.size(), b.count);
        int ww = 0;
        for (auto& w : c->warps) ww += (int)w.bar.waiters.size();
        std::fprintf(stderr, ", in warp collectives %d\n", ww);
      }
      std::fprintf(stderr, "  cluster barrier: %d/%d waiting\n", (int)group.cluster.waiters.size(), group.cluster.count);
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

struct Arg {
  uint64_t v = 0;
  template <typename T>
  operator T*() const {
    return reinterpret_cast<T*>(v);
  }
  operator int() const { return (int)(int32_t)(uint32_t)v; }
  operator float() const {
    const uint32_t u = (uint32_t)v;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

}  // namespace emu

using emu::Arg;

struct KernelEntry {
  int cluster;  // CTAs per cluster along x where clusters are emulated
  std::function<void(const std::vector<Arg>&)> call;
};

static std::map<std::string, KernelEntry> kernels() {
  const int c8 = DSA_EMU_CLUSTER ? 8 : 1, c4 = DSA_EMU_CLUSTER ? 4 : 1;
  std::map<std::string, KernelEntry> m;
  m["dsa_mla_append"] = {1, [](const std::vector<Arg>& a) {
    dsa_mla_append(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15], a[16], a[17], a[18],
                   a[19], a[20]);
  }};
  m["dsa_index_append"] = {1, [](const std::vector<Arg>& a) {
    dsa_index_append(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15], a[16], a[17], a[18],
                     a[19], a[20]);
  }};
  m["dsa_pool_append"] = {1, [](const std::vector<Arg>& a) {
    dsa_pool_append(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15], a[16], a[17], a[18], a[19]);
  }};
  m["dsa_ring_store"] = {1, [](const std::vector<Arg>& a) {
    dsa_ring_store(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10]);
  }};
  m["dsa_q_rope"] = {1, [](const std::vector<Arg>& a) {
    dsa_q_rope(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15], a[16], a[17]);
  }};
  m["dsa_index_score"] = {1, [](const std::vector<Arg>& a) {
    dsa_index_score(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15], a[16], a[17], a[18],
                    a[19], a[20], a[21], a[22], a[23], a[24]);
  }};
  m["dsa_topk"] = {c8, [](const std::vector<Arg>& a) {
    dsa_topk(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12]);
  }};
  m["dsa_sparse_attn"] = {c4, [](const std::vector<Arg>& a) {
    dsa_sparse_attn(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15], a[16], a[17], a[18]);
  }};
  return m;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: dsa-emu MANIFEST\n");
    return 2;
  }
  std::ifstream in(argv[1]);
  std::string line, kernel;
  emu::Dim3 grid, block;
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
      std::string path;
      ls >> id >> bytes >> path;
      Buf b;
      b.path = path;
      b.data.resize(bytes + 64);
      std::ifstream f(path, std::ios::binary);
      f.read(reinterpret_cast<char*>(b.data.data()), (std::streamsize)bytes);
      if ((size_t)f.gcount() != bytes) {
        std::fprintf(stderr, "dsa-emu: short read of %s\n", path.c_str());
        return 2;
      }
      b.data.resize(bytes);
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
  auto table = kernels();
  auto it = table.find(kernel);
  if (it == table.end()) {
    std::fprintf(stderr, "dsa-emu: unknown kernel %s\n", kernel.c_str());
    return 2;
  }
  std::vector<Arg> args;
  for (auto& [kind, a, b] : params) {
    Arg x;
    if (kind == 'p') x.v = a < 0 ? 0 : reinterpret_cast<uint64_t>(bufs.at((int)a).data.data() + b);
    else x.v = (uint64_t)(uint32_t)(int64_t)a;
    args.push_back(x);
  }
  emu::g_gridDim = grid;
  emu::g_blockDim = block;
  const int cl = it->second.cluster;
  if (grid.x % cl) {
    std::fprintf(stderr, "dsa-emu: grid.x %u is not a multiple of the cluster size %d\n", grid.x, cl);
    return 2;
  }
  auto call = [&]() { it->second.call(args); };
  for (unsigned z = 0; z < grid.z; z++)
    for (unsigned y = 0; y < grid.y; y++)
      for (unsigned x0 = 0; x0 < grid.x; x0 += cl) {
        std::vector<emu::Dim3> idxs;
        for (int r = 0; r < cl; r++) idxs.push_back({x0 + r, y, z});
        emu::run_group(idxs, shared, call);
      }
  for (auto& [id, b] : bufs) {
    std::ofstream f(b.path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(b.data.data()), (std::streamsize)b.data.size());
  }
  return 0;
}
