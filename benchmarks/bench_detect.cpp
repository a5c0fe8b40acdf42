// Detection of a 16-GPU fixture host (docs/design.md §8: < 50 ms, vendor-library
// start-up excluded).  A program, not a test:
//   bench_detect [fixtures dir] [iterations]
// Times detect_host() on tests/fixtures/sysfs/nvidia-16xh100 (the PCI scan,
// /proc/driver/nvidia and the real host's hwloc topology), the same with an
// hwloc XML topology, and the JSON output; prints the median and the worst.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "accrun/detect.hpp"

using namespace accrun::detect;

namespace {

struct Stats {
  double median_ms;
  double max_ms;
};

template <class F>
Stats time_it(int iterations, F&& f) {
  std::vector<double> ms;
  for (int i = 0; i < iterations; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.back()};
}

}  // namespace

int main(int argc, char** argv) {
  const std::string fixtures = argc > 1 ? argv[1] : ACCRUN_BENCH_FIXTURES;
  const int iterations = argc > 2 ? std::max(1, std::atoi(argv[2])) : 50;
  DetectConfig c;
  c.sysfs_root = fixtures + "/sysfs/nvidia-16xh100";
  c.hostname = "bench";
  c.nvml_library = "";  // vendor-library start-up excluded
  size_t gpus = 0;
  Stats host = time_it(iterations, [&] {
    auto inv = detect_host(c);
    if (!inv) {
      std::fprintf(stderr, "bench_detect: %s\n", inv.status().message().c_str());
      std::exit(1);
    }
    gpus = inv->accelerators.size();
  });
  DetectConfig x = c;
  x.topology_xml = fixtures + "/hwloc/nvidia-4xh100.xml";
  Stats xml = time_it(iterations, [&] { (void)detect_host(x); });
  auto inv = detect_host(c);
  std::vector<Inventory> hosts{inv.value()};
  Stats json = time_it(iterations, [&] { (void)to_json(hosts); });
  std::printf("bench_detect: %zu GPUs, %d iterations\n", gpus, iterations);
  std::printf("  detect_host, sysfs root + this host's hwloc topology: median %.2f ms, max %.2f ms\n",
              host.median_ms, host.max_ms);
  std::printf("  detect_host, sysfs root + hwloc XML topology:         median %.2f ms, max %.2f ms\n",
              xml.median_ms, xml.max_ms);
  std::printf("  to_json:                                              median %.3f ms\n", json.median_ms);
  std::printf("  target < 50 ms: %s\n", host.median_ms < 50 && xml.median_ms < 50 ? "met" : "NOT met");
  return gpus == 16 ? 0 : 1;
}
