// build_plan(): the command line, a hostfile and this host's detection
// joined into a plan.  Detection reads an empty fake sysfs root, so only
// logical devices (--num-gpus) exist on "this host".
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "accrun/commands.hpp"
#include "accrun/detect.hpp"

namespace accrun::launcher {
namespace {

const std::string kFixtures = ACCRUN_FIXTURES_DIR;

class BuildPlan : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/accrun-plan-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    env_strings_ = {"ACCRUN_SYSFS_ROOT=" + kFixtures + "/sysfs/decoys", "ACCRUN_NVML_LIBRARY=",
                    "OMP_NUM_THREADS=5", "KEEP=me"};
    for (auto& s : env_strings_) envp_.push_back(s.data());
    envp_.push_back(nullptr);
  }
  void TearDown() override {
    for (const auto& f : files_) std::remove(f.c_str());
    ::rmdir(dir_.c_str());
  }
  std::string write(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    files_.push_back(path);
    return path;
  }
  // Replaces the environment the plan is built with.
  void set_env(std::initializer_list<std::string> env) {
    env_strings_ = env;
    envp_.clear();
    for (auto& e : env_strings_) envp_.push_back(e.data());
    envp_.push_back(nullptr);
  }
  // `detected`: what the hosts' own agents reported, by host name.
  Result<Plan> run(std::initializer_list<std::string> args,
                   const std::map<std::string, detect::Inventory>* detected = nullptr) {
    std::vector<std::string> words = {"accrun"};
    words.insert(words.end(), args.begin(), args.end());
    std::vector<const char*> argv;
    for (const auto& w : words) argv.push_back(w.c_str());
    auto o = parse_options(static_cast<int>(argv.size()), argv.data());
    if (!o) return o.status();
    return build_plan(*o, envp_.data(), 4242, detected);
  }

  // Detection reads the fake root `root` with the extra variables `extra`.
  void use_environment(const std::string& root, std::initializer_list<std::string> extra) {
    env_strings_ = {"ACCRUN_SYSFS_ROOT=" + kFixtures + "/sysfs/" + root, "ACCRUN_NVML_LIBRARY="};
    env_strings_.insert(env_strings_.end(), extra.begin(), extra.end());
    envp_.clear();
    for (auto& s : env_strings_) envp_.push_back(s.data());
    envp_.push_back(nullptr);
  }

  std::string dir_;
  std::vector<std::string> files_;
  std::vector<std::string> env_strings_;
  std::vector<char*> envp_;
};

// Inside a Slurm job the GPUs of the step (SLURM_STEP_GPUS) are the
// inherited mask when Slurm left no CUDA_VISIBLE_DEVICES; one it set wins.
TEST_F(BuildPlan, SlurmStepGpusAreTheInheritedMask) {
  const std::string root = "ACCRUN_SYSFS_ROOT=" + kFixtures + "/sysfs/nvidia-8xh100";
  set_env({root, "ACCRUN_NVML_LIBRARY=", "SLURM_JOB_ID=7", "SLURM_STEP_GPUS=2,5"});
  auto p = run({"--dry-run", "-n", "2", "--gpus-per-rank", "1", "true"});
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p->ranks[0].env.at("CUDA_VISIBLE_DEVICES"), "2");
  EXPECT_EQ(p->ranks[1].env.at("CUDA_VISIBLE_DEVICES"), "5");
  auto three = run({"--dry-run", "-n", "3", "--gpus-per-rank", "1", "true"});
  EXPECT_FALSE(three.is_ok()) << "a third GPU outside the step's";
  set_env({root, "ACCRUN_NVML_LIBRARY=", "SLURM_JOB_ID=7", "SLURM_STEP_GPUS=2,5", "CUDA_VISIBLE_DEVICES=6"});
  p = run({"--dry-run", "-n", "1", "--gpus-per-rank", "1", "true"});
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p->ranks[0].env.at("CUDA_VISIBLE_DEVICES"), "6");
  set_env({root, "ACCRUN_NVML_LIBRARY=", "SLURM_STEP_GPUS=2,5"});  // not inside a job: no mask
  p = run({"--dry-run", "-n", "8", "--gpus-per-rank", "1", "true"});
  EXPECT_TRUE(p.is_ok()) << p.status().message();
}

