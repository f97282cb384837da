// Dev-only: the device primitives of kernels/gdn-chunk.cu in the thread emulator (cuda_emu2.h).
#pragma once
namespace emu_prims {
constexpr uint32_t OFF_MASK = 0xffffffu;
inline unsigned char* smem_base() { return emu::cta().smem.data(); }
inline uint32_t saddr(const void* p) {
  const unsigned char* b = emu::cta().smem.data();
  const long off = (const unsigned char*)p - b;
  if (off < 0 || off >= (long)emu::cta().smem.size()) { fprintf(stderr, "emu: saddr outside shared memory\n"); std::abort(); }
  return (uint32_t)off;
}
inline unsigned char* sptr(uint32_t a, size_t bytes) {
  const uint32_t r = a >> 24;
  emu::Cta& c = r ? emu::cur->ctas[r - 1] : emu::cta();
  const uint32_t off = a & OFF_MASK;
  if (off + bytes > c.smem.size() - 64) { fprintf(stderr, "emu: shared access out of range (%u + %zu > %zu)\n", off, bytes, c.smem.size() - 64); std::abort(); }
  return c.smem.data() + off;
}
inline void ldsm(uint32_t (&r)[4], uint32_t addr, bool trans) {
  uint32_t* x = emu::xbuf();
  const int l = emu::tid & 31;
  x[l * 32] = addr;
  emu::wsync();
  uint32_t res[4];
  for (int i = 0; i < 4; ++i) {
    uint16_t e[2];
    for (int q = 0; q < 2; ++q) {
      int row, col;
      if (!trans) { row = l >> 2; col = 2 * (l & 3) + q; }
      else { row = 2 * (l & 3) + q; col = l >> 2; }
      const uint32_t ra = x[(i * 8 + row) * 32];
      if (ra & 15u) { fprintf(stderr, "emu: ldmatrix row address not 16-byte aligned\n"); std::abort(); }
      memcpy(&e[q], sptr(ra + 2 * col, 2), 2);
    }
    res[i] = (uint32_t)e[0] | ((uint32_t)e[1] << 16);
  }
  emu::wsync();
  for (int i = 0; i < 4; ++i) r[i] = res[i];
}
inline float bf(uint32_t w, int hi) { return __uint_as_float(hi ? (w & 0xffff0000u) : (w << 16)); }
inline void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  uint32_t* x = emu::xbuf();
  const int l = emu::tid & 31;
  for (int i = 0; i < 4; ++i) x[l * 32 + i] = a[i];
  x[l * 32 + 4] = b0;
  x[l * 32 + 5] = b1;
  emu::wsync();
  float A[16][16], B[16][8];
  for (int ln = 0; ln < 32; ++ln) {
    const int g = ln >> 2, t = ln & 3;
    const uint32_t* v = x + ln * 32;
    for (int q = 0; q < 2; ++q) {
      A[g][2 * t + q] = bf(v[0], q);
      A[g + 8][2 * t + q] = bf(v[1], q);
      A[g][2 * t + 8 + q] = bf(v[2], q);
      A[g + 8][2 * t + 8 + q] = bf(v[3], q);
      B[2 * t + q][g] = bf(v[4], q);
      B[2 * t + 8 + q][g] = bf(v[5], q);
    }
  }
  emu::wsync();
  const int g = l >> 2, t = l & 3;
  for (int e = 0; e < 4; ++e) {
    const int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
    float acc = d[e];
    for (int k = 0; k < 16; ++k) acc += A[row][k] * B[k][col];
    d[e] = acc;
  }
}
// cp.async: a copy lands only when a cp.async.wait_group covers its commit group (as late as the
// hardware may land it), so a read of shared memory before the right wait sees stale data.
struct PendingCopy { uint32_t dst; const void* src; int bytes; };
inline thread_local std::vector<PendingCopy> uncommitted;
inline thread_local std::vector<std::vector<PendingCopy>> groups;
inline void cp16(uint32_t dst, const void* src, int srcBytes) {
  sptr(dst, 16);
  if (dst & 15u) { fprintf(stderr, "emu: cp.async destination not 16-byte aligned\n"); std::abort(); }
  if (((uintptr_t)src & 15u) && srcBytes) { fprintf(stderr, "emu: cp.async source not 16-byte aligned\n"); std::abort(); }
  uncommitted.push_back({dst, src, srcBytes});
}
inline void cp_commit() {
  groups.push_back(std::move(uncommitted));
  uncommitted.clear();
}
inline void cp_wait(int n) {
  while ((int)groups.size() > n) {
    for (const PendingCopy& c : groups.front()) {
      unsigned char* d = sptr(c.dst, 16);
      memset(d, 0, 16);
      if (c.bytes) memcpy(d, c.src, c.bytes);
    }
    groups.erase(groups.begin());
  }
}
inline unsigned cluster_rank() { return (unsigned)emu::rank; }
inline void cluster_arrive() {
  if (emu::ctoken) { fprintf(stderr, "emu: cluster arrive twice\n"); std::abort(); }
  emu::ctoken.emplace(emu::cur->bar->arrive());
}
inline void cluster_wait() {
  if (!emu::ctoken) { fprintf(stderr, "emu: cluster wait without arrive\n"); std::abort(); }
  emu::cur->bar->wait(std::move(*emu::ctoken));
  emu::ctoken.reset();
}
inline void st_cluster(uint32_t addr, unsigned rank, float v) {
  if ((int)rank >= (int)emu::cur->ctas.size()) { fprintf(stderr, "emu: bad cluster rank\n"); std::abort(); }
  memcpy(sptr(addr | ((rank + 1) << 24), 4), &v, 4);
}
}  // namespace emu_prims
