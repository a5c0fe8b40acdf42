// Hostfiles, host lists and Slurm-style ranges (accrun-hostfile(5)).
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>

#include "accrun/detect.hpp"
#include "accrun/hostfile.hpp"

namespace accrun::hostfiles {
namespace {

const std::string kDir = std::string(ACCRUN_FIXTURES_DIR) + "/hostfiles/";

std::vector<std::string> names(const std::vector<HostEntry>& v) {
  std::vector<std::string> out;
  for (const auto& e : v) out.push_back(e.name);
  return out;
}

std::vector<std::string> expand(const char* expr) {
  auto r = expand_hostnames(expr);
  EXPECT_TRUE(r.is_ok()) << expr << ": " << r.status().message();
  return r.is_ok() ? *r : std::vector<std::string>{};
}

std::string error_of(std::string_view text) {
  auto r = parse_hostfile(text, "hosts");
  EXPECT_FALSE(r.is_ok()) << text;
  return r.is_ok() ? "" : r.status().message();
}

TEST(HostRanges, ExpandsListsAndKeepsZeroPadding) {
  EXPECT_EQ(expand("node[01-04,07]"),
            (std::vector<std::string>{"node01", "node02", "node03", "node04", "node07"}));
  EXPECT_EQ(expand("n[8-11]"), (std::vector<std::string>{"n8", "n9", "n10", "n11"}));
  EXPECT_EQ(expand("n[098-101]"), (std::vector<std::string>{"n098", "n099", "n100", "n101"}));
  EXPECT_EQ(expand("plain.example.com"), (std::vector<std::string>{"plain.example.com"}));
  EXPECT_EQ(expand("x[5]"), (std::vector<std::string>{"x5"}));
}

TEST(HostRanges, SeveralBracketsFirstVariesSlowest) {
  EXPECT_EQ(expand("rack[1-2]-gpu[1-3]"),
            (std::vector<std::string>{"rack1-gpu1", "rack1-gpu2", "rack1-gpu3", "rack2-gpu1",
                                      "rack2-gpu2", "rack2-gpu3"}));
}

TEST(HostRanges, MalformedRangesSayWhatIsWrong) {
  struct Case {
    const char* expr;
    const char* says;
  };
  for (const Case& c : {Case{"node[04-01]", "04 is more than 01"}, Case{"node[01-04", "without ']'"},
                        Case{"node01]", "without '['"}, Case{"node[]", "empty brackets"},
                        Case{"node[a-b]", "not a number"}, Case{"node[1,,2]", "empty item"},
                        Case{"node[[1]]", "nested"}, Case{"n[1-9999999]", "more than"}}) {
    auto r = expand_hostnames(c.expr);
    ASSERT_FALSE(r.is_ok()) << c.expr;
    EXPECT_NE(r.status().message().find("malformed host range"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(c.says), std::string::npos) << r.status().message();
  }
}

TEST(Hostfile, OpenMpiSyntaxWithCommentsAndBlankLines) {
  auto r = parse_hostfile("# cluster\n\nnode01 slots=4\n  node02   slots=2   # two\n\tnode03\n", "h");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ(names(*r), (std::vector<std::string>{"node01", "node02", "node03"}));
  EXPECT_EQ((*r)[0].slots, 4);
  EXPECT_EQ((*r)[1].slots, 2);
  EXPECT_FALSE((*r)[2].slots.has_value());
  EXPECT_EQ((*r)[1].origin, "h:4");
}

TEST(Hostfile, AcceleratorAndGroupKeys) {
  auto r = parse_hostfile(
      "g1 slots=8 gpus=8 accelerator_type=h100 pod=p1 zone=z region=r\n"
      "t1 resources=TPU:4,hpu=2 worker=3 pod=s\n"
      "t2 TPU=4 neuron_cores=2\n"
      "o1 max_slots=16 slots=4\n",
      "h");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const auto& g = (*r)[0];
  EXPECT_EQ(g.gpus, 8);
  ASSERT_EQ(g.resources.size(), 1u);
  EXPECT_EQ(g.resources[0].first, "GPU");
  EXPECT_EQ(g.resources[0].second, detect::Quantity::whole(8));
  EXPECT_EQ(g.accelerator_type, detect::canonical_type("h100"));
  EXPECT_EQ(g.labels.pod, "p1");
  EXPECT_EQ(g.labels.zone, "z");
  EXPECT_EQ(g.labels.region, "r");
  const auto& t = (*r)[1];
  ASSERT_EQ(t.resources.size(), 2u);
  EXPECT_EQ(t.resources[0].first, "TPU");
  EXPECT_EQ(t.resources[1].first, "HPU");
  EXPECT_EQ(t.resources[1].second, detect::Quantity::whole(2));
  EXPECT_EQ(t.pod_order, 3);
  const auto& t2 = (*r)[2];
  ASSERT_EQ(t2.resources.size(), 2u);
  EXPECT_EQ(t2.resources[1].first, "neuron_cores");
  EXPECT_EQ((*r)[3].slots, 4);
}

TEST(Hostfile, RangeLinesDeclareEveryHostAndNumberWorkers) {
  auto r = read_hostfile(kDir + "tpu-slice.hosts");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->size(), 8u);
  EXPECT_EQ((*r)[4].name, "tpu-b0");
  EXPECT_EQ((*r)[4].pod_order, 0);
  EXPECT_EQ((*r)[7].name, "tpu-b3");
  EXPECT_EQ((*r)[7].pod_order, 3);
  EXPECT_EQ((*r)[7].origin, kDir + "tpu-slice.hosts:6");
}

// A hostfile that can be read once (a pipe: --hostfile /dev/stdin or
// <(...)) gives the same hosts to every later read in the process: accrun
// reads its hostfile in more than one place (before: the second read found
// no hosts, and a FIFO's second open waited for ever).
TEST(Hostfile, APipeGivesTheSameHostsToEveryRead) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const std::string text = "p1 slots=2\np2 slots=3\n";
  ASSERT_EQ(write(fds[1], text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fds[1]);
  const std::string path = "/dev/fd/" + std::to_string(fds[0]);
  for (int read = 0; read < 2; ++read) {
    auto r = read_hostfile(path);
    ASSERT_TRUE(r.is_ok()) << read << ": " << r.status().message();
    ASSERT_EQ(r->size(), 2u) << read;
    EXPECT_EQ((*r)[1].name, "p2");
    EXPECT_EQ((*r)[1].slots, 3);
  }
  close(fds[0]);
}

TEST(Hostfile, ErrorsNameFileLineAndSuggest) {
  auto r = read_hostfile(kDir + "bad-key.hosts");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), kDir + "bad-key.hosts:3: unknown key 'gpu' (did you mean 'gpus'?)");