TEST_F(BuildPlan, LocalHostAloneGetsDetectedLogicalGpus) {
  auto p = run({"--dry-run", "-n", "4", "--num-gpus", "2", "--gpus-per-rank", "0.5", "-x", "KEEP", "true"});
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  ASSERT_EQ(p->ranks.size(), 4u);
  EXPECT_EQ(p->ranks[2].env.at("CUDA_VISIBLE_DEVICES"), "1");
  EXPECT_EQ(p->ranks[2].env.at("MASTER_PORT"), "4242");
  EXPECT_EQ(p->ranks[2].env.at("KEEP"), "me");
  EXPECT_EQ(p->ranks[2].env.count("OMP_NUM_THREADS"), 0u);  // the user's value stays
  EXPECT_FALSE(p->hosts[0].slots.has_value());
}

TEST_F(BuildPlan, HostfileEntryForThisHostIsDetectedOthersDeclared) {
  const std::string hosts = write("hosts", "localhost slots=2 gpus=8 pod=p0\nremote slots=2 gpus=1 pod=p1\n");
  // -n defaults to the slots (4), but localhost has the 1 GPU detection
  // found (not the 8 declared) and remote declares 1: only 2 ranks fit.
  auto p = run({"--dry-run", "--num-gpus", "1", "--gpus-per-rank", "1", "--hostfile", hosts, "true"});
  ASSERT_FALSE(p.is_ok());
  // (-n not given: the message says where the 4 came from.)
  EXPECT_NE(p.status().message().find(
                "cannot place rank 2 of 4 ranks (the hosts' slots, as -n was not given): every "
                "GPU is taken"),
            std::string::npos)
      << p.status().message();
  p = run({"--dry-run", "-n", "2", "--num-gpus", "1", "--gpus-per-rank", "1", "--hostfile", hosts, "true"});
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p->ranks[0].env.at("ACCRUN_HOST"), "localhost");
  EXPECT_EQ(p->ranks[0].env.at("ACCRUN_POD"), "p0");  // the hostfile's label on the detected host
  EXPECT_EQ(p->ranks[1].env.at("ACCRUN_HOST"), "remote");
  EXPECT_EQ(p->ranks[1].env.at("ACCRUN_POD"), "p1");
  EXPECT_EQ(p->ranks[1].env.at("MASTER_ADDR"), "localhost");
  EXPECT_EQ(p->hosts[0].origin, hosts + ":1");
}

// A rank that asks for more devices than any one host has is told so,
// with the most one host has; before, the message said every device was
// taken and the hosts held 0 such ranks.
TEST_F(BuildPlan, ARankAskingForMoreDevicesThanAnyHostHasIsToldTheMost) {
  auto p = run({"--dry-run", "--num-gpus", "2", "--gpus-per-rank", "3", "true"});
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find(
                "cannot place rank 0 of -n 1: a rank asks for GPU=3, and no host has that "
                "many: the most on one host is 2"),
            std::string::npos)
      << p.status().message();
  EXPECT_NE(p.status().message().find("ask for at most 2 per rank"), std::string::npos)
      << p.status().message();
}

// A plan larger than this host's available memory is refused with the
// figures, instead of accrun being killed for memory (-n 4194304 --dry-run
// took 16.6 GB here, 22.6 GB with --json).
TEST(PlanMemory, APlanLargerThanTheAvailableMemoryIsRefused) {
  JobSpec spec;
  spec.np = 200000;
  EXPECT_TRUE(plan_fits_in_memory(spec, 4ULL << 30).is_ok());
  EXPECT_TRUE(plan_fits_in_memory(spec, std::nullopt).is_ok()) << "unknown: not checked";
  Status s = plan_fits_in_memory(spec, 1ULL << 30);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(
      s.message(),
      "-n 200000 would take about 1.1 GiB to plan (about 6 KiB a rank), more than the 1.0 GiB "
      "this host has available; ask for fewer ranks");
  EXPECT_TRUE(available_memory().has_value()) << "/proc/meminfo's MemAvailable";
}

