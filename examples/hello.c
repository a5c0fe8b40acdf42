/* hello — what accrun gave this rank: its rank, host, accelerators and CPUs.
 *
 *   accrun -n 4 --num-gpus 4 --gpus-per-rank 1 ./hello
 *   ./hello                      (a lone process: rank 0 of 1)
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <accrun/accrun.h>

/* Writes the CPUs this process may run on as a list such as "0-3,8". */
static void cpu_list(char *out, size_t cap) {
  cpu_set_t set;
  size_t len = 0;
  out[0] = '\0';
  if (sched_getaffinity(0, sizeof set, &set) != 0) {
    snprintf(out, cap, "?");
    return;
  }
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &set)) continue;
    int end = c;
    while (end + 1 < CPU_SETSIZE && CPU_ISSET(end + 1, &set)) ++end;
    int n = end > c ? snprintf(out + len, cap - len, "%s%d-%d", len ? "," : "", c, end)
                    : snprintf(out + len, cap - len, "%s%d", len ? "," : "", c);
    if (n < 0 || (size_t)n >= cap - len) break;
    len += (size_t)n;
    c = end;
  }
}

int main(void) {
  int rc = accrun_init();
  if (rc != ACCRUN_SUCCESS) {
    fprintf(stderr, "hello: accrun_init: %s: %s\n", accrun_strerror(rc), accrun_last_error());
    return 1;
  }
  char host[256] = "?";
  gethostname(host, sizeof host - 1);

  int ids[64], count = 0;
  char gpus[512] = "none";
  if (accrun_accelerator_ids("GPU", ids, 64, &count) == ACCRUN_SUCCESS && count > 0) {
    size_t len = 0;
    for (int i = 0; i < count && i < 64; ++i)
      len += (size_t)snprintf(gpus + len, sizeof gpus - len, "%s%d", i ? "," : "", ids[i]);
  }
  const char *type = accrun_accelerator_type("GPU");
  char cpus[1024];
  cpu_list(cpus, sizeof cpus);

  printf("rank %d of %d on %s (local %d of %d): GPUs %s%s%s%s, CPUs %s\n", accrun_rank(), accrun_size(),
         host, accrun_local_rank(), accrun_local_size(), gpus, type ? " (" : "", type ? type : "",
         type ? ")" : "", cpus);
  return accrun_finalize() == ACCRUN_SUCCESS ? 0 : 1;
}
