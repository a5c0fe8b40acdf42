// group_init — how long accrun_group_init takes for a store group of every
// rank of the job, once the ranks are all running: a first group absorbs
// the launch's skew, a barrier lines the ranks up, then a second group is
// created and timed on every rank; rank 0 prints the slowest rank's time
// and the median, and one allreduce on the new group proves it works.
//   accrun -n 64 -H h1:8,...,h8:8 group_init [-r ROUNDS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "accrun/accrun.h"

namespace {

void check(int rc, const char* what) {
  if (rc == ACCRUN_SUCCESS) return;
  std::fprintf(stderr, "group_init: %s: %s\n", what, accrun_last_error());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 3;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::strcmp(argv[i], "-r") == 0) rounds = std::max(1, std::atoi(argv[i + 1]));
  check(accrun_init(), "accrun_init");
  const int rank = accrun_rank(), size = accrun_size();
  accrun_group_t sync;
  check(accrun_group_init("init-bench-sync", size, rank, ACCRUN_BACKEND_STORE, &sync), "accrun_group_init (sync)");
  for (int round = 0; round < rounds; ++round) {
    check(accrun_barrier(sync), "accrun_barrier");
    auto t0 = std::chrono::steady_clock::now();
    accrun_group_t g;
    check(accrun_group_init(("init-bench-" + std::to_string(round)).c_str(), size, rank, ACCRUN_BACKEND_STORE, &g),
          "accrun_group_init");
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::vector<double> all(static_cast<size_t>(size));
    check(accrun_allgather(sync, &ms, all.data(), 1, ACCRUN_FLOAT64, nullptr), "accrun_allgather");
    float one = 1, sum = 0;
    check(accrun_allreduce(g, &one, &sum, 1, ACCRUN_FLOAT32, ACCRUN_SUM, nullptr), "accrun_allreduce");
    if (sum != static_cast<float>(size)) {
      std::fprintf(stderr, "group_init: allreduce gave %g, not %d\n", sum, size);
      return 1;
    }
    if (rank == 0) {
      std::sort(all.begin(), all.end());
      std::printf("group_init: %d ranks, round %d: slowest rank %.1f ms, median %.1f ms\n", size, round,
                  all.back(), all[all.size() / 2]);
    }
    check(accrun_group_destroy(g), "accrun_group_destroy");
  }
  check(accrun_group_destroy(sync), "accrun_group_destroy (sync)");
  check(accrun_finalize(), "accrun_finalize");
  return 0;
}