TEST_F(BuildPlan, ThisHostListedTwiceIsRefused) {
  const std::string hosts = write("twice", "localhost slots=2\n127.0.0.1 slots=2\n");
  auto p = run({"--dry-run", "--hostfile", hosts, "true"});
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().message(), hosts + ":2: '127.0.0.1' and 'localhost' (" + hosts +
                                      ":1) both name this host; list it once");
}

// This host's addresses: any loopback address and every interface's.
// Before, an interface's address was planned as another host: reached by
// ssh, and with localhost also listed its devices went out twice.
std::vector<std::string> interface_addresses() {
  std::vector<std::string> out;
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) != 0) return out;
  for (ifaddrs* i = all; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    char buf[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr, buf,
              sizeof buf);
    if (std::string(buf).rfind("127.", 0) != 0) out.push_back(buf);
  }
  freeifaddrs(all);
  return out;
}

TEST(NamesThisHost, AnAddressOfThisHostNamesIt) {
  EXPECT_TRUE(names_this_host("127.0.0.1", "node01"));
  EXPECT_TRUE(names_this_host("127.0.0.2", "node01"));
  EXPECT_TRUE(names_this_host("::1", "node01"));
  EXPECT_TRUE(names_this_host("node01.cluster.example", "node01"));
  EXPECT_FALSE(names_this_host("node02", "node01"));
  // Addresses are not names with a domain: 10.0.0.5 is not 10.1.2.3.
  if (!is_this_hosts_address("10.0.0.5")) {
    EXPECT_FALSE(names_this_host("10.0.0.5", "10.1.2.3"));
  }
  const auto mine = interface_addresses();
  for (const auto& a : mine) EXPECT_TRUE(names_this_host(a, "node01")) << a;
  const std::string other = "198.51.100.7";  // TEST-NET-2
  if (std::find(mine.begin(), mine.end(), other) == mine.end()) {
    EXPECT_FALSE(names_this_host(other, "node01"));
  }
}

TEST_F(BuildPlan, AnInterfaceAddressOfThisHostIsThisHost) {
  const auto mine = interface_addresses();
  if (mine.empty()) GTEST_SKIP() << "this host has no interface address beyond loopback";
  auto p = run({"--dry-run", "-H", "localhost:1," + mine[0] + ":1", "true"});
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().message(),
            "-H: '" + mine[0] + "' and 'localhost' (-H) both name this host; list it once");
  // Planned with this host's detected devices, as another host's entry
  // that declares none would not be.
  use_environment("nvidia-8xh100", {});
  p = run({"--dry-run", "-H", mine[0] + ":2", "--gpus-per-rank", "4", "true"});
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p->ranks[1].env.at("CUDA_VISIBLE_DEVICES"), "4,5,6,7");
}

// Host names ignore case: LOCALHOST and this host's name in capitals are
// this host, with its detected devices.  Before, they were planned as
// other hosts, and with this host's name also listed its GPUs went to two
// ranks each.
TEST_F(BuildPlan, ThisHostIsRecognisedInAnyCase) {
  char name[256] = {};
  ASSERT_EQ(::gethostname(name, sizeof name - 1), 0);
  std::string upper = name;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  use_environment("nvidia-8xh100", {});
  auto p = run({"--dry-run", "-H", "localhost:2," + upper + ":2", "--gpus-per-rank", "4", "true"});
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("both name this host; list it once"), std::string::npos)
      << p.status().message();
  p = run({"--dry-run", "-H", "LOCALHOST:2,127.0.0.1:2", "true"});
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("both name this host; list it once"), std::string::npos)
      << p.status().message();
  p = run({"--dry-run", "-H", "LOCALHOST:2", "--gpus-per-rank", "4", "true"});
  ASSERT_TRUE(p.is_ok()) << p.status().message();  // detected: 8 GPUs, not none declared
  EXPECT_EQ(p->ranks[1].env.at("CUDA_VISIBLE_DEVICES"), "4,5,6,7");
}

