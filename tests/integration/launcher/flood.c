/* Writes argv[1] lines "rank R line I" (R from ACCRUN_RANK) to stdout as fast
 * as stdio allows; with argv[2] = "partial" the last line has no newline. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
  long n = argc > 1 ? atol(argv[1]) : 1000;
  const char* r = getenv("ACCRUN_RANK");
  int rank = r ? atoi(r) : -1;
  for (long i = 0; i < n; ++i) printf("rank %d line %ld\n", rank, i);
  if (argc > 2 && strcmp(argv[2], "partial") == 0) printf("rank %d tail", rank);
  return 0;
}
