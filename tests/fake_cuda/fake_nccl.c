/* A fake NCCL (libnccl.so.2) for the NCCL backend's tests, loaded through
 * the backend's own dlopen path (LD_LIBRARY_PATH names its directory).  It
 * moves no data between processes: it checks how it is called and
 * misbehaves on demand, as a real communicator does when a peer hangs,
 * dies or fails.
 *
 *   FAKE_NCCL_MODE    complete (default): every operation finishes at once
 *                     stuck: operations queue but never finish
 *                     inprogress: operations stay "being queued"
 *                     (ncclInProgress) for ever
 *                     async / remote: operations queue, and then
 *                     ncclCommGetAsyncError reports ncclSystemError /
 *                     ncclRemoteError
 *   FAKE_NCCL_RANKS   communicator ranks the mode applies to ("0,2";
 *                     default: every rank; the others complete)
 *   FAKE_NCCL_AFTER   operations that complete before the mode starts
 *   FAKE_NCCL_DELAY_MS  how long after the failing operation an async or
 *                     remote error shows (default 0)
 *   FAKE_NCCL_LOG     a file each call is appended to, one line per call:
 *                     "fake-nccl rank R: ncclAllReduce count=4 stream=own"
 *
 * What a real NCCL does with a misuse, this one does visibly: a host
 * pointer handed to an operation, or a call on an aborted or destroyed
 * communicator (ncclGroupEnd included), prints "fake-nccl FAULT: ..." and
 * aborts the process, as the kernel's illegal access or the use after
 * free would.  Streams and their completion live in the fake CUDA
 * runtime (fake_cuda.h). */
#include <fcntl.h>
#include <nccl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fake_cuda.h"

enum Mode { kComplete, kStuck, kInProgress, kAsync, kRemote };
enum { kAlive = 0x4e43434c, kDead = 0x0dead0ff };

struct ncclComm {
  int magic;
  int rank, nranks, device;
  enum Mode mode;
  long ops, after;
  int init_pending;
  int in_progress;
  ncclResult_t async;
  struct timespec async_at;
  cudaStream_t streams[64]; /* streams its operations were queued on */
  int nstreams;
  struct ncclComm *next_dead;
};

/* Aborted and destroyed communicators are kept, never freed, so a later
 * call on one is caught; listed here so leak checkers see them reachable. */
static struct ncclComm *dead;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void say(const struct ncclComm *c, const char *fmt, ...) {
  const char *path = getenv("FAKE_NCCL_LOG");
  if (path == NULL || !*path) return;
  char line[512];
  int n = snprintf(line, sizeof line, "fake-nccl rank %d pid %d: ", c ? c->rank : -1, (int)getpid());
  va_list ap;
  va_start(ap, fmt);
  n += vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
  va_end(ap);
  if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
  line[n++] = '\n';
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd >= 0) {
    (void)!write(fd, line, (size_t)n);
    close(fd);
  }
}

static void fault(const struct ncclComm *c, const char *what, const char *call) {
  fprintf(stderr, "fake-nccl FAULT: %s in %s\n", what, call);
  say(c, "FAULT: %s in %s", what, call);
  abort();
}

static void check_alive(const struct ncclComm *c, const char *call) {
  if (c == NULL) fault(c, "a null communicator", call);
  if (c->magic == kDead) fault(c, "a call on an aborted or destroyed communicator", call);
  if (c->magic != kAlive) fault(c, "a pointer that is no communicator", call);
}

static void check_buffer(const struct ncclComm *c, const void *p, size_t bytes, const char *call) {
  if (bytes == 0 || p == NULL) return;
  if (!fake_cuda_is_device_pointer(p)) fault(c, "a host pointer handed to NCCL", call);
}