// The entry for this host may not claim GPUs detection did not find, as
// no other host's entry may claim more than its agent found.  Before, the
// claim was dropped without a word, and a later request for GPUs told the
// user to declare them.
TEST_F(BuildPlan, ThisHostsEntryMayNotClaimGpusItLacks) {
  const std::string hosts = write("claims", "localhost slots=2 gpus=4\n");
  auto p = run({"--dry-run", "-n", "1", "--hostfile", hosts, "true"});
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().message(),
            hosts +
                ":1: 'localhost' declares gpus=4 but detection found 0 (remove gpus=, or "
                "give --num-gpus for logical GPUs)");
  use_environment("nvidia-8xh100", {});
  p = run({"--dry-run", "-n", "1", "--hostfile", hosts, "true"});
  EXPECT_TRUE(p.is_ok()) << p.status().message();
}

// The same holds however the line declares them: resources= and NAME= are
// claims as gpus= is (accrun-hostfile(5) says gpus=N is resources=GPU:N),
// where before the devices vanished without a word.  instance_type='s
// table only stands in until detection and claims nothing.
TEST_F(BuildPlan, ThisHostsEntryMayNotClaimDevicesItLacksInAnySpelling) {
  const std::string gpus = write("claims-gpu", "localhost slots=2 resources=GPU:4\n");
  auto p = run({"--dry-run", "-n", "1", "--hostfile", gpus, "true"});
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().message(),
            gpus +
                ":1: 'localhost' declares GPU=4 but detection found 0 (remove it, or give "
                "--num-gpus for logical GPUs)");
  const std::string tpus = write("claims-tpu", "localhost slots=2 TPU=4\n");
  p = run({"--dry-run", "-n", "1", "--hostfile", tpus, "true"});
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().message(),
            tpus +
                ":1: 'localhost' declares TPU=4 but detection found 0 (remove it, or give "
                "--resources TPU=N for logical ones)");
  p = run({"--dry-run", "-n", "1", "--resources", "TPU=4", "--hostfile", tpus, "true"});
  EXPECT_TRUE(p.is_ok()) << p.status().message();
  const std::string instance = write("instance", "localhost slots=2 instance_type=p4d.24xlarge\n");
  p = run({"--dry-run", "-n", "1", "--hostfile", instance, "true"});
  EXPECT_TRUE(p.is_ok()) << p.status().message();
}

// --stdin names a rank that must exist also where the count comes from the
// hosts' slots (it was checked only against -n, and no rank got the input).
TEST_F(BuildPlan, StdinRankBeyondTheCountFromSlotsIsBadInput) {
  auto p = run({"--dry-run", "-H", "a:2,b:1", "--stdin", "3", "true"});
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().message(),
            "option '--stdin': rank 3 does not exist with 3 ranks (the hosts' slots, as -n was not "
            "given) (ranks are "
            "0..2)");
  p = run({"--dry-run", "-H", "a:2,b:1", "--stdin", "2", "true"});
  EXPECT_TRUE(p.is_ok()) << p.status().message();
}

