// The launch benchmark (docs/design.md §8): `accrun -n N /bin/true` against
// `mpirun --oversubscribe -n N /bin/true` and a bare spawn-all-then-wait
// loop, N = 1, 8, 32, 64, interleaved in one run; then an Open MPI hello at
// N = 8 and 32 under both launchers, and an Open MPI job of 2 ranks that
// MPI_Comm_spawns 2 more and talks to them over the intercommunicator; then
// libaccrun's examples at N = 64: hello (init and finalize) against
// allreduce (the same plus a store group's rendezvous, one allreduce and
// its destruction).  A run past the limit is killed and counted as a hang,
// apart from the medians.
//
//   launch_bench [--reps R] [--limit S] [--hello PATH] [--spawn PATH] [--accrun PATH]
//                [--examples HELLO ALLREDUCE]
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

// Runs argv to completion with output to /dev/null; returns seconds, or a
// negative number when it ran past `limit` and was killed.
double time_command(const std::vector<std::string>& args, double limit) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  posix_spawnattr_t at;
  posix_spawnattr_init(&at);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&at, 0);
  auto t0 = Clock::now();
  pid_t pid;
  if (posix_spawnp(&pid, argv[0], &fa, &at, argv.data(), environ) != 0) return -2;
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  for (;;) {
    int st;
    pid_t r = waitpid(pid, &st, WNOHANG);
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (r == pid) return s;
    if (s > limit) {
      kill(-pid, SIGKILL);
      waitpid(pid, &st, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// Spawns n /bin/true, then waits for all of them.
double bare_loop(int n) {
  auto t0 = Clock::now();
  char* argv[] = {const_cast<char*>("/bin/true"), nullptr};
  for (int i = 0; i < n; ++i) {
    pid_t pid;
    posix_spawn(&pid, "/bin/true", nullptr, nullptr, argv, environ);
  }
  for (int i = 0; i < n; ++i) wait(nullptr);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

struct Series {
  std::vector<double> times;
  int hangs = 0;
  void add(double t) {
    if (t < 0) ++hangs;
    else times.push_back(t);
  }
};

// Whether `name` is an executable on the PATH.
bool on_path(const char* name) {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "";
  for (std::size_t at = 0; at <= dirs.size();) {
    std::size_t end = dirs.find(':', at);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(at, end - at);
    if (!dir.empty() && access((dir + "/" + name).c_str(), X_OK) == 0) return true;
    at = end + 1;
  }
  return false;
}

// A median in ms, or "-" for a series never run.
std::string ms_or_dash(const Series& s) {
  if (s.times.empty() && s.hangs == 0) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", median(s.times) * 1e3);
  return b;
}

// mpirun's median over accrun's, or "-" without mpirun.
std::string ratio_or_dash(const Series& m, const Series& a) {
  const double am = median(a.times), mm = median(m.times);
  if (m.times.empty() || am <= 0) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.2fx", mm / am);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 20;
  double limit = 10;
  std::string accrun = ACCRUN_BENCH_EXE;
  std::string hello = ACCRUN_BENCH_HELLO;
  std::string spawn = ACCRUN_BENCH_SPAWN;
  std::string ex_hello = ACCRUN_BENCH_EX_HELLO;
  std::string ex_allreduce = ACCRUN_BENCH_EX_ALLREDUCE;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--examples") && i + 2 < argc) {
      ex_hello = argv[i + 1];
      ex_allreduce = argv[++i + 1];
    } else if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--limit")) limit = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--hello")) hello = argv[i + 1];
    else if (!std::strcmp(argv[i], "--spawn")) spawn = argv[i + 1];
    else if (!std::strcmp(argv[i], "--accrun")) accrun = argv[i + 1];
  }
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  std::map<std::pair<std::string, int>, Series> res;
  const int sizes[] = {1, 8, 32, 64};
  // Without Open MPI its columns say "-" (a failed exec has a time too).
  const bool mpirun = on_path("mpirun");
  std::printf("launch of /bin/true: %d interleaved rounds, hang limit %.0f s%s\n", reps, limit,
              mpirun ? "" : " (no mpirun on the PATH: its columns are left empty)");
  for (int r = 0; r < reps; ++r) {
    for (int n : sizes) {
      std::string ns = std::to_string(n);
      res[{"accrun", n}].add(time_command({accrun, "-n", ns, "/bin/true"}, limit));
      if (mpirun) res[{"mpirun", n}].add(time_command({"mpirun", "--oversubscribe", "-n", ns, "/bin/true"}, limit));
      res[{"bare", n}].add(bare_loop(n));
    }
  }
  std::printf("%4s %12s %12s %12s %8s %12s %14s\n", "N", "accrun ms", "mpirun ms", "bare ms", "hangs", "mpirun/acc",
              "accrun/bare");
  for (int n : sizes) {
    auto& a = res[{"accrun", n}];
    auto& m = res[{"mpirun", n}];
    auto& b = res[{"bare", n}];
    double am = median(a.times), bm = median(b.times);
    std::printf("%4d %12.1f %12s %12.1f %3d/%-4d %12s %13.2fx\n", n, am * 1e3, ms_or_dash(m).c_str(), bm * 1e3,
                a.hangs, m.hangs, ratio_or_dash(m, a).c_str(), bm > 0 ? am / bm : 0);
  }
  std::printf("(hangs: accrun/mpirun runs killed after %.0f s, left out of the medians)\n", limit);

  if (!hello.empty() && access(hello.c_str(), X_OK) == 0) {
    int hreps = std::max(3, reps / 4);
    std::printf("\nOpen MPI hello (MPI_Init+MPI_Finalize...): %d interleaved rounds\n", hreps);
    for (int r = 0; r < hreps; ++r) {
      for (int n : {8, 32}) {
        std::string ns = std::to_string(n);
        res[{"accrun-hello", n}].add(time_command({accrun, "-n", ns, hello}, 60));
        if (mpirun) res[{"mpirun-hello", n}].add(time_command({"mpirun", "--oversubscribe", "-n", ns, hello}, 60));
      }
    }
    std::printf("%4s %12s %12s %8s %12s\n", "N", "accrun ms", "mpirun ms", "hangs", "mpirun/acc");
    for (int n : {8, 32}) {
      auto& a = res[{"accrun-hello", n}];
      auto& m = res[{"mpirun-hello", n}];
      std::printf("%4d %12s %12s %3d/%-4d %12s\n", n, ms_or_dash(a).c_str(), ms_or_dash(m).c_str(), a.hangs, m.hangs,
                  ratio_or_dash(m, a).c_str());
    }
  }

  if (!spawn.empty() && access(spawn.c_str(), X_OK) == 0) {
    int sreps = std::max(3, reps / 4);
    std::printf("\nMPI_Comm_spawn: 2 ranks spawn 2, talk, merge, allreduce: %d interleaved rounds\n", sreps);
    Series& a = res[{"accrun-spawn", 2}];
    Series& m = res[{"mpirun-spawn", 2}];
    for (int r = 0; r < sreps; ++r) {
      a.add(time_command({accrun, "-n", "2", spawn, "2", "talk"}, 60));
      if (mpirun) m.add(time_command({"mpirun", "--oversubscribe", "-n", "2", spawn, "2", "talk"}, 60));
    }
    std::printf("%12s %12s %8s %12s\n", "accrun ms", "mpirun ms", "hangs", "mpirun/acc");
    std::printf("%12s %12s %3d/%-4d %12s\n", ms_or_dash(a).c_str(), ms_or_dash(m).c_str(), a.hangs, m.hangs,
                ratio_or_dash(m, a).c_str());
  }

  // A store group at -n 64 should cost little more than the job itself:
  // its rendezvous is one gathering lookup per member, not one per pair.
  if (access(ex_hello.c_str(), X_OK) == 0 && access(ex_allreduce.c_str(), X_OK) == 0) {
    int ereps = std::max(3, reps / 2);
    std::printf("\nexamples/hello against examples/allreduce, -n 64: %d interleaved rounds\n", ereps);
    Series& h = res[{"ex-hello", 64}];
    Series& a = res[{"ex-allreduce", 64}];
    for (int r = 0; r < ereps; ++r) {
      h.add(time_command({accrun, "-n", "64", ex_hello}, 60));
      a.add(time_command({accrun, "-n", "64", ex_allreduce}, 60));
    }
    double hm = median(h.times), am = median(a.times);
    std::printf("%12s %14s %8s %16s\n", "hello ms", "allreduce ms", "hangs", "allreduce/hello");
    std::printf("%12.1f %14.1f %3d/%-4d %15.2fx\n", hm * 1e3, am * 1e3, h.hangs, a.hangs, hm > 0 ? am / hm : 0);
  }
  return 0;
}