static enum Mode mode_for(int rank) {
  const char *m = getenv("FAKE_NCCL_MODE");
  const char *ranks = getenv("FAKE_NCCL_RANKS");
  if (ranks != NULL && *ranks) {
    int hit = 0;
    for (const char *p = ranks; p != NULL && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL) {
      if (atoi(p) == rank) hit = 1;
    }
    if (!hit) return kComplete;
  }
  if (m == NULL || strcmp(m, "complete") == 0) return kComplete;
  if (strcmp(m, "stuck") == 0) return kStuck;
  if (strcmp(m, "inprogress") == 0) return kInProgress;
  if (strcmp(m, "async") == 0) return kAsync;
  if (strcmp(m, "remote") == 0) return kRemote;
  fprintf(stderr, "fake-nccl: unknown FAKE_NCCL_MODE '%s'\n", m);
  abort();
}

static size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}

/* Queued operations of ncclGroupStart/End brackets: per thread, as NCCL's. */
struct Pending {
  struct ncclComm *comm;
  cudaStream_t stream;
  const char *call;
};
static __thread int group_depth;
static __thread struct Pending pending[256];
static __thread int npending;

static ncclResult_t launch(struct ncclComm *c, cudaStream_t stream, const char *call) {
  pthread_mutex_lock(&mu);
  ++c->ops;
  const int misbehave = c->mode != kComplete && c->ops > c->after;
  int known = 0;
  for (int i = 0; i < c->nstreams; ++i) known |= c->streams[i] == stream;
  if (!known && c->nstreams < 64) c->streams[c->nstreams++] = stream;
  ncclResult_t r = ncclSuccess;
  if (!misbehave) {
    fake_cuda_stream_enqueue(stream, 1);
  } else if (c->mode == kInProgress) {
    c->in_progress = 1;
    r = ncclInProgress;
  } else {
    fake_cuda_stream_enqueue(stream, 0);
    if ((c->mode == kAsync || c->mode == kRemote) && c->async == ncclSuccess) {
      c->async = c->mode == kAsync ? ncclSystemError : ncclRemoteError;
      const char *d = getenv("FAKE_NCCL_DELAY_MS");
      const long ms = d ? atol(d) : 0;
      clock_gettime(CLOCK_MONOTONIC, &c->async_at);
      c->async_at.tv_sec += ms / 1000;
      c->async_at.tv_nsec += (ms % 1000) * 1000000L;
      if (c->async_at.tv_nsec >= 1000000000L) {
        c->async_at.tv_sec += 1;
        c->async_at.tv_nsec -= 1000000000L;
      }
    }
  }
  pthread_mutex_unlock(&mu);
  (void)call;
  return r;
}

static ncclResult_t operation(struct ncclComm *c, const char *call, const void *send, void *recv, size_t count,
                              size_t send_count, size_t recv_count, ncclDataType_t t, cudaStream_t stream) {
  check_alive(c, call);
  check_buffer(c, send, send_count * type_size(t), call);
  check_buffer(c, recv, recv_count * type_size(t), call);
  if (fake_cuda_stream_device(stream) != c->device) {
    say(c, "FAULT: %s on a stream of device %d, communicator on device %d", call, fake_cuda_stream_device(stream),
        c->device);
    return ncclInvalidUsage;
  }
  say(c, "%s count=%zu stream=%s device=%d", call, count, fake_cuda_stream_is_default(stream) ? "default" : "own",
      fake_cuda_current_device());
  if (send != NULL && recv != NULL && send != recv && send_count == recv_count) {
    memmove(recv, send, send_count * type_size(t));  /* a group of one's answer */
  }
  if (group_depth > 0) {
    if (npending == 256) return ncclInvalidUsage;
    pending[npending].comm = c;
    pending[npending].stream = stream;
    pending[npending].call = call;
    ++npending;
    return ncclSuccess;
  }
  return launch(c, stream, call);
}

