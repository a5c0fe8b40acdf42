// The planner benchmark (docs/design.md §8): plan() of 80,000 ranks on 10,000
// hosts with 8 GPUs each in 1,250 pods of 8 hosts, and the JSON of it.
//
//   bench_planner                         time plan() and plan_to_json()
//   bench_planner --write-hostfile FILE   write the same cluster as a hostfile
//   bench_planner --dry-run ACCRUN        time the whole
//                                         `ACCRUN --dry-run --json -n 80000
//                                          --gpus-per-rank 1 --pod-blocks 64
//                                          --hostfile FILE` end to end (the
//                                         hostfile written to a temporary
//                                         directory, the JSON to /dev/null;
//                                         target < 2 s)
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
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

// Runs `accrun --dry-run --json` of the cluster 5 times and prints the
// median wall time.  Detection of this host is switched off
// (ACCRUN_NVML_LIBRARY=) so the figure is the planner's, not NVML's start-up.
int time_dry_run(const char* accrun) {
  char dir[] = "/tmp/accrun-bench-planner-XXXXXX";
  if (::mkdtemp(dir) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string hostfile = std::string(dir) + "/hosts";
  if (write_hostfile(hostfile.c_str()) != 0) return 1;
  const std::string np = std::to_string(kRanks);
  const std::string blocks = std::to_string(kHostsPerPod * kGpus);
  std::vector<std::string> args = {accrun,   "--dry-run", "--json", "-n", np, "--gpus-per-rank", "1", "--pod-blocks",
                                   blocks,   "--hostfile", hostfile, "true"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "ACCRUN_NVML_LIBRARY=", 20) != 0) env_strings.emplace_back(*e);
  }
  env_strings.emplace_back("ACCRUN_NVML_LIBRARY=");
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  std::vector<double> seconds;
  int rc = 0;
  for (int iter = 0; iter < 5 && rc == 0; ++iter) {
    const auto t0 = std::chrono::steady_clock::now();
    pid_t pid = 0;
    if (posix_spawn(&pid, accrun, &actions, nullptr, argv.data(), envp.data()) != 0) {
      std::perror(accrun);
      rc = 1;
      break;
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "%s --dry-run failed (status %d)\n", accrun, status);
      rc = 1;
    }
  }
  posix_spawn_file_actions_destroy(&actions);
  std::remove(hostfile.c_str());
  ::rmdir(dir);
  if (rc != 0) return rc;
  std::sort(seconds.begin(), seconds.end());
  std::printf("accrun --dry-run --json -n %d --gpus-per-rank 1 --pod-blocks %s, %d hosts:\n", kRanks,
              blocks.c_str(), kHosts);
  std::printf("end to end:    median %.3f s  (min %.3f, max %.3f; target < 2 s)\n", seconds[2], seconds[0],
              seconds[4]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace accrun;
  using Clock = std::chrono::steady_clock;
  if (argc == 3 && std::strcmp(argv[1], "--write-hostfile") == 0) return write_hostfile(argv[2]);
  if (argc == 3 && std::strcmp(argv[1], "--dry-run") == 0) return time_dry_run(argv[2]);

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