  r = read_hostfile(kDir + "bad-number.hosts");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(),
            kDir + "bad-number.hosts:2: slots: 'eight' is not a whole number (e.g. slots=8)");

  r = read_hostfile(kDir + "duplicate.hosts");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), kDir + "duplicate.hosts:2: duplicate host 'node02' (first declared at " +
                                      kDir + "duplicate.hosts:1; give each host once)");

  r = read_hostfile(kDir + "bad-range.hosts");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("bad-range.hosts:1: malformed host range 'node[04-01]'"),
            std::string::npos)
      << r.status().message();
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);

  r = read_hostfile(kDir + "no-such-file");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("cannot read hostfile"), std::string::npos);
  // Host names ignore case, as DNS does: one host given twice.
  r = parse_hostfile("n1\nN1\n", "f");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), "f:2: duplicate host 'N1' (the same host as 'n1': host names ignore case; first "
                                  "declared at f:1; give each host once)");
  r = parse_host_list("h1:1,H1:1");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("host names ignore case"), std::string::npos) << r.status().message();
  // A key like no other: the list of keys, every one of them.
  r = parse_hostfile("n1 colour=red\n", "f");
  ASSERT_FALSE(r.is_ok());
  for (const char* k : {"slots", "max_slots", "gpus", "worker", "TPU=4"})
    EXPECT_NE(r.status().message().find(k), std::string::npos) << k << ": " << r.status().message();
}