ncclResult_t ncclGetVersion(int *version) {
  *version = 22800;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  memset(id, 0, sizeof *id);
  snprintf(id->internal, sizeof id->internal, "fake-nccl-%d-%ld", (int)getpid(), (long)time(NULL));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *config) {
  (void)id;
  struct ncclComm *c = calloc(1, sizeof *c);
  if (c == NULL) return ncclSystemError;
  c->magic = kAlive;
  c->rank = rank;
  c->nranks = nranks;
  c->device = fake_cuda_current_device();
  c->mode = mode_for(rank);
  const char *after = getenv("FAKE_NCCL_AFTER");
  c->after = after ? atol(after) : 0;
  c->init_pending = config != NULL && config->blocking == 0;
  *comm = c;
  say(c, "init nranks=%d device=%d", nranks, c->device);
  return c->init_pending ? ncclInProgress : ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *state) {
  check_alive(c, "ncclCommGetAsyncError");
  pthread_mutex_lock(&mu);
  if (c->init_pending) {
    c->init_pending = 0;
    *state = ncclSuccess;
  } else if (c->in_progress) {
    *state = ncclInProgress;
  } else {
    *state = ncclSuccess;
    if (c->async != ncclSuccess) {
      struct timespec now;
      clock_gettime(CLOCK_MONOTONIC, &now);
      if (now.tv_sec > c->async_at.tv_sec || (now.tv_sec == c->async_at.tv_sec && now.tv_nsec >= c->async_at.tv_nsec))
        *state = c->async;
    }
  }
  pthread_mutex_unlock(&mu);
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t c) {
  check_alive(c, "ncclCommAbort");
  say(c, "abort");
  pthread_mutex_lock(&mu);
  for (int i = 0; i < c->nstreams; ++i) fake_cuda_stream_release(c->streams[i]);
  c->magic = kDead;
  c->next_dead = dead;
  dead = c;
  pthread_mutex_unlock(&mu);
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t c) {
  check_alive(c, "ncclCommFinalize");
  say(c, "finalize");
  return c->in_progress ? ncclInProgress : ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
  check_alive(c, "ncclCommDestroy");
  say(c, "destroy");
  pthread_mutex_lock(&mu);
  c->magic = kDead;
  c->next_dead = dead;
  dead = c;
  pthread_mutex_unlock(&mu);
  return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclSystemError: return "unhandled system error (fake)";
    case ncclRemoteError: return "remote process exited or there was a network error (fake)";
    case ncclInvalidArgument: return "invalid argument (fake)";
    case ncclInvalidUsage: return "invalid usage (fake)";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "fake NCCL error";
  }
}

const char *ncclGetLastError(ncclComm_t c) {
  (void)c;
  return "the fake NCCL's injected failure";
}

ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t st) {
  (void)op;
  return operation(c, "ncclAllReduce", s, r, n, n, n, t, st);
}

ncclResult_t ncclReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, int root, ncclComm_t c,
                        cudaStream_t st) {
  (void)op;
  return operation(c, "ncclReduce", s, c && c->magic == kAlive && c->rank == root ? r : NULL, n, n,
                   c && c->magic == kAlive && c->rank == root ? n : 0, t, st);
}

ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, ncclDataType_t t, int root, ncclComm_t c,
                           cudaStream_t st) {
  (void)root;
  return operation(c, "ncclBroadcast", s, r, n, n, n, t, st);
}

ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st) {
  const size_t world = c && c->magic == kAlive ? (size_t)c->nranks : 1;
  return operation(c, "ncclAllGather", s, r, n, n, n * world, t, st);
}

ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                               cudaStream_t st) {
  (void)op;
  const size_t world = c && c->magic == kAlive ? (size_t)c->nranks : 1;
  return operation(c, "ncclReduceScatter", s, r, n, n * world, n, t, st);
}

ncclResult_t ncclSend(const void *b, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t st) {
  (void)peer;
  return operation(c, "ncclSend", b, NULL, n, n, 0, t, st);
}

ncclResult_t ncclRecv(void *b, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t st) {
  (void)peer;
  return operation(c, "ncclRecv", NULL, b, n, 0, n, t, st);
}

ncclResult_t ncclGroupStart(void) {
  ++group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  if (group_depth == 0) return ncclInvalidUsage;
  if (--group_depth > 0) return ncclSuccess;
  ncclResult_t result = ncclSuccess;
  for (int i = 0; i < npending; ++i) {
    check_alive(pending[i].comm, "ncclGroupEnd");
    const ncclResult_t r = launch(pending[i].comm, pending[i].stream, pending[i].call);
    if (r != ncclSuccess) result = r;
  }
  npending = 0;
  return result;
}
