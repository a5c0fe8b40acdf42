/* An MPICH program for accrun's PMI server (test_pmi_mpich.cpp): init,
 * allreduce, MPI_Comm_split_type(SHARED) against the host's rank count,
 * the universe size, and on request MPI_Abort from one rank.
 *   mpich_program               print "rank R ok ..." when every check holds
 *   mpich_program abort R CODE  rank R aborts with CODE after the allreduce */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0, flag = 0, *universe = NULL, shared = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  long mine = rank + 1, sum = 0;
  MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (argc == 4 && rank == atoi(argv[2])) MPI_Abort(MPI_COMM_WORLD, atoi(argv[3]));
  MPI_Comm host;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host);
  MPI_Comm_size(host, &shared);
  MPI_Comm_free(&host);
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &universe, &flag);
  const char* local = getenv("ACCRUN_LOCAL_SIZE");
  int local_size = local ? atoi(local) : -1;
  int universe_size = flag ? *universe : -1;
  int ok = sum == (long)size * (size + 1) / 2 && shared == local_size && universe_size == size;
  printf("rank %d %s size=%d sum=%ld shared=%d local=%d universe=%d\n", rank, ok ? "ok" : "WRONG", size, sum,
         shared, local_size, universe_size);
  MPI_Finalize();
  return ok ? 0 : 3;
}
