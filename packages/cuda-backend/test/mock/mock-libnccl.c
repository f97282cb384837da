/*
 * A stand-in for libnccl.so.2 that runs on the host, for the mock-driver tests (loaded through
 * METRALE_NCCL_PATH, beside mock-libcuda.c). Ranks of a group live in one process; a collective is
 * enqueued on the rank's stream through the mock driver (mockSubmitHost), so a capture records
 * it, and it completes when the last rank's runs: then every rank's receive buffer is written
 * (sums in rank order, in f32). Send and receive pair up by (from, to, n-th). MOCK_NCCL_LOG names
 * a file that gets a line per call, as the addon made it; MOCK_NCCL_ENV_LOG one with the value of
 * NCCL_NVLS_ENABLE that ncclCommInitRank saw.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
enum { OK = 0, SYSTEM_ERROR = 2, INTERNAL_ERROR = 3, INVALID_ARGUMENT = 4, INVALID_USAGE = 5 };
enum { T_F16 = 6, T_F32 = 7, T_BF16 = 9 };
enum { K_ALL_REDUCE, K_ALL_GATHER, K_REDUCE_SCATTER, K_SEND, K_RECV };

typedef struct { char internal[128]; } UniqueId;

#define MAX_RANKS 8
#define MAX_OPS 4096
typedef struct Job {
  int kind, rank, peer, type;
  const void* send;
  void* recv;
  size_t count;
  struct Group* group;
  long seq;
} Job;

typedef struct Group {
  UniqueId id;
  int nranks, joined;
  /* Collectives: the n-th collective of every rank meets in slot n % MAX_OPS. */
  Job* arrived[MAX_OPS][MAX_RANKS];
  int arrivals[MAX_OPS];
  long ran[MAX_RANKS];
  /* Point to point: the n-th send from a to b meets the n-th receive of b from a. */
  long sends[MAX_RANKS][MAX_RANKS], recvs[MAX_RANKS][MAX_RANKS];
  Job* pendingSend[MAX_RANKS][MAX_RANKS][64];
  Job* pendingRecv[MAX_RANKS][MAX_RANKS][64];
  struct Group* next;
} Group;

typedef struct Comm {
  Group* group;
  int rank;
} Comm;

static Group* g_groups = NULL;
static unsigned g_idCounter = 0;
static int g_groupDepth = 0;