TEST_F(BuildPlan, HostListAndDefaults) {
  auto p = run({"--dry-run", "-H", "a:2,b:3", "true"});
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p->ranks.size(), 5u);  // the slots
  p = run({"--dry-run", "-H", "a:4,b:4", "--npernode", "3", "true"});
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p->ranks.size(), 6u);
  EXPECT_EQ(p->ranks[3].env.at("ACCRUN_HOST"), "b");
  // A -H host without a count has one slot, as under mpirun.
  p = run({"--dry-run", "-H", "a,b", "--npernode", "3", "true"});
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("the hosts have 2 slots under --npernode 3 (a: 1, b: 1)"), std::string::npos)
      << p.status().message();
  // The advice fits the limit: --oversubscribe lifts the slots, never --npernode.
  p = run({"--dry-run", "-n", "3", "-H", "a:4", "--npernode", "2", "--oversubscribe", "true"});
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().message(),
            "cannot place rank 2 of -n 3: the hosts have 2 slots under --npernode 2 (a: 2); add hosts or raise --npernode");
}

TEST_F(BuildPlan, BadHostfilesAreInvalidArguments) {
  auto p = run({"--dry-run", "--hostfile", dir_ + "/missing", "true"});
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), Code::kInvalidArgument);
  const std::string empty = write("empty", "# nothing\n");
  p = run({"--dry-run", "--hostfile", empty, "true"});
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("lists no hosts"), std::string::npos);
}

// CUDA_VISIBLE_DEVICES=-1 is the usual way to hide every GPU: the host has
// none, a job asking for none runs, and one asking for GPUs is told the mask.
TEST_F(BuildPlan, MaskHidingEveryGpuMeansNoGpus) {
  use_environment("nvidia-8xh100", {"CUDA_VISIBLE_DEVICES=-1"});
  auto p = run({"--dry-run", "-n", "2", "true"});
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p->ranks.size(), 2u);
  EXPECT_EQ(p->ranks[0].env.count("CUDA_VISIBLE_DEVICES"), 0u) << "a rank that asked for nothing keeps the mask";
  p = run({"--dry-run", "-n", "1", "--gpus-per-rank", "1", "true"});
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), Code::kInvalidArgument);
  EXPECT_NE(p.status().message().find("no host has the devices asked for (GPU=1 per rank)"), std::string::npos)
      << p.status().message();
  EXPECT_NE(p.status().message().find("CUDA_VISIBLE_DEVICES=-1 (inherited) leaves"), std::string::npos)
      << p.status().message();
  // A partial mask that runs out is named too.
  use_environment("nvidia-8xh100", {"CUDA_VISIBLE_DEVICES=3"});
  p = run({"--dry-run", "-n", "2", "--gpus-per-rank", "1", "true"});
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("CUDA_VISIBLE_DEVICES=3 (inherited) leaves '"), std::string::npos)
      << p.status().message();
  EXPECT_NE(p.status().message().find("' 1 GPU"), std::string::npos) << p.status().message();
}

// The TPU VM's own environment labels this host: --pod-blocks needs no
// pod= in the hostfile.
TEST_F(BuildPlan, PodBlocksUseDetectedTpuSlice) {
  use_environment("tpu-v4", {"TPU_WORKER_HOSTNAMES=w0,w1", "TPU_WORKER_ID=1"});
  const std::string hosts = write("hosts", "localhost slots=4\nother slots=4 TPU=4\n");
  auto p = run({"--dry-run", "-n", "4", "--resources-per-rank", "TPU=1", "--pod-blocks", "4", "--hostfile", hosts,
                "true"});
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  ASSERT_EQ(p->ranks.size(), 4u);
  EXPECT_EQ(p->ranks[0].env.at("ACCRUN_POD"), "tpu-slice-w0");
  EXPECT_EQ(p->ranks[3].env.at("ACCRUN_HOST"), "localhost");
}

// Agents report their hosts as --detect --json does; a host whose GPUs sit
// in an NVLink fabric carries NVML's clique as its pod label.
std::map<std::string, detect::Inventory> agents_report(const std::string& json) {
  std::map<std::string, detect::Inventory> out;
  auto hosts = detect::from_json(json);
  EXPECT_TRUE(hosts.is_ok()) << hosts.status().message();
  if (!hosts) return out;
  for (auto& h : *hosts) out[h.host] = std::move(h);
  return out;
}

