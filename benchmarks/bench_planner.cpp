// The planner benchmark (docs/design.md §8): plan() of 80,000 ranks on 10,000
// hosts with 8 GPUs each in 1,250 pods of 8 hosts, and the JSON of it.
//
//   bench_planner                         time plan() and plan_to_json()
//   bench_planner --write-hostfile FILE   write the same cluster as a hostfile,
//                                         for timing the whole
//                                         `accrun --dry-run --json -n 80000
//                                          --gpus-per-rank 1 --pod-blocks 64
//                                          --hostfile FILE`
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "accrun/plan.hpp"

namespace {

constexpr int kHosts = 10'000;
constexpr int kGpus = 8;
constexpr int kHostsPerPod = 8;  // 1,250 pods
constexpr int kRanks = kHosts * kGpus;

std::string host_name(int h) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "gpu%05d", h);
  return buf;
}

// Pods interleaved in the file, so the planner has to group them.
int pod_of(int h) { return h % (kHosts / kHostsPerPod); }

int write_hostfile(const char* path) {
  std::FILE* f = std::fopen(path, "w");
  if (!f) {
    std::perror(path);
    return 1;
  }
  std::fprintf(f, "# %d hosts x %d H100, %d pods of %d hosts (interleaved)\n", kHosts, kGpus,
               kHosts / kHostsPerPod, kHostsPerPod);
  for (int h = 0; h < kHosts; ++h) {
    std::fprintf(f, "%s slots=%d gpus=%d accelerator_type=H100 pod=pod%04d zone=z%d\n", host_name(h).c_str(),
                 kGpus, kGpus, pod_of(h), pod_of(h) % 16);
  }
  return std::fclose(f) == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace accrun;
  using Clock = std::chrono::steady_clock;
  if (argc == 3 && std::strcmp(argv[1], "--write-hostfile") == 0) return write_hostfile(argv[2]);

  std::vector<launcher::HostSlots> hosts;
  hosts.reserve(kHosts);
  for (int h = 0; h < kHosts; ++h) {
    launcher::HostSlots hs;
    hs.inventory.host = host_name(h);
    hs.inventory.labels.pod = "pod" + std::to_string(pod_of(h));
    for (int g = 0; g < kGpus; ++g) {
      detect::Accelerator a;
      a.resource = "GPU";
      a.vendor = "nvidia";
      a.id = g;
      a.type = "H100";
      a.logical = true;
      hs.inventory.accelerators.push_back(a);
    }
    hs.slots = kGpus;
    hs.origin = "bench:" + std::to_string(h + 1);
    hosts.push_back(std::move(hs));
  }
  launcher::JobSpec spec;
  spec.np = kRanks;
  spec.per_rank = {{"GPU", detect::Quantity::whole(1)}};
  spec.pod_blocks = kHostsPerPod * kGpus;
  spec.master_port = 29500;

  std::vector<double> plan_s, json_s;
  std::size_t json_bytes = 0;
  for (int iter = 0; iter < 5; ++iter) {
    auto t0 = Clock::now();
    auto p = launcher::plan(spec, hosts);
    auto t1 = Clock::now();
    if (!p) {
      std::fprintf(stderr, "plan failed: %s\n", p.status().message().c_str());
      return 1;
    }
    std::string json = launcher::plan_to_json(*p);
    auto t2 = Clock::now();
    json_bytes = json.size();
    plan_s.push_back(std::chrono::duration<double>(t1 - t0).count());
    json_s.push_back(std::chrono::duration<double>(t2 - t1).count());
  }
  std::sort(plan_s.begin(), plan_s.end());
  std::sort(json_s.begin(), json_s.end());
  std::printf("hosts %d, GPUs/host %d, pods %d, ranks %d, --pod-blocks %d\n", kHosts, kGpus,
              kHosts / kHostsPerPod, kRanks, spec.pod_blocks);
  std::printf("plan():        median %.3f s  (min %.3f, max %.3f; target < 1 s)\n", plan_s[2], plan_s[0],
              plan_s[4]);
  std::printf("plan_to_json(): median %.3f s  (%.1f MB)\n", json_s[2], static_cast<double>(json_bytes) / 1e6);
  return 0;
}
