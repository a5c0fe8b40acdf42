/* hello — prints what accrun gave this rank. */
#include <stdio.h>

#include <accrun/accrun.h>

int main(void) {
  int rc = accrun_init();
  printf("rank %d of %d (init: %s)\n", accrun_rank(), accrun_size(), accrun_strerror(rc));
  accrun_finalize();
  return 0;
}
