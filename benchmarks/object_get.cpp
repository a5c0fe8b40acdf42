// object_get — accrun_get of an object put on another host (accrun_put(3)):
// rank 0 puts one object per size, rank 1 gets each of them `-i` times and
// prints the median time and rate.  Run under accrun with the two ranks on
// two hosts (benchmarks/osu/hosts.sh does, next to one raw TCP stream
// between the same hosts, the anchor).
//   accrun -n 2 -H a:1,b:1 object_get [-i ITERS] [-m MAX_BYTES]
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
  std::fprintf(stderr, "object_get: %s: %s\n", what, accrun_last_error());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 10;
  size_t max_bytes = size_t{256} << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "-i") == 0) iters = std::max(1, std::atoi(argv[i + 1]));
    else if (std::strcmp(argv[i], "-m") == 0) max_bytes = std::strtoull(argv[i + 1], nullptr, 10);
  }
  check(accrun_init(), "accrun_init");
  if (accrun_size() != 2) {
    std::fprintf(stderr, "object_get: run with 2 ranks (accrun -n 2), one per host\n");
    return 2;
  }
  const int rank = accrun_rank();
  std::vector<size_t> sizes;
  for (size_t s = 1024; s <= max_bytes; s *= 4) sizes.push_back(s);
  std::vector<char> buf(sizes.back(), 'x');
  if (rank == 0) {
    for (size_t s : sizes) check(accrun_put(("bench/" + std::to_string(s)).c_str(), buf.data(), s), "accrun_put");
    char done[4];
    size_t len = 0;
    check(accrun_get("bench/done", done, sizeof done, &len, -1), "accrun_get (done)");
  } else {
    std::printf("# accrun_get of an object on %s from %s: median of %d\n# %12s %12s %10s\n",
                "rank 0's host", std::getenv("ACCRUN_HOST") ? std::getenv("ACCRUN_HOST") : "here", iters, "Size",
                "Time(us)", "GB/s");
    for (size_t s : sizes) {
      std::vector<double> us;
      for (int i = 0; i < iters; ++i) {
        size_t len = 0;
        auto t0 = std::chrono::steady_clock::now();
        check(accrun_get(("bench/" + std::to_string(s)).c_str(), buf.data(), buf.size(), &len, 60000), "accrun_get");
        us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(us.begin(), us.end());
      double med = us[us.size() / 2];
      std::printf("  %12zu %12.1f %10.3f\n", s, med, static_cast<double>(s) / med / 1e3);
    }
    check(accrun_put("bench/done", "1", 1), "accrun_put (done)");
  }
  check(accrun_finalize(), "accrun_finalize");
  return 0;
}
