// MPI_Comm_spawn under accrun (accrun(7), "Spawned processes").  The parent
// job spawns COUNT copies of this program (argv[1], default 2) with the
// mode in argv[2]; they talk over the intercommunicator, merge it and
// allreduce.  argv[3], when given, is passed on to the children untouched
// (a token tests look for in the process table).  Modes:
//   talk          every side prints what it got
//   child-fails   spawned process 1 exits with status 5 after connecting
//   missing       the parent spawns a program that does not exist
//   universe      rank 0 prints MPI_UNIVERSE_SIZE and nothing is spawned
//   multiple      MPI_Comm_spawn_multiple of two applications, COUNT each;
//                 the children also print their MPI_APPNUM
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char* env_or(const char* name) {
  const char* v = getenv(name);
  return v != NULL ? v : "-";
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int count = argc > 1 ? atoi(argv[1]) : 2;
  const char* mode = argc > 2 ? argv[2] : "talk";
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm parent, inter, merged;
  MPI_Comm_get_parent(&parent);
  if (parent == MPI_COMM_NULL && strcmp(mode, "universe") == 0) {
    int* universe = NULL;
    int flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &universe, &flag);
    if (rank == 0) printf("universe=%d\n", flag ? *universe : -1);
  } else if (parent == MPI_COMM_NULL) {
    char* child_argv[] = {argc > 1 ? argv[1] : "2", (char*)mode, argc > 3 ? argv[3] : NULL, NULL};
    const char* program = strcmp(mode, "missing") == 0 ? "accrun-no-such-program" : argv[0];
    if (strcmp(mode, "multiple") == 0) {
      char* commands[2] = {argv[0], argv[0]};
      char** argvs[2] = {child_argv, child_argv};
      int counts[2] = {count, count};
      MPI_Info infos[2] = {MPI_INFO_NULL, MPI_INFO_NULL};
      MPI_Comm_spawn_multiple(2, commands, argvs, counts, infos, 0, MPI_COMM_WORLD, &inter, MPI_ERRCODES_IGNORE);
    } else {
      MPI_Comm_spawn(program, child_argv, count, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter, MPI_ERRCODES_IGNORE);
    }
    int remote = 0, sum = 0;
    MPI_Comm_remote_size(inter, &remote);
    if (rank == 0) {
      for (int c = 0; c < remote; ++c) {
        int x = 7 * (c + 1);
        MPI_Send(&x, 1, MPI_INT, c, 0, inter);
      }
      for (int c = 0; c < remote; ++c) {
        int y = 0;
        MPI_Recv(&y, 1, MPI_INT, c, 1, inter, MPI_STATUS_IGNORE);
        sum += y;
      }
    }
    MPI_Intercomm_merge(inter, 0, &merged);
    int msize = 0, v = 100 + rank, total = 0;
    MPI_Comm_size(merged, &msize);
    MPI_Allreduce(&v, &total, 1, MPI_INT, MPI_SUM, merged);
    printf("parent rank=%d size=%d remote=%d sum=%d merged=%d total=%d\n", rank, size, remote, sum, msize, total);
    MPI_Comm_free(&merged);
    MPI_Comm_disconnect(&inter);
  } else {
    int x = 0, v = 200 + rank, total = 0;
    MPI_Recv(&x, 1, MPI_INT, 0, 0, parent, MPI_STATUS_IGNORE);
    if (strcmp(mode, "child-fails") == 0 && rank == 1) exit(5);
    x += 1;
    MPI_Send(&x, 1, MPI_INT, 0, 1, parent);
    MPI_Intercomm_merge(parent, 1, &merged);
    MPI_Allreduce(&v, &total, 1, MPI_INT, MPI_SUM, merged);
    printf("child rank=%d size=%d got=%d total=%d env=%s,%s,%s,%s job=%s host=%s\n", rank, size, x - 1, total,
           env_or("ACCRUN_RANK"), env_or("ACCRUN_SIZE"), env_or("ACCRUN_SPAWNED_BY"), env_or("ACCRUN_NAMESPACE"),
           env_or("ACCRUN_JOB_ID"), env_or("ACCRUN_HOST"));
    if (strcmp(mode, "multiple") == 0) {
      int* appnum = NULL;
      int flag = 0;
      MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &appnum, &flag);
      printf("child rank=%d appnum=%d\n", rank, flag ? *appnum : -1);
    }
    MPI_Comm_free(&merged);
    MPI_Comm_disconnect(&parent);
  }
  fflush(stdout);
  MPI_Finalize();
  return 0;
}