TEST(Hostfile, MoreBadInput) {
  EXPECT_EQ(error_of("n1 slots=0\n"), "hosts:1: slots: '0' must be at least 1 (e.g. slots=8)");
  EXPECT_EQ(error_of("n1 slots=4 slots=5\n"), "hosts:1: key 'slots' given twice on one line");
  EXPECT_EQ(error_of("n1 slot=4\n"), "hosts:1: unknown key 'slot' (did you mean 'slots'?)");
  EXPECT_NE(error_of("n1 gpus=2 resources=GPU:2\n").find("GPU is declared twice"), std::string::npos);
  EXPECT_NE(error_of("n1 gpus=1.5\n").find("hosts:1: gpus: '1.5' is not a whole number"), std::string::npos);
  EXPECT_NE(error_of("n1 TPU=0.5\n").find("a host has whole devices"), std::string::npos);
  EXPECT_NE(error_of("n1 resources=FOO:1\n").find("unknown resource 'FOO'"), std::string::npos);
  EXPECT_NE(error_of("n1 slots\n").find("hosts:1: 'slots' is not key=value"), std::string::npos);
  EXPECT_NE(error_of("slots=4\n").find("starts with the host name"), std::string::npos);
  EXPECT_NE(error_of("n1 pod=\n").find("key 'pod' has no value"), std::string::npos);
  EXPECT_NE(error_of("\n\nn1 worker=-1\n").find("hosts:3: worker:"), std::string::npos);
}

TEST(HostList, HostsSlotsAndRanges) {
  auto r = parse_host_list("a:2,node[1-3]:4,b");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(names(*r), (std::vector<std::string>{"a", "node1", "node2", "node3", "b"}));
  EXPECT_EQ((*r)[0].slots, 2);
  EXPECT_EQ((*r)[3].slots, 4);
  EXPECT_FALSE((*r)[4].slots.has_value());
  EXPECT_EQ((*r)[0].origin, "-H");
}

TEST(HostList, BadInput) {
  for (const char* bad : {"", "a,,b", "a:x", "a:0", "a,a", "n[2-1]"}) {
    auto r = parse_host_list(bad);
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_EQ(r.status().message().rfind("-H: ", 0), 0u) << r.status().message();
  }
}

TEST(ResourceList, BothSeparatorsAndCanonicalNames) {
  auto r = parse_resource_list("gpu=0.5,Neuron_Cores:2");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].first, "GPU");
  EXPECT_EQ((*r)[0].second.units(), 5000);
  EXPECT_EQ((*r)[1].first, "neuron_cores");
  EXPECT_FALSE(parse_resource_list("GPU=1,gpu=2").is_ok());
  EXPECT_FALSE(parse_resource_list("GPU").is_ok());
  EXPECT_FALSE(parse_resource_list("GPU=x").is_ok());
}

TEST(ClosestMatch, TyposAndPrefixes) {
  std::vector<std::string> c = {"--gpus-per-rank", "--num-gpus", "--pod-blocks", "--pod-level"};
  EXPECT_EQ(closest_match("--gpu-per-rank", c), "--gpus-per-rank");
  EXPECT_EQ(closest_match("--num-gpu", c), "--num-gpus");
  EXPECT_EQ(closest_match("--gpus", c), "--gpus-per-rank");
  EXPECT_FALSE(closest_match("--pod", c).has_value());  // ambiguous
  EXPECT_FALSE(closest_match("--frobnicate", c).has_value());
}

TEST(DeclaredInventory, TypeDecidesVendorAndDevicesAreNumbered) {
  auto r = parse_hostfile("m slots=8 gpus=2 accelerator_type=AMD-Instinct-MI300X-OAM pod=p worker=1\n"
                          "n gpus=3\nt TPU=4 accelerator_type=TPU-V4\nc slots=4\n",
                          "h");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  auto m = declared_inventory((*r)[0]);
  EXPECT_EQ(m.host, "m");
  ASSERT_EQ(m.accelerators.size(), 2u);
  EXPECT_EQ(m.accelerators[1].id, 1);
  EXPECT_EQ(m.accelerators[0].resource, "GPU");
  EXPECT_EQ(m.accelerators[0].type, detect::canonical_type("MI300X"));
  EXPECT_EQ(m.accelerators[0].vendor, detect::vendor_of_type(detect::canonical_type("MI300X")));
  EXPECT_EQ(m.labels.pod, "p");
  EXPECT_EQ(m.pod_order, 1);
  EXPECT_TRUE(m.cores.empty());
  auto n = declared_inventory((*r)[1]);
  ASSERT_EQ(n.accelerators.size(), 3u);
  EXPECT_EQ(n.accelerators[0].vendor, detect::default_vendor("GPU"));
  auto t = declared_inventory((*r)[2]);
  ASSERT_EQ(t.accelerators.size(), 4u);
  EXPECT_EQ(t.accelerators[0].resource, "TPU");
  EXPECT_EQ(t.accelerators[0].vendor, detect::default_vendor("TPU"));
  EXPECT_TRUE(declared_inventory((*r)[3]).accelerators.empty());
}

