// How the job controller starts its agents (launcher/src/controller/
// launch_agent.hpp, slurm.hpp): shell quoting, launch-agent templates, the
// launch tree's shape, the launch description an agent reads on stdin, and
// the one srun step inside a Slurm allocation.
#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <string>

#include "controller/launch_agent.hpp"
#include "controller/slurm.hpp"

namespace accrun::launcher {
namespace {

// What /bin/sh makes of `line`: its words, one per line.
std::string words(const std::string& line) {
  std::string cmd = "for w in " + line + "; do printf '%s\\n' \"$w\"; done";
  FILE* p = popen(("/bin/sh -c " + shell_quote(cmd)).c_str(), "r");
  std::string out;
  char buf[256];
  while (p != nullptr && fgets(buf, sizeof buf, p) != nullptr) out += buf;
  if (p != nullptr) pclose(p);
  return out;
}

TEST(LaunchAgent, ShellQuoteSurvivesTheShell) {
  for (std::string w : {"plain", "with space", "it's", "$HOME `id` \"q\"", "", "a\\b;c|d&e"})
    EXPECT_EQ(words(shell_quote(w)), w + "\n") << w;
}

TEST(LaunchAgent, CommandWithAndWithoutTemplate) {
  // ssh style: the host, then the agent's command line as one word (ssh
  // hands it to the remote shell).
  EXPECT_EQ(words(launch_command("ssh -o BatchMode=yes", "h1", "'/opt/my accrun' --daemon")),
            "ssh\n-o\nBatchMode=yes\nh1\n'/opt/my accrun' --daemon\n");
  // A template: {host} quoted, {cmd} as the command line it is.
  EXPECT_EQ(words(launch_command("docker exec {host} {cmd}", "node 1", "'/a b' --daemon")),
            "docker\nexec\nnode 1\n/a b\n--daemon\n");
  EXPECT_EQ(launch_command("{cmd}", "h9", "x --daemon"), "x --daemon");
}

// A launch agent that cannot run here is bad input, found before anything
// starts; what only the shell can resolve is left to it.
TEST(LaunchAgent, ACommandNotOnThePathIsRefusedBeforeAnythingStarts) {
  const char* path = "/usr/bin:/bin";
  EXPECT_TRUE(check_launch_agent("sh -c", path));
  EXPECT_TRUE(check_launch_agent("/bin/sh -c", path));
  EXPECT_TRUE(check_launch_agent("env X=1 sh", path));
  EXPECT_TRUE(check_launch_agent("  A=1 B_2=x sh {host} {cmd}", path));
  for (const char* shell_decides : {"{cmd}", "\"$RSH\" -x", "exec ssh", "`which ssh`", "~/bin/rsh"})
    EXPECT_TRUE(check_launch_agent(shell_decides, path)) << shell_decides;
  Status s = check_launch_agent("nosuch-rsh -p 22", path);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.code(), Code::kInvalidUsage);
  EXPECT_NE(s.message().find("--launch-agent 'nosuch-rsh -p 22': 'nosuch-rsh' is not on this host's PATH"),
            std::string::npos) << s.message();
  EXPECT_NE(s.message().find("nothing was started"), std::string::npos) << s.message();
  // sh is on /bin but not on this PATH: the PATH given is the one searched.
  EXPECT_FALSE(check_launch_agent("sh", "/nonexistent"));
  Status ssh = check_launch_agent("ssh -o BatchMode=yes", "/nonexistent");
  EXPECT_NE(ssh.message().find("install an ssh client"), std::string::npos) << ssh.message();
  EXPECT_NE(check_launch_agent("/nonexistent/ssh", path).message().find("/nonexistent/ssh does not exist"),
            std::string::npos);
  EXPECT_NE(check_launch_agent("/etc -x", path).message().find("/etc cannot be run"), std::string::npos);
  EXPECT_FALSE(check_launch_agent("1X=2 sh", "/nonexistent")) << "1X=2 is a command word, not an assignment";
}

TEST(LaunchAgent, TreeStartsEveryAgentOnceWithinTheFanout) {
  for (int n : {1, 2, 7, 32, 33, 256, 1000}) {
    for (int fanout : {1, 2, 8, 32}) {
      std::set<int> started;
      // Position 0 is the controller, agent i is position i + 1.
      for (int pos = 0; pos <= n; ++pos) {
        auto kids = tree_children(pos, n, fanout);
        EXPECT_LE(static_cast<int>(kids.size()), fanout);
        for (int k : kids) {
          EXPECT_TRUE(started.insert(k).second) << "agent " << k << " started twice (n=" << n << ")";
          EXPECT_GT(k + 1, pos) << "an agent starts one above it";
        }
      }
      EXPECT_EQ(static_cast<int>(started.size()), n) << "n=" << n << " fanout=" << fanout;
    }
  }
  EXPECT_EQ(tree_depth(32, 32), 1);
  EXPECT_EQ(tree_depth(33, 32), 2);
  EXPECT_EQ(tree_depth(256, 8), 3);  // 8 + 64 + 512 >= 256
  EXPECT_EQ(tree_depth(0, 8), 0);
}

TEST(LaunchAgent, EveryAgentsParentStartedIt) {
  for (int n : {1, 7, 33, 256})
    for (int fanout : {1, 2, 8, 32})
      for (int pos = 0; pos <= n; ++pos)
        for (int k : tree_children(pos, n, fanout)) EXPECT_EQ(tree_parent(k, fanout), pos - 1) << n << " " << fanout;
}

// Whole-job fences along the tree: each agent waits for its children with
// ranks; an agent without ranks above one with ranks sends every fence to
// the controller instead (nothing would relay for it).
TEST(LaunchAgent, FenceChildrenFollowTheTreeWhereEveryRelayHasRanks) {
  // fanout 2: agents 0,1 start at the controller; 0 starts 2,3; 1 starts 4,5.
  auto all = fence_children({true, true, true, true, true, true}, 2);
  ASSERT_TRUE(all);
  EXPECT_EQ((*all)[0], (std::vector<int>{2, 3}));
  EXPECT_EQ((*all)[1], (std::vector<int>{4, 5}));
  EXPECT_TRUE((*all)[2].empty());
  // Leaves without ranks are left out of their parents' rounds.
  auto some = fence_children({true, true, true, false, true, false}, 2);
  ASSERT_TRUE(some);
  EXPECT_EQ((*some)[0], (std::vector<int>{2}));
  EXPECT_EQ((*some)[1], (std::vector<int>{4}));
  // Agent 1 has no ranks but agent 4 below it does.
  EXPECT_FALSE(fence_children({true, false, true, true, true, false}, 2));
  // A chain (fanout 1) whose tail has no ranks is fine.
  auto chain = fence_children({true, true, false, false}, 1);
  ASSERT_TRUE(chain);
  EXPECT_EQ((*chain)[0], (std::vector<int>{1}));
  EXPECT_TRUE((*chain)[1].empty());
}

TEST(LaunchAgent, DescriptionRoundTrips) {
  AgentLaunch a;
  a.secret_hex = std::string(64, 'a');
  a.index = 1;
  a.controller = {"10.0.0.1:4000", "[::1]:4001"};
  a.launch_agent = "ssh -F cfg";
  a.daemon_path = "/opt/accrun/bin/accrun";
  a.fanout = 8;
  a.hosts = {"h1", "h2", "h3"};
  a.ids = {4, 5, 6};
  a.options = {{"num-gpus", "2"}};
  a.parent = "10.0.0.2:39000";
  a.step = true;
  auto b = AgentLaunch::decode(a.encode());
  ASSERT_TRUE(b) << b.status().message();
  EXPECT_EQ(b->secret_hex, a.secret_hex);
  EXPECT_EQ(b->index, 1);
  EXPECT_EQ(b->controller, a.controller);
  EXPECT_EQ(b->launch_agent, a.launch_agent);
  EXPECT_EQ(b->daemon_path, a.daemon_path);
  EXPECT_EQ(b->fanout, 8);
  EXPECT_EQ(b->hosts, a.hosts);
  EXPECT_EQ(b->ids, a.ids);
  EXPECT_EQ(b->options, a.options);
  EXPECT_EQ(b->parent, a.parent);
  EXPECT_TRUE(b->step);
  a.step = false;
  EXPECT_FALSE(AgentLaunch::decode(a.encode())->step);
}

TEST(LaunchAgent, BadDescriptionsNameTheLine) {
  std::string good = "accrun-agent 1\nsecret " + std::string(64, 'b') + "\nindex 0\ncontroller 1.2.3.4:5\nhost h1 0\n";
  EXPECT_TRUE(AgentLaunch::decode(good + "end\n"));
  auto bad = [&](const std::string& text, const std::string& want) {
    auto r = AgentLaunch::decode(text);
    ASSERT_FALSE(r) << text;
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().message();
  };
  bad("accrun-agent 2\nend\n", "line 1");
  bad(good + "step 2\nend\n", "line 6: bad step");
  bad(good + "fanout 0\nend\n", "bad fanout");
  bad(good + "colour blue\nend\n", "unknown key 'colour'");
  bad(good + "parent nowhere\nend\n", "bad parent address 'nowhere'");
  bad(good, "ended before its 'end' line");
  bad("accrun-agent 1\nsecret " + std::string(64, 'b') + "\nindex 3\ncontroller a:1\nhost h1 0\nend\n",
      "index 3 is not one of its 1 hosts");
}

TEST(SrunStep, OneStepOneTaskPerNode) {
  std::string cmd = srun_step_command({"h2", "h3", "gpu07"}, "'/usr/bin/accrun' --daemon");
  for (const char* want : {"srun ", "--nodes=3 ", "--ntasks=3 ", "--ntasks-per-node=1 ", "--overlap ", "--cpu-bind=none ",
                           "--kill-on-bad-exit=1 ", "--input=all ", "--nodelist=h2,h3,gpu07 ",
                           " '/usr/bin/accrun' --daemon"})
    EXPECT_NE(cmd.find(want), std::string::npos) << want << " in " << cmd;
}

// apply_slurm_allocation over a made-up environment (no Slurm needed).
struct SlurmEnv {
  std::vector<std::string> vars;
  std::vector<char*> ptrs;
  explicit SlurmEnv(std::vector<std::string> v) : vars(std::move(v)) {
    for (auto& s : vars) ptrs.push_back(s.data());
    ptrs.push_back(nullptr);
  }
  char** envp() { return ptrs.data(); }
};

// -H or a hostfile inside an allocation: its nodes are reached by the srun
// step as the allocation's are (before: by ssh, which compute nodes may
// refuse), spelt as Slurm spells them (srun takes no other); a login node
// is not allocated, so "localhost" there is refused like its own name.
TEST(SlurmAllocation, HostsGivenInsideItAreReachedBySrunAndCheckedWithoutCase) {
  // (This machine is not h1 or h2: a login node.)
  SlurmEnv env({"SLURM_JOB_ID=99", "SLURM_JOB_NODELIST=h[1-2]", "SLURM_JOB_CPUS_PER_NODE=2(x2)"});
  Options o;
  o.host_list = "h1:2,h2:2";
  ASSERT_TRUE(apply_slurm_allocation(o, env.envp()).is_ok());
  EXPECT_EQ(o.launch_agent, kSrunLaunchAgent);
  Options spelt;
  spelt.host_list = "H1:2";
  Status wrong = apply_slurm_allocation(spelt, env.envp());
  EXPECT_EQ(wrong.code(), Code::kInvalidArgument);
  EXPECT_NE(wrong.message().find("Slurm spells it h1"), std::string::npos) << wrong.message();
  // A full name of an allocated node is not Slurm's spelling either.
  Options full;
  full.host_list = "h2.cluster.example:2";
  wrong = apply_slurm_allocation(full, env.envp());
  EXPECT_EQ(wrong.code(), Code::kInvalidArgument);
  EXPECT_NE(wrong.message().find("h2.cluster.example (-H) (Slurm spells it h2"), std::string::npos)
      << wrong.message();
  Options own;
  own.host_list = "h1:1";
  own.launch_agent = "ssh -F cfg";
  ASSERT_TRUE(apply_slurm_allocation(own, env.envp()).is_ok());
  EXPECT_EQ(own.launch_agent, "ssh -F cfg") << "an explicit --launch-agent wins";
  for (const char* outside : {"localhost:2", "h3:1"}) {
    Options bad;
    bad.host_list = outside;
    Status st = apply_slurm_allocation(bad, env.envp());
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << outside;
    EXPECT_NE(st.message().find("not allocated"), std::string::npos) << outside << ": " << st.message();
  }
}

// Inside an srun step, SLURM_NTASKS and SLURM_TASKS_PER_NODE are the
// step's: the job's nodes get SLURM_JOB_CPUS_PER_NODE's slots (before: a
// mismatch, status 2); a count that does not fit names its own variable.
TEST(SlurmAllocation, InsideAStepTheJobsNodesAndCpusCount) {
  SlurmEnv step({"SLURM_JOB_ID=99", "SLURM_JOB_NODELIST=h[1-2]", "SLURM_JOB_CPUS_PER_NODE=2(x2)", "SLURM_NTASKS=1",
                 "SLURM_TASKS_PER_NODE=1", "SLURM_STEP_ID=0"});
  Options o;
  Status st = apply_slurm_allocation(o, step.envp());
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(o.host_list, "h1:2,h2:2");
  EXPECT_FALSE(o.np) << "-n is not the step's task count";
  SlurmEnv bad({"SLURM_JOB_ID=99", "SLURM_JOB_NODELIST=h[1-2]", "SLURM_JOB_CPUS_PER_NODE=2"});
  Options b;
  st = apply_slurm_allocation(b, bad.envp());
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_EQ(st.message().rfind("SLURM_JOB_CPUS_PER_NODE '2' gives 1 counts", 0), 0u) << st.message();
}

// -n comes from SLURM_NTASKS when it is a task count; anything else is
// one clear error naming the variable (before: "abc" was ignored and "8x"
// read as 8).
TEST(SlurmAllocation, SlurmNtasksIsATaskCountOrAClearError) {
  for (const char* bad : {"abc", "8x", "0", "-2", "99999999999", ""}) {
    SlurmEnv env({"SLURM_JOB_ID=99", "SLURM_JOB_NODELIST=h[1-2]", "SLURM_TASKS_PER_NODE=2(x2)",
                  std::string("SLURM_NTASKS=") + bad});
    Options o;
    Status st = apply_slurm_allocation(o, env.envp());
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << bad;
    EXPECT_EQ(st.message().rfind(std::string("SLURM_NTASKS '") + bad + "' is not a task count", 0),
              0u)
        << st.message();
  }
  SlurmEnv env({"SLURM_JOB_ID=99", "SLURM_JOB_NODELIST=h[1-2]", "SLURM_TASKS_PER_NODE=2(x2)",
                "SLURM_NTASKS=4"});
  Options o;
  ASSERT_TRUE(apply_slurm_allocation(o, env.envp()).is_ok());
  EXPECT_EQ(o.np, 4);
}

}  // namespace
}  // namespace accrun::launcher
