/* What the fake NCCL needs from the fake CUDA runtime: streams that
 * complete in order, the calling thread's device, and which pointers are
 * "device memory".  Both libraries are built by the tests only. */
#ifndef ACCRUN_FAKE_CUDA_H
#define ACCRUN_FAKE_CUDA_H

#include <cuda_runtime_api.h>

/* The calling thread's current device. */
int fake_cuda_current_device(void);
/* The device a stream belongs to; the legacy and per-thread default
 * streams (NULL, cudaStreamLegacy, cudaStreamPerThread) belong to the
 * calling thread's current device. */
int fake_cuda_stream_device(cudaStream_t s);
/* 1 when s is one of the default streams. */
int fake_cuda_stream_is_default(cudaStream_t s);
/* Queues one operation on s.  complete = 1: it finishes at once (when
 * nothing before it is stuck); complete = 0: it never finishes, and holds
 * back everything queued after it, until fake_cuda_stream_release(s). */
void fake_cuda_stream_enqueue(cudaStream_t s, int complete);
/* Finishes every operation queued on s (an aborted communicator's kernels
 * return). */
void fake_cuda_stream_release(cudaStream_t s);
/* 1 when p lies inside a block from cudaMalloc. */
int fake_cuda_is_device_pointer(const void *p);

#endif
