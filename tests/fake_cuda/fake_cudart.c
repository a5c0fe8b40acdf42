/* A fake CUDA runtime (libcudart.so) for the NCCL backend's tests: the
 * calls accrun makes, with host memory standing in for device memory.
 *
 *   FAKE_CUDA_DEVICES   devices per process (default: the entries of
 *                       CUDA_VISIBLE_DEVICES, else 1; 0 means none)
 *
 * Each thread has a current device (cudaSetDevice).  Streams and events
 * belong to the device current when they were made; recording an event of
 * one device while another is current fails with
 * cudaErrorInvalidResourceHandle, as the real runtime does.  A stream
 * counts operations queued and finished (fake_cuda.h); an event records
 * the count at cudaEventRecord and is ready once the stream has finished
 * that many.  cudaMalloc returns host memory and remembers the block, so
 * cudaPointerGetAttributes tells "device" pointers from host ones. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_cuda.h"

struct CUstream_st {
  int device;
  unsigned long queued, finished;
  int stuck; /* an operation that never finishes is queued */
};
struct CUevent_st {
  int device;
  cudaStream_t stream;
  unsigned long target;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static __thread int current_device = 0;
static struct CUstream_st default_streams[64];

#define MAX_BLOCKS 4096
static struct { const char *base; size_t size; int device; } blocks[MAX_BLOCKS];

static int device_count(void) {
  const char *n = getenv("FAKE_CUDA_DEVICES");
  if (n != NULL && *n) return atoi(n);
  const char *vis = getenv("CUDA_VISIBLE_DEVICES");
  if (vis == NULL || !*vis) return 1;
  int c = 1;
  for (const char *p = vis; *p; ++p) c += *p == ',';
  return c;
}

static struct CUstream_st *stream_of(cudaStream_t s) {
  if (s == NULL || s == cudaStreamLegacy || s == cudaStreamPerThread) {
    struct CUstream_st *d = &default_streams[current_device & 63];
    d->device = current_device;
    return d;
  }
  return s;
}

int fake_cuda_current_device(void) { return current_device; }
int fake_cuda_stream_device(cudaStream_t s) { return stream_of(s)->device; }
int fake_cuda_stream_is_default(cudaStream_t s) {
  return s == NULL || s == cudaStreamLegacy || s == cudaStreamPerThread;
}

void fake_cuda_stream_enqueue(cudaStream_t s, int complete) {
  pthread_mutex_lock(&mu);
  struct CUstream_st *st = stream_of(s);
  ++st->queued;
  if (!complete) st->stuck = 1;
  if (!st->stuck) st->finished = st->queued;
  pthread_mutex_unlock(&mu);
}

void fake_cuda_stream_release(cudaStream_t s) {
  pthread_mutex_lock(&mu);
  struct CUstream_st *st = stream_of(s);
  st->stuck = 0;
  st->finished = st->queued;
  pthread_mutex_unlock(&mu);
}

int fake_cuda_is_device_pointer(const void *p) {
  int found = 0;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < MAX_BLOCKS && !found; ++i) {
    found = blocks[i].base != NULL && (const char *)p >= blocks[i].base &&
            (const char *)p < blocks[i].base + (blocks[i].size ? blocks[i].size : 1);
  }
  pthread_mutex_unlock(&mu);
  return found;
}

cudaError_t cudaGetDeviceCount(int *count) {
  *count = device_count();
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
  *device = current_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= device_count()) return cudaErrorInvalidDevice;
  current_device = device;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char *bus, int len, int device) {
  if (device < 0 || device >= device_count()) return cudaErrorInvalidDevice;
  /* The physical id behind the device: its CUDA_VISIBLE_DEVICES entry. */
  int id = 0x80 + device;
  const char *vis = getenv("CUDA_VISIBLE_DEVICES");
  if (vis != NULL && *vis) {
    const char *p = vis;
    for (int i = 0; i < device && p != NULL; ++i) {
      p = strchr(p, ',');
      if (p != NULL) ++p;
    }
    if (p != NULL) id = 0x10 + atoi(p);
  }
  snprintf(bus, (size_t)len, "0000:%02X:00.0", id & 0xff);
  return cudaSuccess;
}

const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorMemoryAllocation: return "out of memory";
    default: return "fake CUDA error";
  }
}

cudaError_t cudaGetLastError(void) { return cudaSuccess; }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
  (void)flags;
  struct CUstream_st *st = calloc(1, sizeof *st);
  if (st == NULL) return cudaErrorMemoryAllocation;
  st->device = current_device;
  *s = st;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (!fake_cuda_stream_is_default(s)) free(s);
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
  (void)flags;
  struct CUevent_st *ev = calloc(1, sizeof *ev);
  if (ev == NULL) return cudaErrorMemoryAllocation;
  ev->device = current_device;
  *e = ev;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e) {
  free(e);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  pthread_mutex_lock(&mu);
  struct CUstream_st *st = stream_of(s);
  cudaError_t rc = cudaSuccess;
  if (e->device != current_device || st->device != e->device) {
    rc = cudaErrorInvalidResourceHandle;
  } else {
    e->stream = st;
    e->target = st->queued;
  }
  pthread_mutex_unlock(&mu);
  return rc;
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
  pthread_mutex_lock(&mu);
  cudaError_t rc = e->stream == NULL || e->stream->finished >= e->target ? cudaSuccess : cudaErrorNotReady;
  pthread_mutex_unlock(&mu);
  return rc;
}

cudaError_t cudaMalloc(void **p, size_t size) {
  char *b = calloc(1, size ? size : 1);
  if (b == NULL) return cudaErrorMemoryAllocation;
  pthread_mutex_lock(&mu);
  int i = 0;
  while (i < MAX_BLOCKS && blocks[i].base != NULL) ++i;
  if (i < MAX_BLOCKS) {
    blocks[i].base = b;
    blocks[i].size = size;
    blocks[i].device = current_device;
  }
  pthread_mutex_unlock(&mu);
  if (i == MAX_BLOCKS) {
    free(b);
    return cudaErrorMemoryAllocation;
  }
  *p = b;
  return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
  if (p == NULL) return cudaSuccess;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < MAX_BLOCKS; ++i) {
    if (blocks[i].base == p) blocks[i].base = NULL;
  }
  pthread_mutex_unlock(&mu);
  free(p);
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p) {
  memset(a, 0, sizeof *a);
  a->type = cudaMemoryTypeUnregistered;
  a->device = -2;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < MAX_BLOCKS; ++i) {
    if (blocks[i].base != NULL && (const char *)p >= blocks[i].base &&
        (const char *)p < blocks[i].base + (blocks[i].size ? blocks[i].size : 1)) {
      a->type = cudaMemoryTypeDevice;
      a->device = blocks[i].device;
      a->devicePointer = (void *)p;
      break;
    }
  }
  pthread_mutex_unlock(&mu);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
  (void)kind;
  memmove(dst, src, n);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