// instance_type= stands for the devices and type of a cloud instance.
TEST(DeclaredInventory, InstanceTypes) {
  struct Case {
    const char* instance;
    const char* resource;
    std::size_t count;
    const char* type;
  };
  const Case kCases[] = {
      {"p4d.24xlarge", "GPU", 8, "A100-40G"},   {"p4de.24xlarge", "GPU", 8, "A100-80G"},
      {"p5.48xlarge", "GPU", 8, "H100-SXM"},    {"trn1.32xlarge", "neuron_cores", 32, "TRAINIUM1"},
      {"g5.xlarge", "GPU", 1, "A10G"},          {"a3-highgpu-8g", "GPU", 8, "H100-SXM"},
      {"ct5lp-hightpu-4t", "TPU", 4, "TPU-V5LITEPOD"}, {"inf2.48xlarge", "neuron_cores", 24, "INFERENTIA2"},
      {"G5.12XLARGE", "GPU", 4, "A10G"},
  };
  for (const auto& c : kCases) {
    auto r = parse_hostfile(std::string("h instance_type=") + c.instance + "\n", "hosts");
    ASSERT_TRUE(r.is_ok()) << c.instance << ": " << r.status().message();
    auto inv = declared_inventory((*r)[0]);
    ASSERT_EQ(inv.accelerators.size(), c.count) << c.instance;
    EXPECT_EQ(inv.accelerators[0].resource, c.resource) << c.instance;
    EXPECT_EQ(inv.accelerators[0].type, c.type) << c.instance;
    EXPECT_EQ(inv.accelerators[0].vendor, detect::vendor_of_type(c.type)) << c.instance;
    EXPECT_FALSE((*r)[0].gpus) << "the table is no claim an agent's detection is checked against";
  }
  // Trainium: 16 chips, 32 NeuronCores.
  const detect::InstanceType* trn1 = detect::find_instance_type("trn1.32xlarge");
  ASSERT_NE(trn1, nullptr);
  EXPECT_EQ(trn1->chips, 16);
  EXPECT_EQ(trn1->count, 32);
  // What the line says itself wins over the table.
  auto r = parse_hostfile("h instance_type=p4d.24xlarge gpus=2 accelerator_type=A100\n", "hosts");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  auto inv = declared_inventory((*r)[0]);
  EXPECT_EQ(inv.accelerators.size(), 2u);
  EXPECT_EQ(inv.accelerators[0].type, "A100");
  // An unknown instance type names the file and line, with a suggestion.
  r = parse_hostfile("a slots=1\nb instance_type=p4d.24xlarg\n", "hosts");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("hosts:2: unknown instance type 'p4d.24xlarg' (did you mean 'p4d.24xlarge'?)"),
            std::string::npos)
      << r.status().message();
  r = parse_hostfile("b instance_type=m5.large\n", "hosts");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("hosts:1: unknown instance type 'm5.large'"), std::string::npos)
      << r.status().message();
  // Every row names a known type of its resource.
  for (const auto& t : detect::instance_types()) {
    EXPECT_EQ(detect::resource_of_type(t.type), t.resource) << t.name;
    EXPECT_GE(t.count, t.chips) << t.name;
  }
}

// Detected hardware wins over the table; the hostfile's labels stay on top.
TEST(DeclaredInventory, DetectedHardwareWins) {
  auto r = parse_hostfile("n1 instance_type=p4d.24xlarge pod=p worker=2\n", "hosts");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  detect::Inventory seen;
  seen.host = "n1.example";
  seen.cpus = 96;
  for (int i = 0; i < 4; ++i) {
    detect::Accelerator a;
    a.resource = "GPU";
    a.vendor = "nvidia";
    a.id = i;
    a.type = "A100-80G";
    seen.accelerators.push_back(a);
  }
  auto inv = detected_inventory((*r)[0], seen);
  EXPECT_EQ(inv.host, "n1");
  EXPECT_EQ(inv.cpus, 96);
  ASSERT_EQ(inv.accelerators.size(), 4u);
  EXPECT_EQ(inv.accelerators[0].type, "A100-80G");
  EXPECT_EQ(inv.labels.pod, "p");
  EXPECT_EQ(inv.pod_order, 2);
}

