/* auto_backend [mpi|nccl] — a group created with ACCRUN_BACKEND_AUTO over
 * every rank, after accrun_init_mpi() when "mpi" is given; with "nccl" the
 * group asks for ACCRUN_BACKEND_NCCL instead (tests of its refusals).  Sums
 * the ranks in host buffers and prints "auto_backend: PASS" when every
 * element is right; the backend AUTO chose is in accrun's ACCRUN_LOG=debug
 * line. */
#include <stdio.h>
#include <string.h>

#include <accrun/accrun.h>

static int check(int rc, const char *what) {
  if (rc != ACCRUN_SUCCESS) fprintf(stderr, "auto_backend: %s: %s: %s\n", what, accrun_strerror(rc), accrun_last_error());
  return rc;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "mpi") == 0 && check(accrun_init_mpi(&argc, &argv), "accrun_init_mpi")) return 1;
  if (check(accrun_init(), "accrun_init")) return 1;
  const int rank = accrun_rank(), size = accrun_size();
  accrun_group_t g;
  const int nccl = argc > 1 && strcmp(argv[1], "nccl") == 0;
  if (check(accrun_group_init("auto", size, rank, nccl ? ACCRUN_BACKEND_NCCL : ACCRUN_BACKEND_AUTO, &g),
            "accrun_group_init"))
    return 1;
  long long v[64];
  for (int i = 0; i < 64; ++i) v[i] = rank + i;
  if (check(accrun_allreduce(g, v, v, 64, ACCRUN_INT64, ACCRUN_SUM, NULL), "accrun_allreduce")) return 1;
  int ok = 1;
  for (int i = 0; i < 64; ++i) ok &= v[i] == (long long)size * (size - 1) / 2 + (long long)size * i;
  if (check(accrun_group_destroy(g), "accrun_group_destroy") || check(accrun_finalize(), "accrun_finalize")) return 1;
  printf("auto_backend: %s\n", ok ? "PASS" : "FAIL (wrong sum)");
  return ok ? 0 : 1;
}
