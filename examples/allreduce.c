/* allreduce — every rank adds its rank into a vector through a named group.
 *
 *   accrun -n 4 ./allreduce        (each rank prints the same sum: 0+1+2+3 = 6)
 */
#include <stdio.h>
#include <stdlib.h>

#include <accrun/accrun.h>

#define CHECK(call)                                                                  \
  do {                                                                               \
    int rc_ = (call);                                                                \
    if (rc_ != ACCRUN_SUCCESS) {                                                     \
      fprintf(stderr, "%s: %s: %s\n", #call, accrun_strerror(rc_), accrun_last_error()); \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

int main(void) {
  CHECK(accrun_init());
  int rank = accrun_rank(), size = accrun_size();

  /* Every rank of the job joins the group "everyone" with its job rank. */
  accrun_group_t g;
  CHECK(accrun_group_init("everyone", size, rank, ACCRUN_BACKEND_AUTO, &g));

  enum { N = 1024 };
  double v[N];
  for (int i = 0; i < N; ++i) v[i] = rank;
  CHECK(accrun_allreduce(g, v, v, N, ACCRUN_FLOAT64, ACCRUN_SUM, NULL)); /* in place */

  double expect = (double)size * (size - 1) / 2;
  int ok = 1;
  for (int i = 0; i < N; ++i) ok &= v[i] == expect;
  printf("rank %d of %d: sum %g %s\n", rank, size, v[0], ok ? "ok" : "WRONG");

  CHECK(accrun_group_destroy(g));
  CHECK(accrun_finalize());
  return ok ? 0 : 1;
}