// --- Limits (accrun-hostfile(5) LIMITS): tiny inputs must not exhaust memory.

bool has(const std::string& message, const std::string& part) {
  return message.find(part) != std::string::npos;
}

TEST(HostfileLimits, DeviceCountsAreCapped) {
  // gpus=100000000 once built 10^8 logical devices and died of bad_alloc.
  for (const char* text : {"node1 gpus=100000000\n", "node1 gpus=9999999\n", "node1 resources=TPU:99999999\n",
                           "node1 resources=GPU:4,HPU:1000000\n", "node1 neuron_cores=4097\n"}) {
    const std::string m = error_of(text);
    EXPECT_TRUE(has(m, "hosts:1: ")) << m;
    EXPECT_TRUE(has(m, "more than 4096 devices of one resource on a host (the limit)")) << m;
  }
  EXPECT_EQ(error_of("node1 gpus=100000000\n"),
            "hosts:1: gpus: '100000000' is more than 4096 devices of one resource on a host (the limit)");
  EXPECT_EQ(error_of("node1 resources=TPU:99999999\n"),
            "hosts:1: resources: TPU=99999999: more than 4096 devices of one resource on a host (the limit)");
  auto r = parse_hostfile("node1 gpus=4096 TPU=4096\n", "hosts");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(declared_inventory((*r)[0]).accelerators.size(), 8192u);
}

TEST(HostfileLimits, RangesAreSizedBeforeTheyAreExpanded) {
  // node[0-999999] took 18.6 s and 696 MB before it was refused.
  const auto t0 = std::chrono::steady_clock::now();
  const std::string m = error_of("node[0-999999] slots=1\n");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  EXPECT_EQ(m, "hosts:1: malformed host range 'node[0-999999]': expands to more than 100000 hosts, the limit "
               "of one job");
  // Several brackets multiply; numbers too large for any count do not overflow.
  EXPECT_TRUE(has(error_of("r[0-999]-n[0-999]\n"), "more than 100000 hosts"));
  EXPECT_TRUE(has(error_of("n[0-9223372036854775807]\n"), "more than 100000 hosts"));
  EXPECT_TRUE(has(error_of("n[0-99999999999999999999]\n"), "too large"));
  // Over several lines, the job's total counts.
  EXPECT_EQ(error_of("a[0-59999]\nb[0-59999]\n"),
            "hosts:2: the hostfile declares more than 100000 hosts, the limit of one job");
  // The limit is far above what the planner is asked to plan.
  auto r = parse_hostfile("node[00001-10000] slots=8 gpus=8\nx[0-89999]\n", "hosts");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->size(), 100'000u);
  EXPECT_EQ((*r)[9999].name, "node10000");
}

TEST(HostfileLimits, LongNamesAreRefusedBeforeExpanding) {
  // A 4,000-character -H argument ending in [0-999998] once asked for 4 GB.
  std::string list(4000 - 10, 'a');
  list += "[0-999998]";
  auto r = parse_host_list(list);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message().rfind("-H: ", 0), 0u);
  EXPECT_TRUE(has(r.status().message(), "more than 100000 hosts")) << r.status().message();
  std::string longer(300, 'a');
  r = parse_host_list(longer + "[0-9]");
  ASSERT_FALSE(r.is_ok());
  EXPECT_TRUE(has(r.status().message(), "longer than 253 characters")) << r.status().message();
  EXPECT_LT(r.status().message().size(), 200u) << "the name is cut in the message";
  EXPECT_TRUE(has(error_of(std::string(64, 'a') + ".example.com\n"), "longer than 63 characters"));
  // Exactly at the limits is fine.
  const std::string label(63, 'a');
  const std::string at_limit = label + "." + label + "." + label + "." + std::string(61, 'b');
  ASSERT_EQ(at_limit.size(), 253u);
  EXPECT_EQ(expand(at_limit.c_str()), std::vector<std::string>{at_limit});
}

