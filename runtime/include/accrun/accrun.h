/* accrun/accrun.h — the libaccrun C API (libaccrun(3)).
 *
 * The stable surface of accrun's runtime library: the job context, named
 * collective groups, point-to-point and the object store.  This header
 * includes no dependency's header; a program needs only libaccrun to link.
 * Every call returns a status code (ACCRUN_SUCCESS or an ACCRUN_ERR_*);
 * accrun_last_error() gives this thread's detail of its last failure.
 * Names and signatures are fixed: later versions add, never rename.
 */
#ifndef ACCRUN_ACCRUN_H
#define ACCRUN_ACCRUN_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ACCRUN_VERSION_MAJOR 0
#define ACCRUN_VERSION_MINOR 1
#define ACCRUN_VERSION_PATCH 0

/* Status codes (docs/design.md §9). */
enum {
  ACCRUN_SUCCESS = 0,
  ACCRUN_ERR_INVALID_ARGUMENT = 1, /* a bad argument: null pointer, unknown dtype, rank out of range */
  ACCRUN_ERR_INVALID_USAGE = 2,    /* a call at the wrong time or in the wrong way */
  ACCRUN_ERR_NOT_SUPPORTED = 3,    /* the backend or build lacks it */
  ACCRUN_ERR_NOT_FOUND = 4,        /* no such key, resource or group */
  ACCRUN_ERR_SYSTEM = 5,           /* a system call or library failed */
  ACCRUN_ERR_REMOTE = 6,           /* a peer failed */
  ACCRUN_ERR_TIMEOUT = 7,          /* the call's timeout passed */
  ACCRUN_ERR_NO_MEMORY = 8         /* the object store is full */
};

typedef struct accrun_group_s *accrun_group_t;

typedef enum {
  ACCRUN_BACKEND_AUTO,
  ACCRUN_BACKEND_STORE,
  ACCRUN_BACKEND_MPI,
  ACCRUN_BACKEND_NCCL
} accrun_backend_t;

typedef enum {
  ACCRUN_INT8,
  ACCRUN_UINT8,
  ACCRUN_INT32,
  ACCRUN_INT64,
  ACCRUN_FLOAT16,
  ACCRUN_BFLOAT16,
  ACCRUN_FLOAT32,
  ACCRUN_FLOAT64
} accrun_dtype_t;

typedef enum { ACCRUN_SUM, ACCRUN_PROD, ACCRUN_MIN, ACCRUN_MAX } accrun_op_t;

/* ---- Job context (accrun_init(3)) ---- */
int accrun_init(void);
int accrun_finalize(void);
int accrun_rank(void);
int accrun_size(void);
int accrun_local_rank(void);
int accrun_local_size(void);
int accrun_accelerator_ids(const char *resource, int *ids, int max_ids, int *count);
const char *accrun_accelerator_type(const char *resource);
const char *accrun_pod(const char *level);

/* ---- MPI initialised by libaccrun (accrun_init_mpi(3); added by the MPI backend) ----
 * Initialises MPI for the program, asking for MPI_THREAD_MULTIPLE, so that
 * ACCRUN_BACKEND_MPI groups (and AUTO's MPI choice) work without the program
 * calling MPI itself; accrun_finalize() then calls MPI_Finalize.  If MPI is
 * already initialised (the program called MPI_Init), does nothing and accrun
 * leaves MPI alone at finalize.  argc/argv may be NULL.  Call it from one
 * thread, before creating MPI groups; it may come before or after
 * accrun_init().  Blocks as MPI_Init does.  Errors: ACCRUN_ERR_NOT_SUPPORTED
 * in a build without MPI; ACCRUN_ERR_INVALID_USAGE after MPI was finalised;
 * ACCRUN_ERR_SYSTEM when MPI_Init_thread fails. */
int accrun_init_mpi(int *argc, char ***argv);

/* ---- Named groups (accrun_group_init(3)) ---- */
int accrun_group_init(const char *name, int world_size, int rank, accrun_backend_t backend,
                      accrun_group_t *group);
int accrun_group_rank(accrun_group_t g);
int accrun_group_size(accrun_group_t g);
int accrun_group_set_timeout(accrun_group_t g, int timeout_ms);
int accrun_group_destroy(accrun_group_t g);

/* ---- Collectives (accrun_allreduce(3)) ---- */
int accrun_allreduce(accrun_group_t g, const void *send, void *recv, size_t count,
                     accrun_dtype_t dt, accrun_op_t op, void *stream);
int accrun_reduce(accrun_group_t g, const void *send, void *recv, size_t count,
                  accrun_dtype_t dt, accrun_op_t op, int root, void *stream);
int accrun_broadcast(accrun_group_t g, void *buf, size_t count, accrun_dtype_t dt, int root,
                     void *stream);
int accrun_allgather(accrun_group_t g, const void *send, void *recv, size_t count_per_rank,
                     accrun_dtype_t dt, void *stream);
int accrun_reducescatter(accrun_group_t g, const void *send, void *recv, size_t recv_count,
                         accrun_dtype_t dt, accrun_op_t op, void *stream);
int accrun_barrier(accrun_group_t g);

/* ---- Point-to-point (accrun_send(3)) ---- */
int accrun_send(accrun_group_t g, const void *buf, size_t count, accrun_dtype_t dt, int peer,
                void *stream);
int accrun_recv(accrun_group_t g, void *buf, size_t count, accrun_dtype_t dt, int peer,
                void *stream);
int accrun_group_start(accrun_group_t g);
int accrun_group_end(accrun_group_t g);

/* ---- Object store (accrun_put(3)) ---- */
int accrun_put(const char *key, const void *buf, size_t len);
int accrun_get(const char *key, void *buf, size_t max_len, size_t *len, int timeout_ms);
int accrun_delete(const char *key);

/* ---- Errors (accrun_strerror(3)) ---- */
const char *accrun_strerror(int err);
const char *accrun_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* ACCRUN_ACCRUN_H */
