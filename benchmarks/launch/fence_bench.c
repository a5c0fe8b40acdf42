/* Time of a PMIx fence across the job (the launch benchmarks' scale
 * section): after one warm-up fence, ROUNDS fences without data and ROUNDS
 * with PMIX_COLLECT_DATA (each rank put 64 bytes); rank 0 prints the median
 * microseconds of each.
 *   fence_bench [ROUNDS]   (default 20) */
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static double median_fence(int rounds, int collect) {
  pmix_info_t info;
  bool yes = true;
  PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &yes, PMIX_BOOL);
  double* t = calloc((size_t)rounds, sizeof *t);
  for (int i = 0; i < rounds; ++i) {
    double t0 = now_us();
    pmix_status_t rc = PMIx_Fence(NULL, 0, collect ? &info : NULL, collect ? 1 : 0);
    if (rc != PMIX_SUCCESS) {
      fprintf(stderr, "fence_bench: fence: %s\n", PMIx_Error_string(rc));
      exit(1);
    }
    t[i] = now_us() - t0;
  }
  qsort(t, (size_t)rounds, sizeof *t, cmp);
  double m = t[rounds / 2];
  free(t);
  return m;
}

int main(int argc, char** argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 20;
  if (rounds < 1) rounds = 1;
  pmix_proc_t me;
  if (PMIx_Init(&me, NULL, 0) != PMIX_SUCCESS) return 1;
  char blob[64];
  memset(blob, 'x', sizeof blob - 1);
  blob[sizeof blob - 1] = '\0';
  pmix_value_t v;
  PMIX_VALUE_CONSTRUCT(&v);
  v.type = PMIX_STRING;
  v.data.string = blob;
  PMIx_Put(PMIX_GLOBAL, "accrun.bench.blob", &v);
  PMIx_Commit();
  PMIx_Fence(NULL, 0, NULL, 0); /* warm-up: every rank is up */
  double bare = median_fence(rounds, 0);
  double data = median_fence(rounds, 1);
  if (me.rank == 0) printf("fence_us %.0f collect_us %.0f\n", bare, data);
  PMIx_Finalize(NULL, 0);
  return 0;
}