TEST(HostfileLimits, HostListCountsTheWholeList) {
  auto r = parse_host_list("a[0-59999],b[0-59999]");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), "-H: more than 100000 hosts, the limit of one job");
  r = parse_host_list("n[0-999999]:4");
  ASSERT_FALSE(r.is_ok());
  EXPECT_TRUE(has(r.status().message(), "more than 100000 hosts")) << r.status().message();
}

// A temporary file, removed at the end of the test.
struct TempFile {
  std::string path;
  explicit TempFile(const std::string& text) {
    char name[] = "/tmp/accrun-hostfile-XXXXXX";
    int fd = ::mkstemp(name);
    EXPECT_GE(fd, 0);
    path = name;
    if (fd >= 0) {
      EXPECT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
      ::close(fd);
    }
  }
  ~TempFile() { std::remove(path.c_str()); }
};

TEST(HostfileLimits, ReadsAreBounded) {
  // /dev/zero never ends: once read until memory ran out.
  auto r = read_hostfile("/dev/zero");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "hostfile '/dev/zero' is not a regular file and gave more than 16 MiB, the limit for a hostfile");
  // A regular file over the limit is refused without being read.
  TempFile big("");
  ASSERT_EQ(::truncate(big.path.c_str(), (16 << 20) + 1), 0);
  r = read_hostfile(big.path);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), "hostfile '" + big.path + "' is larger than 16 MiB, the limit for a hostfile");
  // A device that ends (and a FIFO or /dev/stdin would) is read as text.
  r = read_hostfile("/dev/null");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_TRUE(r->empty());
}

// --- Inputs that were accepted, or reported badly.

TEST(HostfileInput, DirectoryIsNamedAsSuch) {
  auto r = read_hostfile(kDir);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "hostfile '" + kDir + "' is a directory (give the file that lists the hosts)");
}

TEST(HostfileInput, ControlBytesAreErrorsNamingTheLine) {
  using namespace std::string_literals;
  // A NUL once cut the message short: now it is an error of its own.
  EXPECT_EQ(error_of("node1\nnode2\0 slots=2\n"s),
            "hosts:2: a NUL byte in column 6 (a hostfile is text; remove it)");
  EXPECT_EQ(error_of("node1 # ok\n\x1b[31mnode2\n"),
            "hosts:2: the control byte \\x1b in column 1 (a hostfile is text; remove it)");
  TempFile f("node1\nn\0de2\n"s);
  auto r = read_hostfile(f.path);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), f.path + ":2: a NUL byte in column 2 (a hostfile is text; remove it)");
  // TAB and CRLF line ends are still blanks.
  auto ok = parse_hostfile("node1\tslots=2\r\nnode2\r\n", "hosts");
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  EXPECT_EQ(names(*ok), (std::vector<std::string>{"node1", "node2"}));
  // A CR anywhere else is a control byte like any other (it was read as a
  // blank).
  EXPECT_EQ(error_of("node1\rslots=2\n"),
            "hosts:1: the control byte \\x0d in column 6 (a hostfile is text; remove it)");
}

