/* An unmodified Open MPI program for the launcher tests: prints its rank,
 * size and the size of its shared-memory communicator, checks an
 * allreduce, and exits or aborts on request (argv[1]: "abort=R:CODE"). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = -1, size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm shared;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared);
  int shared_size = -1;
  MPI_Comm_size(shared, &shared_size);
  long mine = rank + 1, sum = 0;
  MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  printf("rank=%d size=%d shared=%d sum=%ld expect=%ld\n", rank, size, shared_size, sum,
         (long)size * (size + 1) / 2);
  fflush(stdout);
  if (argc > 1 && strncmp(argv[1], "abort=", 6) == 0) {
    int who = 0, code = 0;
    if (sscanf(argv[1] + 6, "%d:%d", &who, &code) == 2 && who == rank) MPI_Abort(MPI_COMM_WORLD, code);
    MPI_Barrier(MPI_COMM_WORLD); /* the others wait here until they are told */
  }
  MPI_Comm_free(&shared);
  MPI_Finalize();
  return 0;
}
