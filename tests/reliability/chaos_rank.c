/* chaos_rank — one rank of a reliability test under a real accrun.  Every
 * rank loops allreduce on a store group of the whole job; one rank (CHAOS_RANK)
 * misbehaves after CHAOS_AFTER iterations as CHAOS_ACTION says:
 *   kill  SIGKILLs itself in the middle of the loop;
 *   stop  SIGSTOPs itself while the others are in a collective;
 *   fill  fills the job's shared-memory directory (ACCRUN_SHM_DIR) up to
 *         ENOSPC; then every rank makes a new group and allreduces 8 MiB.
 *   none  behaves.
 * CHAOS_ITERS bounds the loop (default 100000).  A failed call prints
 * "chaos rank R: <call> failed: <error>" and exits 3; a rank that finishes
 * prints "chaos rank R: done" and exits 0. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "accrun/accrun.h"

static int g_rank = -1;

static void check(int rc, const char* call) {
  if (rc == ACCRUN_SUCCESS) return;
  printf("chaos rank %d: %s failed: %s: %s\n", g_rank, call, accrun_strerror(rc), accrun_last_error());
  fflush(stdout);
  exit(3);
}

static long env_long(const char* name, long fallback) {
  const char* v = getenv(name);
  return v != NULL && *v != '\0' ? strtol(v, NULL, 10) : fallback;
}

/* Writes a file into the job's shm directory until the file system is full. */
static void fill_shm(void) {
  const char* dir = getenv("ACCRUN_SHM_DIR");
  if (dir == NULL) dir = "/dev/shm";
  char path[4096];
  snprintf(path, sizeof path, "%s/chaos-filler.%d", dir, (int)getpid());
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    printf("chaos rank %d: cannot create %s: %s\n", g_rank, path, strerror(errno));
    exit(4);
  }
  static char block[1 << 16];
  memset(block, 0x5a, sizeof block);
  long total = 0;
  for (;;) {
    ssize_t n = write(fd, block, sizeof block);
    if (n <= 0) break;
    total += n;
  }
  close(fd);
  printf("chaos rank %d: filled %s with %ld bytes\n", g_rank, dir, total);
  fflush(stdout);
}

int main(void) {
  check(accrun_init(), "accrun_init");
  g_rank = accrun_rank();
  const int size = accrun_size();
  const char* action = getenv("CHAOS_ACTION");
  if (action == NULL) action = "none";
  const long bad_rank = env_long("CHAOS_RANK", 1);
  const long after = env_long("CHAOS_AFTER", 20);
  const long iters = env_long("CHAOS_ITERS", 100000);

  accrun_group_t g;
  check(accrun_group_init("chaos", size, g_rank, ACCRUN_BACKEND_STORE, &g), "accrun_group_init");
  float in[1024], out[1024];
  for (int i = 0; i < 1024; ++i) in[i] = (float)g_rank;
  for (long it = 0; it < iters; ++it) {
    if (it == after && strcmp(action, "none") != 0) {
      if (g_rank == bad_rank) {
        if (strcmp(action, "kill") == 0) raise(SIGKILL);
        if (strcmp(action, "stop") == 0) raise(SIGSTOP);
        if (strcmp(action, "fill") == 0) fill_shm();
      }
      if (strcmp(action, "fill") == 0) {
        check(accrun_barrier(g), "accrun_barrier");
        accrun_group_t big;
        check(accrun_group_init("chaos-big", size, g_rank, ACCRUN_BACKEND_STORE, &big), "accrun_group_init (after fill)");
        const size_t n = (size_t)2 << 20; /* 8 MiB of floats */
        float* a = calloc(n, sizeof *a);
        float* b = calloc(n, sizeof *b);
        if (a == NULL || b == NULL) exit(5);
        check(accrun_allreduce(big, a, b, n, ACCRUN_FLOAT32, ACCRUN_SUM, NULL), "accrun_allreduce (after fill)");
        free(a);
        free(b);
        check(accrun_group_destroy(big), "accrun_group_destroy");
      }
    }
    check(accrun_allreduce(g, in, out, 1024, ACCRUN_FLOAT32, ACCRUN_SUM, NULL), "accrun_allreduce");
  }
  check(accrun_group_destroy(g), "accrun_group_destroy");
  check(accrun_finalize(), "accrun_finalize");
  printf("chaos rank %d: done\n", g_rank);
  return 0;
}
