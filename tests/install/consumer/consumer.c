/* An outside program: only <accrun/accrun.h> and libaccrun. */
#include <stdio.h>
#include <string.h>

#include <accrun/accrun.h>

int main(void) {
  if (accrun_rank() != -1) {
    fprintf(stderr, "accrun_rank() before accrun_init should be -1\n");
    return 1;
  }
  const char *s = accrun_strerror(ACCRUN_ERR_TIMEOUT);
  if (s == NULL || strlen(s) == 0) return 1;
  printf("consumer ok: %s\n", s);
  return 0;
}
