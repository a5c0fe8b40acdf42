// The accrun command line (docs/design.md §9, accrun(1)).
#include <gtest/gtest.h>

#include <initializer_list>

#include "accrun/options.hpp"

namespace accrun::launcher {
namespace {

Result<Options> parse(std::initializer_list<const char*> args) {
  std::vector<const char*> argv = {"accrun"};
  argv.insert(argv.end(), args.begin(), args.end());
  return parse_options(static_cast<int>(argv.size()), argv.data());
}

Options ok(std::initializer_list<const char*> args) {
  auto r = parse(args);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? *r : Options{};
}

std::string err(std::initializer_list<const char*> args) {
  auto r = parse(args);
  EXPECT_FALSE(r.is_ok());
  if (r.is_ok()) return "";
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  return r.status().message();
}

TEST(Options, MpirunsSpellingsOfTheRankCount) {
  EXPECT_EQ(ok({"-np", "3", "p"}).np, 3);
  EXPECT_EQ(ok({"-np=3", "p"}).np, 3);
  EXPECT_EQ(ok({"--np=3", "p"}).np, 3);
}

TEST(OptionsEnvironment, WhatAccrunReadsIsCheckedAndNamed) {
  auto check = [](std::vector<std::string> vars) {
    std::vector<char*> env;
    for (auto& v : vars) env.push_back(v.data());
    env.push_back(nullptr);
    Status s = check_environment(env.data());
    return s ? std::string() : s.message();
  };
  EXPECT_EQ(check({"ACCRUN_LOG=debug", "ACCRUN_AGENT_TIMEOUT=2.5", "OTHER=x"}), "");
  EXPECT_EQ(check({"ACCRUN_LOG="}), "");
  EXPECT_EQ(check({"ACCRUN_LOG=debg"}),
            "environment variable ACCRUN_LOG='debg' is not one of error|warn|info|debug (did you mean 'debug'?)");
  EXPECT_EQ(check({"ACCRUN_LOG=bogus"}), "environment variable ACCRUN_LOG='bogus' is not one of error|warn|info|debug");
  EXPECT_EQ(check({"ACCRUN_AGENT_TIMEOUT=", "ACCRUN_AGENT_TIMEOUT=86399.5"}), "");
  for (const char* t : {"abc", "0", "0.0001", "86400", "0x10", "-1"}) {
    EXPECT_EQ(check({std::string("ACCRUN_AGENT_TIMEOUT=") + t}),
              "environment variable ACCRUN_AGENT_TIMEOUT='" + std::string(t) +
                  "' is not a number of seconds from 0.001 to below 86400 (e.g. 60)")
        << t;
  }
}

TEST(Options, RanksAndProgram) {
  for (auto o : {ok({"-n", "4", "prog"}), ok({"--np", "4", "prog"}), ok({"--np=4", "prog"}),
                 ok({"-np", "4", "prog"}), ok({"-n4", "prog"})}) {
    EXPECT_EQ(o.np, 4);
    EXPECT_EQ(o.command, std::vector<std::string>{"prog"});
  }
}

TEST(Options, ProgramStartsAtFirstNonOptionWord) {
  Options o = ok({"-n", "2", "--tag-output", "./train", "-n", "5", "--lr=3", "--", "x"});
  EXPECT_EQ(o.np, 2);
  EXPECT_TRUE(o.tag_output);
  EXPECT_EQ(o.command, (std::vector<std::string>{"./train", "-n", "5", "--lr=3", "--", "x"}));
  Options d = ok({"-n", "2", "--", "-weird-name", "--help"});
  EXPECT_FALSE(d.help);
  EXPECT_EQ(d.command, (std::vector<std::string>{"-weird-name", "--help"}));
}

TEST(Options, PlacementOptions) {
  Options o = ok({"-n", "8", "--hostfile", "hosts", "--gpus-per-rank", "0.5", "--resources-per-rank",
                  "tpu=4,HPU:2", "-c", "3", "--npernode", "2", "--accelerator-type", "h100", "--pod-blocks",
                  "8", "--pod-level", "zone", "--bind-to", "numa", "--report-bindings", "--visible-devices",
                  "node", "--oversubscribe", "p"});
  EXPECT_EQ(o.hostfile, "hosts");
  ASSERT_EQ(o.per_rank.size(), 3u);
  EXPECT_EQ(o.per_rank[0].first, "GPU");
  EXPECT_EQ(o.per_rank[0].second.units(), 5000);
  EXPECT_EQ(o.per_rank[1].first, "TPU");
  EXPECT_EQ(o.per_rank[1].second, detect::Quantity::whole(4));
  EXPECT_EQ(o.per_rank[2].first, "HPU");
  EXPECT_EQ(o.cpus_per_rank, 3);
  EXPECT_EQ(o.npernode, 2);
  EXPECT_EQ(o.accelerator_type, "h100");
  EXPECT_EQ(o.pod_blocks, 8);
  EXPECT_EQ(o.pod_level, PodLevel::kZone);
  EXPECT_EQ(o.bind_to, BindTo::kNuma);
  EXPECT_TRUE(o.report_bindings);
  EXPECT_EQ(o.visible_devices, Visibility::kNode);
  EXPECT_TRUE(o.oversubscribe);
  Options h = ok({"-H", "a:2,b", "p"});
  EXPECT_EQ(h.host_list, "a:2,b");
}

TEST(Options, HostOverridesEnvironmentAndFailure) {
  Options o = ok({"--num-gpus", "2", "--resources", "TPU=4", "--resources", "neuron_cores:2",
                  "--host-accelerator-type", "TPU-V4", "--topology", "t.xml", "-x", "FOO", "-x", "BAR=a=b",
                  "--wdir", "/tmp", "--output-dir", "out", "--stdin", "none", "--timeout", "1.5",
                  "--kill-grace", "0", "--on-failure", "continue", "p"});
  EXPECT_EQ(o.num_gpus, 2);
  ASSERT_EQ(o.resources.size(), 2u);
  EXPECT_EQ(o.resources[1].first, "neuron_cores");
  EXPECT_EQ(o.host_accelerator_type, "TPU-V4");
  EXPECT_EQ(o.topology, "t.xml");
  ASSERT_EQ(o.exports.size(), 2u);
  EXPECT_EQ(o.exports[0].first, "FOO");
  EXPECT_FALSE(o.exports[0].second.has_value());
  EXPECT_EQ(o.exports[1].second, "a=b");
  EXPECT_EQ(o.wdir, "/tmp");
  EXPECT_EQ(o.output_dir, "out");
  EXPECT_EQ(o.stdin_mode, StdinMode::kNone);
  EXPECT_DOUBLE_EQ(o.timeout_s, 1.5);
  EXPECT_DOUBLE_EQ(o.kill_grace_s, 0);
  EXPECT_EQ(o.on_failure, OnFailure::kContinue);
  EXPECT_EQ(ok({"--stdin", "all", "p"}).stdin_mode, StdinMode::kAll);
  Options s = ok({"-n", "4", "--stdin", "3", "p"});
  EXPECT_EQ(s.stdin_mode, StdinMode::kRank);
  EXPECT_EQ(s.stdin_rank, 3);
}

TEST(Options, ModesWithoutProgram) {
  EXPECT_TRUE(ok({"--help"}).help);
  EXPECT_TRUE(ok({"-h"}).help);
  EXPECT_TRUE(ok({"--version"}).version);
  Options d = ok({"--detect", "--json"});
  EXPECT_TRUE(d.detect);
  EXPECT_TRUE(d.json);
  EXPECT_TRUE(ok({"--dry-run", "-n", "2"}).dry_run);
  EXPECT_TRUE(ok({"--daemon"}).daemon);
}

TEST(Options, UnknownOptionsSuggestTheRightOne) {
  EXPECT_EQ(err({"--gpu-per-rank", "1", "p"}), "unknown option '--gpu-per-rank' (did you mean '--gpus-per-rank'?)");
  EXPECT_EQ(err({"--hostfle", "h", "p"}), "unknown option '--hostfle' (did you mean '--hostfile'?)");
  EXPECT_EQ(err({"--dryrun", "p"}), "unknown option '--dryrun' (did you mean '--dry-run'?)");
  EXPECT_EQ(err({"--zzzzzzzz", "p"}), "unknown option '--zzzzzzzz' (see accrun --help)");
  // Boost's guessing of abbreviations is off: a prefix is an error with a hint.
  EXPECT_EQ(err({"--oversub", "p"}), "unknown option '--oversub' (did you mean '--oversubscribe'?)");
}

// A forgotten value is not filled with the next option: before, the
// --dry-run below became the accelerator type and the program ran.
TEST(Options, AMissingValueIsNotTakenFromTheNextOption) {
  EXPECT_EQ(err({"--host-accelerator-type", "--dry-run", "-n", "1", "p"}),
            "option '--host-accelerator-type': needs a value, and the next word, '--dry-run', is "
            "an option (a value "
            "that begins with '-' is given as --host-accelerator-type=VALUE)");
  EXPECT_NE(err({"--output-dir", "--dry-run", "p"}).find("option '--output-dir': needs a value"),
            std::string::npos);
  EXPECT_NE(err({"-x", "--timeout=3", "p"})
                .find("option '-x': needs a value, and the next word, '--timeout=3'"),
            std::string::npos);
  EXPECT_NE(err({"--hostfile", "-n", "2", "p"}).find("option '--hostfile': needs a value"),
            std::string::npos);
  EXPECT_NE(err({"-H", "-np", "2", "p"}).find("option '-H': needs a value"), std::string::npos);
  // What is not an option is a value, dashes or not.
  EXPECT_EQ(ok({"--launch-agent=--weird", "-n", "1", "p"}).launch_agent, "--weird");
  EXPECT_EQ(ok({"--timeout", "3", "-n", "1", "p"}).timeout_s, 3);
  EXPECT_NE(err({"-n", "-1", "p"}).find("'-1' must be at least 1"), std::string::npos);
  // An '=' with nothing after it is a missing value too.
  EXPECT_EQ(err({"--np=", "p"}), "option '-n/--np': needs a value (see accrun --help)");
  EXPECT_EQ(err({"--hostfile=", "p"}), "option '--hostfile': needs a value (see accrun --help)");
}

// mpirun's one-dash spellings of long options (-host, -npernode) read as a
// short option with a value ("-h ost"): they are named as they were typed.
TEST(Options, ALongOptionWithOneDashIsNamedAsTyped) {
  EXPECT_EQ(
      err({"-host", "a", "p"}),
      "unknown option '-host' (did you mean '--host'? accrun's long options take two dashes)");
  EXPECT_EQ(err({"-npernode", "2", "p"}),
            "unknown option '-npernode' (did you mean '--npernode'? accrun's long options take two "
            "dashes)");
  EXPECT_NE(err({"-hostfile=h", "p"}).find("did you mean '--hostfile'?"), std::string::npos);
  // Names that match no option or every one (empty): refused, not thrown
  // out of the parser (the fuzzer's find: "-=\xf5pne" aborted accrun).
  EXPECT_NE(err({"-=\xf5pne", "p"}).find("unknown option"), std::string::npos);
  EXPECT_NE(err({"-x", "--=", "p"}).find("option '-x': needs a value"), std::string::npos);
  EXPECT_EQ(ok({"-np", "2", "p"}).np, 2);
  EXPECT_EQ(ok({"-n4", "p"}).np, 4);
}

// Each job's directory goes to $TMPDIR: one that is no directory is bad
// input before anything starts, instead of the agent's "cannot create".
TEST(Options, ATmpdirThatIsNoDirectoryIsBadInput) {
  char missing[] = "TMPDIR=/nonexistent/accrun-test";
  char file[] = "TMPDIR=/etc/passwd";
  char fine[] = "TMPDIR=/tmp";
  char empty[] = "TMPDIR=";
  char* env1[] = {missing, nullptr};
  Status s = check_tmpdir(env1);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(
      s.message().find(
          "environment variable TMPDIR='/nonexistent/accrun-test': No such file or directory"),
      std::string::npos)
      << s.message();
  char* env2[] = {file, nullptr};
  EXPECT_NE(check_tmpdir(env2).message().find("not a directory"), std::string::npos);
  char* env3[] = {fine, empty, nullptr};
  EXPECT_TRUE(check_tmpdir(env3).is_ok());
}

TEST(Options, BadValuesNameTheOption) {
  EXPECT_EQ(err({"-n", "four", "p"}), "option '-n/--np': 'four' is not a whole number (e.g. -n 4)");
  EXPECT_EQ(err({"-n", "0", "p"}), "option '-n/--np': '0' must be at least 1 (e.g. -n 4)");
  EXPECT_EQ(err({"-n"}), "option '-n/--np': needs a value (see accrun --help)");
  EXPECT_EQ(err({"-n", "2", "-n", "3", "p"}), "option '-n/--np': given more than once (give it once)");
  EXPECT_EQ(err({"--bind-to", "cores", "p"}),
            "option '--bind-to': 'cores' is not one of none|core|numa|accelerator (did you mean 'core'?)");
  EXPECT_NE(err({"--gpus-per-rank", "1.5", "p"}).find("option '--gpus-per-rank': GPU=1.5"), std::string::npos);
  EXPECT_NE(err({"--gpus-per-rank", "abc", "p"}).find("option '--gpus-per-rank': quantity 'abc' is not a number"),
            std::string::npos);
  EXPECT_NE(err({"--resources-per-rank", "TPU=3", "p"}).find("1, 2, 4 or 8"), std::string::npos);
  EXPECT_NE(err({"--resources-per-rank", "HPU=0.5", "p"}).find("whole"), std::string::npos);
  EXPECT_NE(err({"--resources-per-rank", "GPUS=1", "p"}).find("unknown resource 'GPUS'"), std::string::npos);
  EXPECT_NE(err({"--gpus-per-rank", "1", "--resources-per-rank", "GPU=1", "p"}).find("requested twice"),
            std::string::npos);
  EXPECT_NE(err({"--resources", "GPU=0.5", "p"}).find("whole"), std::string::npos);
  EXPECT_EQ(err({"-x", "1BAD=2", "p"}),
            "option '-x': '1BAD' is not a variable name (write -x VAR or -x VAR=value)");
  EXPECT_NE(err({"--timeout", "soon", "p"}).find("option '--timeout': 'soon' is not a number of seconds"),
            std::string::npos);
  EXPECT_NE(err({"--kill-grace", "-1", "p"}).find("negative"), std::string::npos);
  EXPECT_NE(err({"--stdin", "some", "p"}).find("not none, all or a rank number"), std::string::npos);
  EXPECT_NE(err({"-n", "2", "--stdin", "2", "p"}).find("rank 2 does not exist with -n 2"), std::string::npos);
  EXPECT_NE(err({"--pod-level", "zone", "p"}).find("without --pod-blocks"), std::string::npos);
  EXPECT_NE(err({"--pod-level", "rack", "--pod-blocks", "2", "p"}).find("pod|zone|region"), std::string::npos);
  EXPECT_NE(err({"--on-failure", "ignore", "p"}).find("kill|continue"), std::string::npos);
  EXPECT_NE(err({"--visible-devices", "all", "p"}).find("own|node"), std::string::npos);
  EXPECT_EQ(err({"--mpi", "mpich", "p"}), "option '--mpi': 'mpich' is not one of pmix|pmi|auto");
}

TEST(Options, MpiServers) {
  EXPECT_EQ(ok({"p"}).mpi, MpiMode::kAuto);
  EXPECT_EQ(ok({"--mpi", "pmix", "p"}).mpi, MpiMode::kPmix);
  EXPECT_EQ(ok({"--mpi", "pmi", "p"}).mpi, MpiMode::kPmi);
  EXPECT_EQ(ok({"--mpi", "auto", "p"}).mpi, MpiMode::kAuto);
}

TEST(Options, BadCombinations) {
  EXPECT_EQ(err({"-n", "2"}), "no program to run (usage: accrun [options] -n N program [args...])");
  EXPECT_NE(err({"--json", "p"}).find("--json' works only with --detect or --dry-run"), std::string::npos);
  EXPECT_NE(err({"--hostfile", "h", "-H", "a", "p"}).find("give only one"), std::string::npos);
  EXPECT_NE(err({"--detect", "--dry-run"}).find("separate modes"), std::string::npos);
  // --detect starts nothing: what it would ignore is refused.
  EXPECT_EQ(err({"--detect", "./a.out"}),
            "option '--detect' runs no program ('./a.out' given): it prints the hosts' accelerators; drop the "
            "program, or drop --detect to run it");
  EXPECT_EQ(err({"--detect", "-n", "2"}), "option '--detect' starts no ranks: drop '-n/--np 2'");
  // Before, options that place or start ranks were ignored without a word.
  EXPECT_EQ(err({"--detect", "--gpus-per-rank", "1"}),
            "option '--detect' places and starts no ranks: drop '--gpus-per-rank' (--dry-run shows "
            "what each rank "
            "would get)");
  EXPECT_EQ(err({"--bind-to", "core", "--detect"}),
            "option '--detect' places and starts no ranks: drop '--bind-to' (--dry-run shows what "
            "each rank would "
            "get)");
  EXPECT_EQ(err({"--detect", "-c", "2"}),
            "option '--detect' places and starts no ranks: drop '-c/--cpus-per-rank' (--dry-run "
            "shows what each rank "
            "would get)");
  EXPECT_EQ(err({"--detect", "--oversubscribe"}),
            "option '--detect' places and starts no ranks: drop '--oversubscribe' (--dry-run shows "
            "what each rank "
            "would get)");
  // What detection uses is still taken.
  EXPECT_TRUE(
      ok({"--detect", "--num-gpus", "2", "--resources", "TPU=4", "-H", "a,b", "--json"}).detect);
  EXPECT_NE(err({"--tag-output=yes", "p"}).find("takes no value"), std::string::npos);
}

TEST(Options, UsageMentionsEveryOption) {
  const std::string u = usage();
  for (const char* name :
       {"--np", "--hostfile", "-H", "--gpus-per-rank", "--resources-per-rank", "--cpus-per-rank", "--npernode",
        "--accelerator-type", "--pod-blocks", "--pod-level", "--bind-to", "--report-bindings",
        "--visible-devices", "--num-gpus", "--resources", "--host-accelerator-type", "--oversubscribe", "-x",
        "--wdir", "--tag-output", "--output-dir", "--stdin", "--timeout", "--kill-grace", "--on-failure",
        "--mpi", "--dry-run", "--detect", "--json", "--topology", "--version", "--help"}) {
    EXPECT_NE(u.find(name), std::string::npos) << name;
  }
}

TEST(OptionsLimits, DeviceOverridesAreCapped) {
  // --num-gpus 100000000 once built 10^8 logical GPUs and died of bad_alloc.
  EXPECT_EQ(err({"--num-gpus", "100000000", "p"}),
            "option '--num-gpus': '100000000' is more than 4096 devices of one resource on a host (the limit)");
  EXPECT_EQ(err({"--resources", "TPU=9999999", "p"}),
            "option '--resources': TPU=9999999: more than 4096 devices of one resource on a host (the limit)");
  EXPECT_EQ(ok({"--num-gpus", "4096", "--resources", "TPU=4096", "p"}).num_gpus, 4096);
}

TEST(OptionsLimits, TimesAreFiniteAndBounded) {
  // 1e10 s overflowed the deadline and killed at once; 1e300 meant no grace.
  EXPECT_EQ(err({"--timeout", "1e10", "p"}),
            "option '--timeout': '1e10' is more than 31536000 seconds (one year), the limit");
  EXPECT_EQ(err({"--kill-grace", "1e300", "p"}),
            "option '--kill-grace': '1e300' is more than 86400 seconds (one day), the limit");
  EXPECT_NE(err({"--timeout", "1e400", "p"}).find("more than 31536000 seconds"), std::string::npos);
  // Decimals only: strtod's hexadecimal (16 s), infinity and nan are refused.
  for (const char* no : {"inf", "0x10", "1e", "e5", ".", "1.2.3", "+", "1 "}) {
    EXPECT_EQ(err({"--timeout", no, "p"}),
              "option '--timeout': '" + std::string(no) + "' is not a number of seconds (e.g. 30 or 0.5)")
        << no;
  }
  EXPECT_DOUBLE_EQ(ok({"--timeout", "1e2", "p"}).timeout_s, 100);
  EXPECT_EQ(err({"--timeout", "1e-9", "p"}),
            "option '--timeout': '1e-9' is less than a millisecond (0 means no timeout; give at least 0.001)");
  EXPECT_DOUBLE_EQ(ok({"--timeout", "0.001", "p"}).timeout_s, 0.001);
  EXPECT_EQ(err({"--timeout", "1e-400", "p"}),
            "option '--timeout': '1e-400' is less than a millisecond (give 0 or at least 0.001)");
  EXPECT_EQ(err({"--stdin", "4294967296", "p"}),
            "option '--stdin': '4294967296' is too large (at most 100000000)");
  // Past what a 64-bit number holds, and below the least: named as such,
  // not as "not a whole number".
  EXPECT_EQ(err({"-n", "18446744073709551616", "p"}),
            "option '-n/--np': '18446744073709551616' is too large (at most 100000000)");
  EXPECT_EQ(err({"--fanout", "-3", "p"}),
            "option '--fanout': '-3' must be at least 1 (e.g. --fanout 32)");
  EXPECT_EQ(err({"-n", "+3", "p"}), "option '-n/--np': '+3' is not a whole number (e.g. -n 4)");
  EXPECT_DOUBLE_EQ(ok({"--timeout", ".5", "p"}).timeout_s, 0.5);
  EXPECT_DOUBLE_EQ(ok({"--kill-grace", "2.", "p"}).kill_grace_s, 2);
  EXPECT_NE(err({"--kill-grace", "-inf", "p"}).find("is not a number of seconds"), std::string::npos);
  for (const char* nan : {"nan", "NaN", "-nan"}) {
    EXPECT_NE(err({"--timeout", nan, "p"}).find("is not a number of seconds"), std::string::npos) << nan;
  }
  EXPECT_NE(err({"--timeout", "-5", "p"}).find("negative"), std::string::npos);
  EXPECT_DOUBLE_EQ(ok({"--timeout", "31536000", "--kill-grace", "86400", "p"}).timeout_s, 31536000);
  EXPECT_DOUBLE_EQ(ok({"--kill-grace", "86400", "p"}).kill_grace_s, 86400);
  EXPECT_DOUBLE_EQ(ok({"--timeout", "1e-3", "p"}).timeout_s, 0.001);
}

TEST(OptionsLimits, MessagesNeverCarryRawControlBytes) {
  const std::string m = err({"--timeout", "1\x1b[2J", "p"});
  EXPECT_EQ(m, "option '--timeout': '1\\x1b[2J' is not a number of seconds (e.g. 30 or 0.5)");
}

}  // namespace
}  // namespace accrun::launcher