TEST(HostfileInput, InvalidHostNamesNameFileLineAndName) {
  EXPECT_EQ(error_of("ok1\na:b slots=2\n"),
            "hosts:2: invalid host name 'a:b': ':' is not allowed in a host name (letters, digits, '-', '_' "
            "and '.' are)");
  // Bytes that are not UTF-8, and UTF-8 that is not a host name.
  EXPECT_EQ(error_of("n\xff\xfe\n"), "hosts:1: a byte that is not UTF-8 (\\xff) in column 2 (save the hostfile "
                                     "as UTF-8 text)");
  EXPECT_TRUE(has(error_of("caf\xc3\xa9\n"), "hosts:1: invalid host name 'caf\xc3\xa9': '\xc3\xa9' is not allowed"));
  EXPECT_TRUE(has(error_of("n/1\n"), "'/' is not allowed in a host name"));
  EXPECT_TRUE(has(error_of("-node1\n"), "starts or ends with '-'"));
  EXPECT_TRUE(has(error_of("node1.\n"), "an empty part"));
  EXPECT_TRUE(has(error_of("a..b\n"), "an empty part"));
  EXPECT_TRUE(has(error_of("n[1-2]-\n"), "invalid host name 'n1-'"));
  // Valid names: dots, hyphens, underscores, IPv4 addresses, any case.
  auto r = parse_hostfile("gpu_node-01.Cluster.example\n10.0.0.7\nrack[1-2]-gpu[01-02]\n", "hosts");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->size(), 6u);
  // Non-UTF-8 bytes in a comment are harmless.
  EXPECT_TRUE(parse_hostfile("node1 # caf\xe9\n", "hosts").is_ok());
  // -H still reads host:slots, and a bad name names the host.
  auto h = parse_host_list("a:2,b_c.d:3");
  ASSERT_TRUE(h.is_ok()) << h.status().message();
  EXPECT_EQ((*h)[1].name, "b_c.d");
  EXPECT_EQ((*h)[1].slots, 3);
  auto bad = parse_host_list("a;b:2");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().message(),
            "-H: invalid host name 'a;b': ';' is not allowed in a host name (letters, digits, '-', '_' and '.' are)");
  bad = parse_host_list("n\x01:2");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_TRUE(has(bad.status().message(), "invalid host name 'n\\x01': '\\x01'")) << bad.status().message();
}

TEST(HostfileInput, DuplicateWorkerInOnePodNamesBothLines) {
  EXPECT_EQ(error_of("t0 pod=s worker=0\nt1 pod=s worker=1\nu0 pod=u worker=1\nt2 pod=s worker=1\n"),
            "hosts:4: host 't2' is worker 1 of pod 's', and so is host 't1' at hosts:2 (give each host of a pod "
            "its own worker id)");
  // A range numbers its workers from N: a clash with any of them counts.
  EXPECT_TRUE(has(error_of("t[0-3] pod=s worker=0\nx pod=s worker=3\n"), "and so is host 't3' at hosts:1"));
  // Same worker id in different pods, or without a pod, is fine.
  EXPECT_TRUE(parse_hostfile("a pod=p worker=0\nb pod=q worker=0\nc worker=0\nd worker=0\n", "hosts").is_ok());
}

TEST(HostfileInput, ByteOrderMarkIsSkippedAndInvisibleCharactersAreNamed) {
  auto r = parse_hostfile("\xEF\xBB\xBFnode1 slots=2\nnode2\n", "hosts");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(names(*r), (std::vector<std::string>{"node1", "node2"}));
  // Only at the start of the file.
  EXPECT_EQ(error_of("node1\n\xEF\xBB\xBFnode2\n"),
            "hosts:2: an invisible character (U+FEFF) in column 1 (separate words with plain spaces or tabs, and "
            "remove it from names)");
  // Characters that show as a space are named, never shown as one.
  EXPECT_EQ(error_of("node1\xc2\xa0slots=2\n"),
            "hosts:1: a non-breaking space (U+00A0) in column 6 (separate words with plain spaces or tabs, and "
            "remove it from names)");
  EXPECT_TRUE(has(error_of("node1 slots=2\xe3\x80\x80\n"), "a wide space (U+3000) in column 14"));
  // Columns count characters, as an editor shows them: after 'é' (two bytes) the NBSP is the fifth.
  EXPECT_TRUE(has(error_of("n1 # x\nn2 pod=\xc3\xa9\xc2\xa0" "a\n"), "hosts:2: a non-breaking space (U+00A0) in column 9"));
  EXPECT_TRUE(has(error_of("no\xe2\x80\x8b" "de1\n"), "an invisible character (U+200B) in column 3"));
  // In a comment they are text.
  EXPECT_TRUE(parse_hostfile("node1 # caf\xc3\xa9\xc2\xa0ok\n", "hosts").is_ok());
}

TEST(HostfileInput, MessagesNeverCarryRawControlBytes) {
  EXPECT_EQ(printable("a\tb\x01\x7f\\"), "a\\x09b\\x01\\x7f\\\\");
  EXPECT_EQ(printable("caf\xc3\xa9 \xff\xc3"), "caf\xc3\xa9 \\xff\\xc3");
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a surrogate is not UTF-8
  EXPECT_EQ(printable("a\xc2\xa0" "b\xe2\x80\x8b\xef\xbb\xbf"), "a\\u00a0b\\u200b\\ufeff");
  using namespace std::string_literals;
  auto r = parse_hostfile("node1 pod=\xff\n"s, "ho\x01sts");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message().rfind("ho\\x01sts:1: ", 0), 0u) << r.status().message();
  for (char c : r.status().message()) EXPECT_GE(static_cast<unsigned char>(c), 0x20);
}

}  // namespace
}  // namespace accrun::hostfiles