static void log_line(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void log_line(const char* fmt, ...) {
  const char* path = getenv("MOCK_NCCL_LOG");
  if (!path) return;
  FILE* f = fopen(path, "a");
  if (!f) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fputc('\n', f);
  fclose(f);
}

static int (*submit_host(void))(void*, void (*)(void*), void*) {
  static int (*fn)(void*, void (*)(void*), void*) = NULL;
  if (!fn) {
    void* driver = dlopen(getenv("METRALE_LIBCUDA_PATH"), RTLD_NOW | RTLD_NOLOAD);
    if (driver) fn = (int (*)(void*, void (*)(void*), void*))dlsym(driver, "mockSubmitHost");
  }
  return fn;
}

static size_t type_bytes(int t) { return t == T_F32 ? 4 : 2; }

static float half_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) bits = sign;
    else {
      float v = (float)man / 1024.0f / 16384.0f;
      return sign ? -v : v;
    }
  } else if (exp == 31) bits = sign | 0x7f800000 | (man << 13);
  else bits = sign | ((exp + 112) << 23) | (man << 13);
  float out;
  memcpy(&out, &bits, 4);
  return out;
}
static uint16_t f32_to_half(float v) {
  uint32_t x;
  memcpy(&x, &v, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  int exp = (int)((x >> 23) & 0xff) - 127 + 15;
  uint32_t man = x & 0x7fffff;
  if (exp >= 31) return (uint16_t)(sign | 0x7c00);
  if (exp <= 0) return (uint16_t)sign;
  uint32_t h = sign | ((uint32_t)exp << 10) | (man >> 13);
  if ((man & 0x1fff) > 0x1000 || ((man & 0x1fff) == 0x1000 && (h & 1))) h++;
  return (uint16_t)h;
}
static float load(const void* p, size_t i, int t) {
  if (t == T_F32) return ((const float*)p)[i];
  const uint16_t b = ((const uint16_t*)p)[i];
  if (t == T_F16) return half_to_f32(b);
  uint32_t bits = (uint32_t)b << 16;
  float out;
  memcpy(&out, &bits, 4);
  return out;
}
static void store(void* p, size_t i, int t, float v) {
  if (t == T_F32) { ((float*)p)[i] = v; return; }
  if (t == T_F16) { ((uint16_t*)p)[i] = f32_to_half(v); return; }
  uint32_t x;
  memcpy(&x, &v, 4);
  x += 0x7fff + ((x >> 16) & 1);
  ((uint16_t*)p)[i] = (uint16_t)(x >> 16);
}

/* The last rank of a collective has arrived: every rank's receive buffer gets its result. */
static void complete(Group* g, Job** jobs) {
  const Job* j0 = jobs[0];
  const int n = g->nranks, t = j0->type;
  const size_t c = j0->count, eb = type_bytes(t);
  void* results[MAX_RANKS];
  size_t resultBytes = j0->kind == K_ALL_GATHER ? c * eb * n : c * eb;
  for (int r = 0; r < n; r++) {
    results[r] = malloc(resultBytes ? resultBytes : 1);
    for (size_t i = 0; i < (j0->kind == K_ALL_GATHER ? c * n : c); i++) {
      if (j0->kind == K_ALL_GATHER) {
        const size_t from = i / c;
        store(results[r], i, t, load(jobs[from]->send, i % c, t));
      } else {
        const size_t at = j0->kind == K_REDUCE_SCATTER ? (size_t)r * c + i : i;
        float acc = load(jobs[0]->send, at, t);
        for (int q = 1; q < n; q++) acc += load(jobs[q]->send, at, t);
        store(results[r], i, t, acc);
      }
    }
  }
  for (int r = 0; r < n; r++) {
    memcpy(jobs[r]->recv, results[r], resultBytes);
    free(results[r]);
  }
}

/*
 * The job an enqueue made stays as it is (a captured graph runs it at every replay); each run
 * works on a copy, numbered by the order the rank's stream runs its collectives, as NCCL orders
 * them. Templates are never freed: a stand-in for tests.
 */
static Job* run_copy(const Job* template) {
  Job* j = malloc(sizeof(Job));
  *j = *template;
  Group* g = j->group;
  if (j->kind == K_SEND) j->seq = g->sends[j->rank][j->peer]++;
  else if (j->kind == K_RECV) j->seq = g->recvs[j->peer][j->rank]++;
  else j->seq = g->ran[j->rank]++;
  return j;
}

static void run_collective(void* arg) {
  Job* j = run_copy(arg);
  Group* g = j->group;
  const long slot = j->seq % MAX_OPS;
  g->arrived[slot][j->rank] = j;
  if (++g->arrivals[slot] < g->nranks) return;
  Job* jobs[MAX_RANKS];
  for (int r = 0; r < g->nranks; r++) jobs[r] = g->arrived[slot][r];
  complete(g, jobs);
  for (int r = 0; r < g->nranks; r++) {
    if (jobs[r] != j) free(jobs[r]);
    g->arrived[slot][r] = NULL;
  }
  g->arrivals[slot] = 0;
  free(j);
}

static void run_p2p(void* arg) {
  Job* j = run_copy(arg);
  Group* g = j->group;
  const int from = j->kind == K_SEND ? j->rank : j->peer, to = j->kind == K_SEND ? j->peer : j->rank;
  const long slot = j->seq % 64;
  Job** mine = j->kind == K_SEND ? &g->pendingSend[from][to][slot] : &g->pendingRecv[from][to][slot];
  Job** other = j->kind == K_SEND ? &g->pendingRecv[from][to][slot] : &g->pendingSend[from][to][slot];
  if (!*other) {
    *mine = j;
    return;
  }
  Job* send = j->kind == K_SEND ? j : *other;
  Job* recv = j->kind == K_SEND ? *other : j;
  memcpy(recv->recv, send->send, send->count * type_bytes(send->type));
  free(*other);
  *other = NULL;
  free(j);
}

static int enqueue(Comm* comm, int kind, const void* send, void* recv, size_t count, int type, int peer, void* stream) {
  if (!comm) return INVALID_ARGUMENT;
  if (type != T_F32 && type != T_BF16 && type != T_F16) return INVALID_ARGUMENT;
  int (*submit)(void*, void (*)(void*), void*) = submit_host();
  if (!submit) return INTERNAL_ERROR;
  Group* g = comm->group;
  Job* j = calloc(1, sizeof(Job));
  *j = (Job){kind, comm->rank, peer, type, send, recv, count, g, 0};
  return submit(stream, kind == K_SEND || kind == K_RECV ? run_p2p : run_collective, j) == 0 ? OK : INTERNAL_ERROR;
}

EXPORT int ncclGetVersion(int* v) { *v = 21903; return OK; }
EXPORT const char* ncclGetErrorString(int r) {
  switch (r) {
    case OK: return "no error";
    case SYSTEM_ERROR: return "unhandled system error (mock)";
    case INVALID_ARGUMENT: return "invalid argument (mock)";
    case INVALID_USAGE: return "invalid usage (mock)";
    default: return "internal error (mock)";
  }
}
EXPORT int ncclGetUniqueId(UniqueId* id) {
  memset(id, 0, sizeof *id);
  snprintf(id->internal, sizeof id->internal, "mock-nccl %d %u", (int)getpid(), ++g_idCounter);
  return OK;
}
EXPORT int ncclCommInitRank(Comm** out, int nranks, UniqueId id, int rank) {
  const char* envLog = getenv("MOCK_NCCL_ENV_LOG");
  if (envLog) {
    FILE* f = fopen(envLog, "a");
    const char* nvls = getenv("NCCL_NVLS_ENABLE");
    if (f) fprintf(f, "NCCL_NVLS_ENABLE=%s\n", nvls ? nvls : "(unset)"), fclose(f);
  }
  if (getenv("MOCK_NCCL_FAIL_INIT")) return SYSTEM_ERROR;
  if (nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks) return INVALID_ARGUMENT;
  Group* g = g_groups;
  while (g && memcmp(g->id.internal, id.internal, sizeof id.internal) != 0) g = g->next;
  if (!g) {
    g = calloc(1, sizeof(Group));
    g->id = id;
    g->nranks = nranks;
    g->next = g_groups;
    g_groups = g;
  }
  if (g->nranks != nranks) return INVALID_USAGE;
  Comm* c = calloc(1, sizeof(Comm));
  c->group = g;
  c->rank = rank;
  g->joined++;
  *out = c;
  log_line("init rank=%d nranks=%d", rank, nranks);
  return OK;
}
EXPORT int ncclCommDestroy(Comm* c) {
  if (!c) return INVALID_ARGUMENT;
  log_line("destroy rank=%d", c->rank);
  free(c);
  return OK;
}
EXPORT int ncclCommAbort(Comm* c) {
  if (!c) return INVALID_ARGUMENT;
  log_line("abort rank=%d", c->rank);
  free(c);
  return OK;
}
EXPORT int ncclAllReduce(const void* s, void* r, size_t n, int t, int op, Comm* c, void* stream) {
  if (op != 0) return INVALID_ARGUMENT;
  log_line("allReduce rank=%d count=%zu type=%d op=%d", c ? c->rank : -1, n, t, op);
  return enqueue(c, K_ALL_REDUCE, s, r, n, t, -1, stream);
}
EXPORT int ncclAllGather(const void* s, void* r, size_t n, int t, Comm* c, void* stream) {
  log_line("allGather rank=%d count=%zu type=%d", c ? c->rank : -1, n, t);
  return enqueue(c, K_ALL_GATHER, s, r, n, t, -1, stream);
}
EXPORT int ncclReduceScatter(const void* s, void* r, size_t n, int t, int op, Comm* c, void* stream) {
  if (op != 0) return INVALID_ARGUMENT;
  log_line("reduceScatter rank=%d count=%zu type=%d op=%d", c ? c->rank : -1, n, t, op);
  return enqueue(c, K_REDUCE_SCATTER, s, r, n, t, -1, stream);
}
EXPORT int ncclSend(const void* s, size_t n, int t, int peer, Comm* c, void* stream) {
  if (!g_groupDepth) return INVALID_USAGE; /* metrale always pairs them in a group */
  log_line("send rank=%d peer=%d count=%zu type=%d", c ? c->rank : -1, peer, n, t);
  return enqueue(c, K_SEND, s, NULL, n, t, peer, stream);
}
EXPORT int ncclRecv(void* r, size_t n, int t, int peer, Comm* c, void* stream) {
  if (!g_groupDepth) return INVALID_USAGE;
  log_line("recv rank=%d peer=%d count=%zu type=%d", c ? c->rank : -1, peer, n, t);
  return enqueue(c, K_RECV, NULL, r, n, t, peer, stream);
}
EXPORT int ncclGroupStart(void) { g_groupDepth++; log_line("groupStart"); return OK; }
EXPORT int ncclGroupEnd(void) {
  if (!g_groupDepth) return INVALID_USAGE;
  g_groupDepth--;
  log_line("groupEnd");
  return OK;
}