std::string agent_host(const std::string& name, const std::string& pod) {
  std::string gpus;
  for (int i = 0; i < 4; ++i) {
    gpus += std::string(i ? ", " : "") + "{\"resource\": \"GPU\", \"id\": " + std::to_string(i) +
            ", \"type\": \"GB200\", \"pci\": null, \"numa\": null, \"cpus\": null, \"uuid\": null, "
            "\"logical\": false}";
  }
  return "{\"host\": \"" + name + "\", \"cpus\": 8, \"numa_nodes\": 1, \"labels\": {\"pod\": " +
         (pod.empty() ? "null" : "\"" + pod + "\"") + ", \"zone\": null, \"region\": null}, \"accelerators\": [" +
         gpus + "]}";
}

// --pod-blocks groups hosts by the NVLink domain their agents detected, with
// no label in the hostfile; a host without NVML fabric falls back to the
// hostfile's pod=, and a pod= written in the hostfile wins over detection.
TEST_F(BuildPlan, PodBlocksUseDetectedNvlinkDomains) {
  const std::string clique = "00112233-4455-6677-8899-aabbccddeeff.4";
  const auto detected = agents_report("{\"hosts\": [" + agent_host("r1", clique) + ", " + agent_host("r3", "") +
                                      ", " + agent_host("r2", clique) + "]}");
  ASSERT_EQ(detected.size(), 3u);
  // r3, listed between them, is in no NVLink domain: its own group.
  const std::string hosts = write("nvl", "r1 slots=4\nr3 slots=4\nr2 slots=4\n");
  auto p = run({"--dry-run", "-n", "8", "--gpus-per-rank", "1", "--pod-blocks", "8", "--hostfile", hosts, "true"},
               &detected);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p->ranks[3].env.at("ACCRUN_HOST"), "r1");
  EXPECT_EQ(p->ranks[4].env.at("ACCRUN_HOST"), "r2") << "the block stays in r1's NVLink domain";
  EXPECT_EQ(p->ranks[7].env.at("ACCRUN_POD"), clique);
  // Without the detected domain the same request has no group of 8.
  p = run({"--dry-run", "-n", "8", "--gpus-per-rank", "1", "--pod-blocks", "8", "--hostfile", hosts, "true"});
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("fits in no pod group"), std::string::npos) << p.status().message();

  // The hostfile labels r3, whose agent found no fabric, and relabels r2.
  const std::string labelled = write("nvl-labelled", "r1 slots=4\nr3 slots=4 pod=rack-b\nr2 slots=4 pod=rack-b\n");
  p = run({"--dry-run", "-n", "8", "--gpus-per-rank", "1", "--pod-blocks", "8", "--hostfile", labelled, "true"},
          &detected);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p->ranks[0].env.at("ACCRUN_HOST"), "r3");
  EXPECT_EQ(p->ranks[4].env.at("ACCRUN_HOST"), "r2");
  EXPECT_EQ(p->ranks[4].env.at("ACCRUN_POD"), "rack-b");
}

// --num-gpus beyond an inherited mask would hand out ids the mask hides.
TEST_F(BuildPlan, LogicalCountBeyondTheMaskIsRefused) {
  use_environment("nvidia-8xh100", {"CUDA_VISIBLE_DEVICES=2,5,7"});
  auto p = run({"--dry-run", "-n", "4", "--num-gpus", "4", "--gpus-per-rank", "1", "true"});
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), Code::kInvalidArgument);
  EXPECT_NE(p.status().message().find("--num-gpus 4: CUDA_VISIBLE_DEVICES=2,5,7 leaves 3 GPUs visible"),
            std::string::npos)
      << p.status().message();
  p = run({"--dry-run", "-n", "2", "--num-gpus", "2", "--gpus-per-rank", "1", "true"});
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p->ranks[0].env.at("CUDA_VISIBLE_DEVICES"), "2");
  EXPECT_EQ(p->ranks[1].env.at("CUDA_VISIBLE_DEVICES"), "5");
}

}  // namespace
}  // namespace accrun::launcher