// Slurm node lists (SLURM_JOB_NODELIST), as Slurm's documentation writes them.
struct NodeListCase {
  const char* list;
  std::vector<std::string> expect;
};

TEST(SlurmNodeList, ExpandsSlurmsForms) {
  const NodeListCase cases[] = {
      {"tux0", {"tux0"}},
      {"tux0,tux1", {"tux0", "tux1"}},
      {"tux[0-3]", {"tux0", "tux1", "tux2", "tux3"}},
      {"tux[1,3-5]", {"tux1", "tux3", "tux4", "tux5"}},
      {"lx[10-12]", {"lx10", "lx11", "lx12"}},
      {"node[001-003]", {"node001", "node002", "node003"}},
      {"node[09-11]", {"node09", "node10", "node11"}},
      {"gpu[01-02,07]", {"gpu01", "gpu02", "gpu07"}},
      {"gpu[01-02,07],cpu-a", {"gpu01", "gpu02", "gpu07", "cpu-a"}},
      {"rack[1-2]-n[1-2]", {"rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"}},
      {"a[1-2]b", {"a1b", "a2b"}},
      {"h1,h2,h3,h4", {"h1", "h2", "h3", "h4"}},
      {"linux[0-1,128]", {"linux0", "linux1", "linux128"}},
      {"n[8-10]x1", {"n8x1", "n9x1", "n10x1"}},
      {"c[1-2],d[3-4]", {"c1", "c2", "d3", "d4"}},
      {"node-[1-2].cluster", {"node-1.cluster", "node-2.cluster"}},
      {"x[0-0]", {"x0"}},
      {"tux[5]", {"tux5"}},
      {"tux[0-3,5]", {"tux0", "tux1", "tux2", "tux3", "tux5"}},
      {"dev[01-02]-ib0", {"dev01-ib0", "dev02-ib0"}},
      {"r[01-02]n[8-9]", {"r01n8", "r01n9", "r02n8", "r02n9"}},
      {"gpu[098-101]", {"gpu098", "gpu099", "gpu100", "gpu101"}},
  };
  for (const auto& c : cases) {
    auto got = accrun::hostfiles::expand_node_list(c.list);
    ASSERT_TRUE(got) << c.list << ": " << got.status().message();
    EXPECT_EQ(*got, c.expect) << c.list;
  }
}

TEST(SlurmNodeList, BadListsNameTheText) {
  for (const char* bad : {"tux[1-", "tux[3-1]", "a,,b", "tux[x-y]", "[", "tux]1["}) {
    auto got = accrun::hostfiles::expand_node_list(bad);
    ASSERT_FALSE(got) << bad;
    EXPECT_NE(got.status().message().find("node list"), std::string::npos) << got.status().message();
  }
}

TEST(SlurmCounts, TasksPerNodeForms) {
  using V = std::vector<int>;
  EXPECT_EQ(*accrun::hostfiles::parse_counts_per_node("2"), V({2}));
  EXPECT_EQ(*accrun::hostfiles::parse_counts_per_node("2(x3),1"), V({2, 2, 2, 1}));
  EXPECT_EQ(*accrun::hostfiles::parse_counts_per_node("4,2(x2)"), V({4, 2, 2}));
  EXPECT_EQ(*accrun::hostfiles::parse_counts_per_node("1(x1)"), V({1}));
  EXPECT_EQ(*accrun::hostfiles::parse_counts_per_node("16(x2),8,1(x2)"), V({16, 16, 8, 1, 1}));
  for (const char* bad : {"", "0", "2(x0)", "2(3)", "2(x3", "a", "2,,1", "-1"}) {
    auto got = accrun::hostfiles::parse_counts_per_node(bad);
    EXPECT_FALSE(got) << "'" << bad << "'";
    if (!got) {
      EXPECT_NE(got.status().message().find("COUNT(xREPEAT)"), std::string::npos) << got.status().message();
    }
  }
}
