// accrun on one host with real processes: the ranks' environment, the PMIx
// server, Open MPI without mpirun, exit statuses, signals, the janitor and
// output integrity (accrun(1) EXECUTION OPTIONS and EXIT STATUS, accrun(7)).
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

// A running accrun with its stdout and stderr captured.
class Proc {
 public:
  // env: NAME=value to add or override; "NAME" alone removes it.
  // in_child: runs in the child just before exec (after fds 0-2 are set up),
  // to close or redirect them.
  Proc(const std::vector<std::string>& args, const std::vector<std::string>& env = {},
       const std::string* input = nullptr, const std::function<void()>& in_child = nullptr) {
    int out[2], err[2], in[2];
    EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
    EXPECT_EQ(pipe2(err, O_CLOEXEC), 0);
    EXPECT_EQ(pipe2(in, O_CLOEXEC), 0);
    std::map<std::string, std::string> e;
    for (char** p = environ; *p; ++p) {
      const char* eq = std::strchr(*p, '=');
      if (eq) e[std::string(*p, static_cast<size_t>(eq - *p))] = eq + 1;
    }
    for (const auto& kv : env) {
      auto eq = kv.find('=');
      if (eq == std::string::npos) e.erase(kv);
      else e[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    std::vector<std::string> es;
    for (auto& [k, v] : e) es.push_back(k + "=" + v);
    std::vector<char*> envp, argv;
    for (auto& s : es) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> a = args;
    a.insert(a.begin(), ACCRUN_EXE);
    for (auto& s : a) argv.push_back(s.data());
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      dup2(err[1], 2);
      if (in_child) in_child();
      execve(ACCRUN_EXE, argv.data(), envp.data());
      _exit(99);
    }
    close(out[1]);
    close(err[1]);
    close(in[0]);
    out_fd_ = out[0];
    err_fd_ = err[0];
    if (input) {
      size_t off = 0;
      while (off < input->size()) {
        ssize_t w = write(in[1], input->data() + off, input->size() - off);
        if (w <= 0) break;
        off += static_cast<size_t>(w);
      }
    }
    close(in[1]);
  }
  ~Proc() {
    if (pid_ > 0 && status_ < 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) close(out_fd_);
    if (err_fd_ >= 0) close(err_fd_);
  }
  pid_t pid() const { return pid_; }
  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }
  // Stops reading accrun's stdout, as `| head -1` does once it has its line.
  void close_out() {
    if (out_fd_ >= 0) close(out_fd_);
    out_fd_ = -1;
  }

  // Reads output until `done(out)` holds or the deadline passes.
  bool read_until(const std::function<bool(const std::string&)>& done, double seconds) {
    auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int>(seconds * 1000));
    while (!done(out_)) {
      if (Clock::now() >= deadline) return false;
      if (!pump(50)) {
        if (out_fd_ < 0 && err_fd_ < 0) return done(out_);
      }
    }
    return true;
  }
  // Waits (bounded) for accrun to exit; returns its status (128+sig if killed).
  int wait(double seconds = 30) {
    auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int>(seconds * 1000));
    while (out_fd_ >= 0 || err_fd_ >= 0) {
      if (Clock::now() >= deadline) break;
      pump(100);
    }
    while (status_ < 0) {
      int st = 0;
      pid_t r = waitpid(pid_, &st, WNOHANG);
      if (r == pid_) {
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        break;
      }
      if (Clock::now() >= deadline) {
        ADD_FAILURE() << "accrun did not exit within " << seconds << " s; stderr:\n" << err_;
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
        status_ = 999;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return status_;
  }

 private:
  bool pump(int ms) {
    pollfd p[2];
    int n = 0;
    if (out_fd_ >= 0) p[n++] = {out_fd_, POLLIN, 0};
    if (err_fd_ >= 0) p[n++] = {err_fd_, POLLIN, 0};
    if (n == 0) return false;
    if (poll(p, n, ms) <= 0) return true;
    for (int i = 0; i < n; ++i) {
      if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[65536];
      ssize_t r = read(p[i].fd, buf, sizeof buf);
      bool is_out = p[i].fd == out_fd_;
      if (r > 0) {
        (is_out ? out_ : err_).append(buf, static_cast<size_t>(r));
      } else {
        close(p[i].fd);
        (is_out ? out_fd_ : err_fd_) = -1;
      }
    }
    return true;
  }

  pid_t pid_ = -1;
  int out_fd_ = -1, err_fd_ = -1;
  int status_ = -1;
  std::string out_, err_;
};

struct RunResult {
  int status;
  std::string out, err;
};

RunResult run(const std::vector<std::string>& args, const std::vector<std::string>& env = {},
        double seconds = 30, const std::string* input = nullptr) {
  Proc p(args, env, input);
  int st = p.wait(seconds);
  return {st, p.out(), p.err()};
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

bool exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

// Whether `pid` is alive (a zombie counts as dead: it cannot run).
bool alive(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(f, stat)) return false;
  auto rp = stat.rfind(')');
  return rp != std::string::npos && rp + 2 < stat.size() && stat[rp + 2] != 'Z' && stat[rp + 2] != 'X';
}

std::string tmpdir() {
  const char* t = std::getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

// The job's directories, from a job id a rank printed.
void expect_no_job_dirs(const std::string& jobid) {
  ASSERT_FALSE(jobid.empty());
  std::string uid = std::to_string(getuid());
  EXPECT_FALSE(exists("/dev/shm/accrun." + uid + "." + jobid)) << jobid;
  EXPECT_FALSE(exists(tmpdir() + "/accrun." + uid + "." + jobid)) << jobid;
}

// Waits (bounded) until `path` holds a line; returns it ("" on timeout).
std::string wait_for_line(const std::string& path, double seconds) {
  auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int>(seconds * 1000));
  for (;;) {
    std::ifstream f(path);
    std::string line;
    if (std::getline(f, line) && f.good()) return line;  // the newline is there: complete
    if (Clock::now() >= deadline) return "";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string first_match(const std::string& s, const std::string& re) {
  std::smatch m;
  if (std::regex_search(s, m, std::regex(re)) && m.size() > 1) return m[1];
  return "";
}

// ------------------------------------------------------------ environment

class EnvContract : public ::testing::TestWithParam<int> {};

TEST_P(EnvContract, EveryRankGetsTheContract) {
  int n = GetParam();
  RunResult r = run({"-n", std::to_string(n), "sh", "-c",
               "echo \"R=$ACCRUN_RANK S=$ACCRUN_SIZE L=$ACCRUN_LOCAL_RANK LS=$ACCRUN_LOCAL_SIZE P=$PMIX_RANK "
               "NS=$PMIX_NAMESPACE J=$ACCRUN_JOB_ID D=$ACCRUN_SHM_DIR SCHIZO=$OMPI_MCA_schizo "
               "VADER=$OMPI_MCA_btl_vader_backing_directory OVER=${OMPI_MCA_mpi_oversubscribe:-0} "
               "AO=$ACCRUN_OVERSUBSCRIBED MODE=$(stat -c %a $ACCRUN_SHM_DIR)\""});
  ASSERT_EQ(r.status, 0) << r.err;
  auto lines = lines_of(r.out);
  ASSERT_EQ(static_cast<int>(lines.size()), n) << r.out;
  std::set<int> ranks;
  std::string jobid;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  for (const auto& l : lines) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(l, m, std::regex("^R=(\\d+) S=(\\d+) L=(\\d+) LS=(\\d+) P=(\\d+) NS=(\\S+) J=([0-9a-f]{12}) "
                                                   "D=(\\S+) SCHIZO=\\^orte VADER=(\\S+) OVER=([01]) AO=([01]) MODE=700$")))
        << l;
    int rank = std::stoi(m[1]);
    ranks.insert(rank);
    EXPECT_EQ(std::stoi(m[2]), n);
    EXPECT_EQ(std::stoi(m[3]), rank);  // one host: local rank = rank
    EXPECT_EQ(std::stoi(m[4]), n);
    EXPECT_EQ(std::stoi(m[5]), rank);  // the PMIx rank agrees
    EXPECT_EQ(m[6].str(), "accrun." + m[7].str());
    if (jobid.empty()) jobid = m[7];
    EXPECT_EQ(m[7].str(), jobid);  // one job id for the whole job
    EXPECT_EQ(m[8].str(), "/dev/shm/accrun." + std::to_string(getuid()) + "." + jobid);
    EXPECT_EQ(m[9].str(), m[8].str() + "/ompi");
    EXPECT_EQ(m[10].str(), n > cpus ? "1" : "0");
  }
  EXPECT_EQ(static_cast<int>(ranks.size()), n);
  expect_no_job_dirs(jobid);
}

INSTANTIATE_TEST_SUITE_P(Sizes, EnvContract, ::testing::Values(1, 4, 32));

TEST(Launcher, ExportsWdirAndInheritedLauncherVariables) {
  std::string dir = tmpdir() + "/accrun-launcher-wdir-" + std::to_string(getpid());
  mkdir(dir.c_str(), 0755);
  RunResult r = run({"-n", "2", "-x", "NEWVAR=hello world", "-x", "KEEPME", "-x", "OMPI_MCA_pml=ob1", "-x",
                     "PMI_DEBUG=1", "--wdir", dir, "sh", "-c",
                     "echo \"$ACCRUN_RANK cwd=$(pwd) new=$NEWVAR keep=$KEEPME pmix=${PMIX_FOO-unset} "
                     "ompi=${OMPI_FOO-unset} slurm=${SLURM_STEP_ID-unset} pml=$OMPI_MCA_pml plain=$PLAIN "
                     "pmi_port=${PMI_PORT-unset} pmi_debug=${PMI_DEBUG-unset}\""},
                    {"PMIX_FOO=1", "OMPI_FOO=2", "SLURM_STEP_ID=3", "KEEPME=kept", "PLAIN=yes", "PMI_PORT=head:5000"});
  rmdir(dir.c_str());
  ASSERT_EQ(r.status, 0) << r.err;
  auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  for (const auto& l : lines)
    EXPECT_NE(l.find("cwd=" + dir + " new=hello world keep=kept pmix=unset ompi=unset slurm=unset pml=ob1 plain=yes "
                     "pmi_port=unset pmi_debug=1"),
              std::string::npos)
        << l;
}

// Open MPI's and PMIx's settings in accrun's environment reach the ranks
// as under mpirun, a -x value wins over one; the other variables of those
// prefixes stay out.  Inside another launcher's job (a PMIx, PMI or Open
// MPI rank's variables set) none is passed: they may be that launcher's.
TEST(Launcher, OpenMpiSettingsReachTheRanksOutsideAnotherLaunchersJob) {
  const std::string show =
      "echo \"btl=${OMPI_MCA_btl-unset} pml=${OMPI_MCA_pml-unset} foo=${OMPI_FOO-unset} "
      "pmix=${PMIX_MCA_accrun_probe-unset} pfoo=${PMIX_FOO-unset}\"";
  RunResult r = run({"-n", "2", "-x", "OMPI_MCA_pml=ob1", "sh", "-c", show},
                    {"OMPI_MCA_btl=self,vader", "OMPI_MCA_pml=ucx", "OMPI_FOO=2",
                     "PMIX_MCA_accrun_probe=p", "PMIX_FOO=3"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out,
            "btl=self,vader pml=ob1 foo=unset pmix=p pfoo=unset\n"
            "btl=self,vader pml=ob1 foo=unset pmix=p pfoo=unset\n");
  RunResult dry = run({"--dry-run", "--json", "-n", "1", "true"}, {"OMPI_MCA_btl=self,vader"});
  ASSERT_EQ(dry.status, 0) << dry.err;
  EXPECT_NE(dry.out.find("\"OMPI_MCA_btl\": \"self,vader\""), std::string::npos) << dry.out;
  for (const char* mark : {"PMIX_NAMESPACE=prterun-h-1@1", "PMIX_RANK=0", "PMI_FD=5", "OMPI_COMM_WORLD_SIZE=4"}) {
    RunResult in = run({"-n", "1", "-x", "OMPI_MCA_pml=ob1", "sh", "-c", show},
                       {mark, "OMPI_MCA_btl=self,vader", "OMPI_FOO=2", "PMIX_MCA_accrun_probe=p"});
    ASSERT_EQ(in.status, 0) << mark << ": " << in.err;
    EXPECT_EQ(in.out, "btl=unset pml=ob1 foo=unset pmix=unset pfoo=unset\n") << mark;
  }
}

// A relative --wdir with a relative program: the program is looked up from
// the directory once (not from the directory inside it, where a decoy waits).
TEST(Launcher, ARelativeProgramUnderARelativeWdirIsTheOneInIt) {
  const std::string base = "accrun-wdir-rel-" + std::to_string(getpid());
  ASSERT_TRUE(std::filesystem::create_directories(base + "/d/d"));
  auto script = [](const std::string& path, const std::string& says) {
    std::ofstream(path) << "#!/bin/sh\necho " << says << "\n";
    chmod(path.c_str(), 0755);
  };
  script(base + "/d/tell", "right");
  script(base + "/d/d/tell", "decoy");
  RunResult r = run({"-n", "2", "--wdir", base + "/d", "./tell"});
  RunResult path = run({"--wdir", base, "-x", "PATH=d:/usr/bin:/bin", "tell"});
  std::filesystem::remove_all(base);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "right\nright\n") << r.err;
  EXPECT_EQ(path.status, 0) << path.err;
  EXPECT_EQ(path.out, "right\n") << path.err;
}

// A --wdir that is missing or not a directory is bad input: status 2, one
// line, nothing started (not a failure of every rank after the start).
TEST(Launcher, AWdirThatCannotBeUsedIsBadInput) {
  const std::string base = tmpdir() + "/accrun-wdir-bad-" + std::to_string(getpid());
  const std::string marker = base + ".started";
  ASSERT_TRUE(std::filesystem::create_directories(base));
  std::ofstream(base + "/file") << "x";
  for (const auto& [wdir, says] : std::vector<std::pair<std::string, std::string>>{
           {base + "/missing", "no such directory"}, {base + "/file", "not a directory"}}) {
    RunResult r = run({"-n", "2", "--wdir", wdir, "sh", "-c", "touch " + marker});
    EXPECT_EQ(r.status, 2) << wdir << ": " << r.err;
    EXPECT_NE(r.err.find("--wdir " + wdir + ": " + says), std::string::npos) << r.err;
    EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
    EXPECT_FALSE(exists(marker)) << wdir;
  }
  std::filesystem::remove_all(base);
}

// A --wdir this user may not enter: the same, found before the start (it
// was exit 1 after every rank had failed to change into it).
TEST(Launcher, AWdirThisUserCannotEnterIsBadInput) {
  const std::string base = tmpdir() + "/accrun-wdir-closed-" + std::to_string(getpid());
  ASSERT_TRUE(std::filesystem::create_directories(base + "/closed"));
  chmod(base.c_str(), 0755);
  chmod((base + "/closed").c_str(), 0);
  // Root enters any directory: as root, accrun runs without the
  // capabilities that let it (setpriv, util-linux).
  std::string cmd = std::string(ACCRUN_EXE) + " -n 2 --wdir " + base + "/closed /bin/true 2>&1";
  if (geteuid() == 0) cmd = "setpriv --bounding-set -dac_override,-dac_read_search " + cmd;
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, p) != nullptr) out += buf;
  const int st = pclose(p);
  chmod((base + "/closed").c_str(), 0755);
  std::filesystem::remove_all(base);
  EXPECT_EQ(WEXITSTATUS(st), 2) << out;
  EXPECT_NE(out.find("--wdir " + base + "/closed: cannot enter it (Permission denied"), std::string::npos) << out;
  EXPECT_EQ(lines_of(out).size(), 1u) << out;
}

// An enclosing launcher's PMI variables stay out under --mpi pmix too,
// where accrun sets none of its own.
TEST(Launcher, InheritedPmiVariablesStayOutUnderPmix) {
  RunResult r = run({"-n", "1", "--mpi", "pmix", "sh", "-c", "env | grep '^PMI_' | sort | tr '\\n' ' '; echo end"},
                    {"PMI_PORT=head:5000", "PMI_ID=3", "PMI_SIZE=8"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "end\n");
}

// OMPI_MCA_mpi_oversubscribe goes to the ranks of an oversubscribed host
// only (accrun(7)), as ACCRUN_OVERSUBSCRIBED does, not to every rank of a
// job where one host is: here host a holds 2 ranks in 1 slot, b 2 in 2.
TEST(Launcher, OpenMpisOversubscribeIsSetPerHost) {
  RunResult dry =
      run({"--dry-run", "--json", "-H", "a:1,b:2", "--oversubscribe", "-n", "4", "true"});
  ASSERT_EQ(dry.status, 0) << dry.err;
  std::regex rank_re("\\{\"rank\": (\\d+).*?\"env\": \\{(.*?)\\}\\}");
  int seen = 0;
  for (auto it = std::sregex_iterator(dry.out.begin(), dry.out.end(), rank_re);
       it != std::sregex_iterator(); ++it) {
    const std::string env = (*it)[2];
    const std::string host = first_match(env, "\"ACCRUN_HOST\": \"([^\"]*)\"");
    const std::string over = first_match(env, "\"ACCRUN_OVERSUBSCRIBED\": \"([01])\"");
    const bool ompi = env.find("\"OMPI_MCA_mpi_oversubscribe\": \"1\"") != std::string::npos;
    EXPECT_EQ(over, host == "a" ? "1" : "0") << "rank " << (*it)[1] << " on " << host;
    EXPECT_EQ(ompi, host == "a") << "rank " << (*it)[1] << " on " << host;
    ++seen;
  }
  EXPECT_EQ(seen, 4) << dry.out;
}

// --dry-run --json's env is what a launch really adds to each rank's
// environment: every value the same, "(at launch)" where only a launch
// knows it, and nothing the launch adds left out but the PMIx library's own
// connection variables (accrun(1) --dry-run).
TEST(Launcher, DryRunEnvIsWhatTheRanksGet) {
  RunResult dry = run({"--dry-run", "--json", "-n", "3", "true"});
  ASSERT_EQ(dry.status, 0) << dry.err;
  std::vector<std::map<std::string, std::string>> planned;
  std::regex rank_re("\\{\"rank\": (\\d+).*?\"env\": \\{(.*?)\\}\\}");
  std::regex kv_re("\"([^\"]*)\": \"([^\"]*)\"");
  for (auto it = std::sregex_iterator(dry.out.begin(), dry.out.end(), rank_re); it != std::sregex_iterator(); ++it) {
    std::map<std::string, std::string> env;
    std::string body = (*it)[2];
    for (auto kv = std::sregex_iterator(body.begin(), body.end(), kv_re); kv != std::sregex_iterator(); ++kv)
      env[(*kv)[1]] = (*kv)[2];
    planned.push_back(env);
  }
  ASSERT_EQ(planned.size(), 3u) << dry.out;

  std::string dir = tmpdir() + "/accrun-envtest." + std::to_string(getpid());
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  RunResult real = run({"-n", "3", "sh", "-c", "env -0 > " + dir + "/env.$ACCRUN_RANK"});
  ASSERT_EQ(real.status, 0) << real.err;
  std::set<std::string> mine;
  for (char** e = environ; *e != nullptr; ++e) mine.insert(std::string(*e, std::strcspn(*e, "=")));
  for (int r = 0; r < 3; ++r) {
    std::ifstream f(dir + "/env." + std::to_string(r));
    std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::map<std::string, std::string> got;
    for (size_t pos = 0; pos < all.size();) {
      size_t end = all.find('\0', pos);
      if (end == std::string::npos) end = all.size();
      std::string kv = all.substr(pos, end - pos);
      size_t eq = kv.find('=');
      if (eq != std::string::npos) got[kv.substr(0, eq)] = kv.substr(eq + 1);
      pos = end + 1;
    }
    const std::string jobid = got["ACCRUN_JOB_ID"];
    ASSERT_FALSE(jobid.empty()) << "rank " << r;
    for (const auto& [k, v] : planned[static_cast<size_t>(r)]) {
      ASSERT_TRUE(got.count(k)) << "rank " << r << ": the dry run shows " << k << ", the rank did not get it";
      if (v.find("(at launch)") == std::string::npos) {
        EXPECT_EQ(got[k], v) << "rank " << r << ": " << k;
      } else if (k != "MASTER_PORT" && k != "PMI_FD" && k != "ACCRUN_SHM_DIR" && k != "OMPI_MCA_btl_vader_backing_directory") {
        std::string want = v;
        want.replace(want.find("(at launch)"), 11, jobid);
        EXPECT_EQ(got[k], want) << "rank " << r << ": " << k;
      }
    }
    for (const auto& [k, v] : got) {
      if (mine.count(k) || planned[static_cast<size_t>(r)].count(k) || k.rfind("PMIX_", 0) == 0 || k == "PWD" ||
          k == "SHLVL" || k == "_")
        continue;
      ADD_FAILURE() << "rank " << r << " got " << k << "=" << v << ", which the dry run does not show";
    }
  }
  std::remove((dir + "/env.0").c_str());
  std::remove((dir + "/env.1").c_str());
  std::remove((dir + "/env.2").c_str());
  rmdir(dir.c_str());
}

// torchrun keeps a MASTER_PORT the user set; so does accrun.
TEST(Launcher, TheUsersMasterPortIsKept) {
  auto r = run({"-n", "2", "sh", "-c", "echo port $MASTER_PORT"}, {"MASTER_PORT=23456"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "port 23456\nport 23456\n");
  r = run({"-n", "2", "sh", "-c", "echo port $MASTER_PORT"}, {"MASTER_PORT"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("port "), std::string::npos);
  EXPECT_EQ(r.out.find("port 23456"), std::string::npos) << r.out;
}

TEST(Launcher, FractionalGpusArePackedIntoVisibleDevices) {
  RunResult r = run({"-n", "4", "--num-gpus", "2", "--gpus-per-rank", "0.5", "sh", "-c",
               "echo \"$ACCRUN_RANK $CUDA_VISIBLE_DEVICES $ACCRUN_GPU_IDS\""},
              {"ACCRUN_NVML_LIBRARY=", "CUDA_VISIBLE_DEVICES"});
  ASSERT_EQ(r.status, 0) << r.err;
  std::map<int, std::string> got;
  for (const auto& l : lines_of(r.out)) {
    std::istringstream in(l);
    int rank;
    std::string cvd, ids;
    in >> rank >> cvd >> ids;
    got[rank] = cvd + "/" + ids;
  }
  std::map<int, std::string> want{{0, "0/0"}, {1, "0/0"}, {2, "1/1"}, {3, "1/1"}};
  EXPECT_EQ(got, want) << r.out << r.err;
}

TEST(Launcher, RanksAreBoundWhereThePlanSays) {
  RunResult r = run({"-n", "2", "--bind-to", "core", "--report-bindings", "sh", "-c",
               "echo \"$ACCRUN_RANK $(grep Cpus_allowed_list /proc/self/status | cut -f2)\""});
  ASSERT_EQ(r.status, 0) << r.err;
  for (const auto& l : lines_of(r.out)) {
    std::istringstream in(l);
    int rank;
    std::string allowed;
    in >> rank >> allowed;
    std::string reported = first_match(r.err, "rank " + std::to_string(rank) + " on host \\S+ bound to cpus (\\S+)");
    if (reported.empty()) {
      EXPECT_NE(r.err.find("rank " + std::to_string(rank)), std::string::npos) << r.err;
      continue;  // the plan left it unbound (no topology): nothing to compare
    }
    EXPECT_EQ(allowed, reported) << r.err;
  }
  // Devices too.
  r = run({"-n", "2", "--num-gpus", "2", "--gpus-per-rank", "1", "--report-bindings", "true"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(first_match(r.err, "rank 1 on host \\S+ (?:bound to cpus \\S+|not bound) with GPU (\\d+)\n"), "") << r.err;
  EXPECT_NE(r.err.find("rank 0 on host"), std::string::npos) << r.err;
  r = run({"-n", "1", "--report-bindings", "true"});
  EXPECT_NE(r.err.find(" with no devices"), std::string::npos) << r.err;
}

// ------------------------------------------------------------- PMIx / MPI

TEST(Launcher, PmixClientExchangesDataAndUsesTheNameDirectory) {
  RunResult r = run({"-n", "4", PMIX_CLIENT_EXE});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 4u) << r.out;
  int won = 0;
  for (const auto& l : lines) {
    EXPECT_TRUE(std::regex_search(l, std::regex("^OK rank=\\d size=4 local_rank=\\d local_size=4 claim=(won|lost)$")))
        << l;
    won += l.find("claim=won") != std::string::npos;
  }
  EXPECT_EQ(won, 1);  // publish is create-if-absent
}

// Four agents on this machine under other host names, started as a chain
// (--fanout 1): whole-job fences gather along it, each agent sending its own
// host's contribution and those below it up once (accrun(7), "SEVERAL
// HOSTS"), and the answer comes back down to every host.
TEST(Launcher, WholeJobFencesTravelTheLaunchTree) {
  RunResult r = run({"-n", "8", "-H", "ta:2,tb:2,tc:2,td:2", "--fanout", "1", "--launch-agent", "{cmd}", PMIX_CLIENT_EXE},
                    {"ACCRUN_LOG=debug"}, 60);
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  int ok = 0;
  for (const auto& l : lines_of(r.out)) ok += std::regex_search(l, std::regex("^OK rank=\\d size=8 local_rank=\\d local_size=2 "));
  EXPECT_EQ(ok, 8) << r.out;
  EXPECT_NE(r.err.find("whole-job fences go along the launch tree (fanout 1)"), std::string::npos) << r.err;
  // td sends its own part to tc, ..., ta sends all four to the controller.
  for (int k = 1; k <= 4; ++k)
    EXPECT_NE(r.err.find("fence *: " + std::to_string(k) + " host(s) from here and below go up"), std::string::npos)
        << k << "\n" << r.err;
  EXPECT_EQ(r.err.find("fence *: 5 host"), std::string::npos) << r.err;
#ifdef MPI_HELLO_EXE
  // Open MPI's own fences (MPI_Init's modex, MPI_Finalize) take the same way.
  r = run({"-n", "8", "-H", "ta:2,tb:2,tc:2,td:2", "--fanout", "1", "--launch-agent", "{cmd}", MPI_HELLO_EXE}, {}, 60);
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  ok = 0;
  for (const auto& l : lines_of(r.out)) ok += l.find("size=8 shared=2 sum=36 expect=36") != std::string::npos;
  EXPECT_EQ(ok, 8) << r.out << r.err;
#endif
}

// A rank that ends without initialising PMIx while another initialises
// holds up every fence of the job's; it is a failure (status 1), on one host
// (its agent judges it) and across hosts (the controller does), whichever
// comes first: the exit or the other's initialisation.
TEST(Launcher, ARankEndingBeforeInitWhileAnotherInitialisesFailsTheJob) {
  const std::string early = "[ $ACCRUN_RANK = 0 ] && exit 0; exec \"$0\" fence-after=0";
  const std::string late = "[ $ACCRUN_RANK = 0 ] && { sleep 1; exit 0; }; exec \"$0\" fence-after=0";
  for (const auto& hosts : {std::vector<std::string>{}, std::vector<std::string>{"-H", "ta:1,tb:2", "--launch-agent", "{cmd}"}}) {
    for (const auto& body : {early, late}) {
      auto t0 = Clock::now();
      std::vector<std::string> args = {"-n", "3", "--kill-grace", "1"};
      args.insert(args.end(), hosts.begin(), hosts.end());
      args.insert(args.end(), {"sh", "-c", body, PMIX_CLIENT_EXE});
      RunResult r = run(args, {}, 30);
      EXPECT_EQ(r.status, 1) << body << "\n" << r.err;
      EXPECT_TRUE(std::regex_search(r.err, std::regex("rank 0 on host \\S+ exited without initialising PMIx or PMI \\(MPI_Init\\), "
                                                      "while rank [12] (on host \\S+ )?did")))
          << r.err;
      EXPECT_LT(Clock::now() - t0, std::chrono::seconds(8)) << body;
    }
  }
}

// Under --on-failure continue, a fence across hosts goes on without a host
// whose ranks all failed (its PMIx server has no rank left to enter it), as
// a host's PMIx server completes its own ranks' fence without one that died;
// the same for a rank that ended without initialising.  Along a launch
// tree the fence fails instead, as with a lost host.  Each waited for ever
// before.
TEST(Launcher, UnderContinueAFenceGoesOnWithoutAHostWhoseRanksAllFailed) {
  auto t0 = Clock::now();
  RunResult r = run({"--on-failure", "continue", "-n", "3", "-H", "ta:1,tb:1,tc:1",
                     "--launch-agent", "{cmd}", PMIX_CLIENT_EXE, "fail=1"},
                    {}, 30);
  EXPECT_EQ(r.status, 3) << r.out << r.err;
  EXPECT_NE(r.out.find("fence rank 0: SUCCESS"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("fence rank 2: SUCCESS"), std::string::npos) << r.out << r.err;
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(8)) << r.err;

  t0 = Clock::now();
  r = run(
      {"--on-failure", "continue", "-n", "3", "-H", "ta:1,tb:2", "--launch-agent", "{cmd}", "sh",
       "-c", "[ $ACCRUN_RANK = 0 ] && exit 0; exec \"$0\" fence-after=1", PMIX_CLIENT_EXE},
      {}, 30);
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("fence rank 1: SUCCESS"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("fence rank 2: SUCCESS"), std::string::npos) << r.out << r.err;
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(8)) << r.err;

  t0 = Clock::now();
  r = run({"--on-failure", "continue", "-n", "4", "-H", "ta:1,tb:1,tc:1,td:1", "--fanout", "1",
           "--launch-agent", "{cmd}", PMIX_CLIENT_EXE, "fail=1"},
          {}, 30);
  EXPECT_EQ(r.status, 3) << r.out << r.err;
  for (int rank : {0, 2, 3})
    EXPECT_NE(r.out.find("fence rank " + std::to_string(rank) + ": ERROR"), std::string::npos)
        << r.out << r.err;
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(8)) << r.err;
}

// A rank that ends half-way through connecting to its agent's PMIx server
// (it sent its request, the server's answer finds it gone) can leave the
// library unable to shut down (accrun(7), "Process clean-up"): the agent gives
// the library's teardown a bounded time, and the job ends.  Before that
// bound, 9 runs in 10 here waited for ever.
TEST(Launcher, ARankEndingAsItConnectsDoesNotHoldUpTheEnd) {
  const std::vector<std::string> two_agents = {"-H", "ta:1,tb:1", "--launch-agent", "{cmd}"};
  for (const auto& hosts : {std::vector<std::string>{}, two_agents}) {
    for (int i = 0; i < 2; ++i) {
      auto t0 = Clock::now();
      std::vector<std::string> args = {"-n", hosts.empty() ? "1" : "2"};
      args.insert(args.end(), hosts.begin(), hosts.end());
      args.insert(args.end(), {"sh", "-c", "[ $ACCRUN_RANK = 0 ] && exec \"$0\" die-connecting; exit 0",
                               PMIX_CLIENT_EXE});
      RunResult r = run(args, {}, 30);
      // As far as the server knows it ended before initialising, as a
      // program that does not use PMIx (status 0), or, where the server
      // answered first, after initialising without finalizing (1, named).
      EXPECT_TRUE(r.status == 0 || (r.status == 1 && r.err.find("rank 0 on host ") != std::string::npos))
          << r.status << "\n" << r.err;
      EXPECT_EQ(r.err.find("refused a connection"), std::string::npos) << r.err;
      EXPECT_LT(Clock::now() - t0, std::chrono::seconds(8)) << r.err;
    }
  }
}

// The TCP sockets process `pid` listens on (/proc/net/tcp{,6} state 0A,
// matched to its descriptors by inode).
int listening_sockets_of(pid_t pid) {
  std::set<std::string> listening;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, st, queues, tr, retr, uid, timeout, inode;
      f >> sl >> local >> remote >> st >> queues >> tr >> retr >> uid >> timeout >> inode;
      if (st == "0A") listening.insert(inode);
    }
  }
  int n = 0;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      char target[128] = {};
      if (readlink((dir + "/" + e->d_name).c_str(), target, sizeof target - 1) <= 0) continue;
      std::string t = target;
      if (t.rfind("socket:[", 0) == 0 && listening.count(t.substr(8, t.size() - 9)) != 0) ++n;
    }
    closedir(d);
  }
  return n;
}

// The pids of the processes whose environment holds `entry` (VAR=value).
std::vector<pid_t> processes_with(const std::string& entry) {
  std::vector<pid_t> out;
  for (const auto& d : std::filesystem::directory_iterator("/proc")) {
    const std::string name = d.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(d.path() / "environ", std::ios::binary);
    std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (("\0" + env).find("\0" + entry + '\0') != std::string::npos || env.rfind(entry + '\0', 0) == 0)
      out.push_back(std::stoi(name));
  }
  return out;
}

// Nothing of the job outlives accrun when an agent in the middle of a launch
// chain (--fanout 1) is killed.  (An agent used to wait out 2 s for the
// launch agent of one it started that the job's daemon had reaped already;
// this test passes with and without that fix here, the helper's reproducer
// in the closing note did not: it checks the outcome, not that path.)
TEST(Launcher, NoAgentOutlivesAccrunWhenOneInAChainWasKilled) {
  const std::string mark = "ACCRUN_TEST_CHAIN=" + std::to_string(getpid());
  Proc p({"-n", "5", "-H", "ta:2,tb:2,tc:1", "--launch-agent", "{cmd}", "--fanout", "1", "--on-failure", "continue",
          "sh", "-c", "echo ready; exec \"$0\" fence-after=3", PMIX_CLIENT_EXE},
         {mark});
  ASSERT_TRUE(p.read_until([](const std::string& o) { return lines_of(o).size() >= 5; }, 20)) << p.err();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the ranks in PMIx_Init and its sleep
  pid_t victim = -1;  // tc's agent: the parent of the rank that runs there
  for (pid_t r : processes_with("ACCRUN_HOST=tc")) {
    if (std::find(processes_with(mark).begin(), processes_with(mark).end(), r) == processes_with(mark).end()) continue;
    std::ifstream stat("/proc/" + std::to_string(r) + "/stat");
    std::string pid, comm, state;
    stat >> pid >> comm >> state >> victim;
  }
  ASSERT_GT(victim, 1);
  kill(victim, SIGKILL);
  EXPECT_EQ(p.wait(30), 1) << p.err();
  std::vector<pid_t> left = processes_with(mark);
  EXPECT_TRUE(left.empty()) << left.size() << " process(es) of the job outlived accrun\n" << p.err();
}

// The controller listens for its agents only until every one has joined:
// a connection after that is refused by the kernel, not left unanswered.
TEST(Launcher, TheControllerStopsListeningOnceEveryAgentJoined) {
  Proc p({"-n", "2", "-H", "ta:1,tb:1", "--launch-agent", "{cmd}", "sh", "-c", "echo ready; exec sleep 2"});
  ASSERT_TRUE(p.read_until([](const std::string& o) { return o.find("ready") != o.rfind("ready"); }, 20)) << p.err();
  EXPECT_EQ(listening_sockets_of(p.pid()), 0);
  EXPECT_EQ(p.wait(20), 0) << p.err();
}

TEST(Launcher, ExitWithoutFinalizeIsAFailure) {
  auto t0 = Clock::now();
  RunResult r = run({"-n", "3", "--kill-grace", "1", PMIX_CLIENT_EXE, "quit=1"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("rank 1 on host"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("exited without finalizing"), std::string::npos) << r.err;
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10));
}

#ifdef MPI_HELLO_EXE
TEST(Launcher, OpenMpiProgramRunsWithoutMpirun) {
  RunResult r = run({"-n", "4", MPI_HELLO_EXE});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 4u) << r.out << r.err;
  std::set<std::string> seen;
  for (const auto& l : lines) {
    EXPECT_TRUE(std::regex_search(l, std::regex("^rank=\\d size=4 shared=4 sum=10 expect=10$"))) << l;
    seen.insert(l.substr(0, 6));
  }
  EXPECT_EQ(seen.size(), 4u);
}

TEST(Launcher, MpiAbortCodeIsTheExitStatus) {
  RunResult r = run({"-n", "3", MPI_HELLO_EXE, "abort=1:7"});
  EXPECT_EQ(r.status, 7) << r.err;
  EXPECT_NE(r.err.find("rank 1 on host"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("called abort with status 7"), std::string::npos) << r.err;
  // No libevent complaint ("[warn] Epoll MOD(1) on fd N failed") from
  // accrun's PMIx server or the ranks while the job is torn down.
  EXPECT_EQ(r.err.find("[warn]"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("[warn]"), std::string::npos) << r.out;
}

// An exit status keeps 8 bits: MPI_Abort(256) must not end the job with 0.
TEST(Launcher, AnAbortCodeThatWouldReadAsSuccessExitsOne) {
  RunResult r = run({"-n", "2", MPI_HELLO_EXE, "abort=1:256"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("called abort with status 256"), std::string::npos) << r.err;
}
#endif

// Inside an allocation on a node where srun is not on PATH (a batch
// script run with --export=NONE), accrun says so before starting anything
// (before: the launch failed as "exited with status 127", with a hint
// about accrun's own path).
TEST(Launcher, InsideSlurmWithoutSrunOnThePathIsOneClearError) {
  RunResult r =
      run({"-n", "2", "/bin/true"}, {"SLURM_JOB_ID=77", "SLURM_JOB_NODELIST=node-a,node-b",
                                     "SLURM_JOB_CPUS_PER_NODE=1(x2)", "PATH=/nonexistent"});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("started by srun, which is not on this host's PATH"), std::string::npos)
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

// PMIx_Query_info and PMIx_Job_control (accrun(7), "Queries and job
// control"): the job's namespaces and spawn support are answered; a rank
// terminated at another's request ends the job without a failure.
TEST(Launcher, PmixQueryAndJobControl) {
  auto t0 = Clock::now();
  RunResult r = run({"-n", "3", "--kill-grace", "1", PMIX_CLIENT_EXE, "control"});
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(15));
  EXPECT_TRUE(std::regex_search(r.out, std::regex("query ns=accrun\\.[0-9a-f]+ spawn=pmix.host,pmix.wdir size=3\n")))
      << r.out;
  EXPECT_NE(r.out.find("OK control rank=0 terminated rank 2"), std::string::npos) << r.out;
  EXPECT_EQ(r.err.find("rank 2"), std::string::npos) << "no failure is reported: " << r.err;
}

#ifdef MPI_SPAWN_EXE
// A token on the spawn test program's command line (passed on to what it
// spawns), unique to one test, and how many processes carry it now.
std::string spawn_token(const char* test) { return std::string("token-") + test + "-" + std::to_string(getpid()); }
int spawn_programs_running(const std::string& token) {
  std::string cmd = "pgrep -c -f -- '" + token + "$' 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  int n = 0;
  if (p != nullptr) {
    if (std::fscanf(p, "%d", &n) != 1) n = 0;
    pclose(p);
  }
  return n;
}

TEST(Launcher, MpiCommSpawnTalksOverTheIntercommunicator) {
  std::string token = spawn_token("MpiCommSpawnTalksOverTheIntercommunicator");
  RunResult r = run({"-n", "2", "--tag-output", MPI_SPAWN_EXE, "2", "talk", token});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 4u) << r.out << r.err;
  std::set<std::string> got(lines.begin(), lines.end());
  // Parents: 2 children, rank 0 sent 7 and 14 and got them back plus one;
  // the merged communicator holds 4, whose values sum to 100+101+200+201.
  EXPECT_EQ(got.count("[0] parent rank=0 size=2 remote=2 sum=23 merged=4 total=602"), 1u) << r.out;
  EXPECT_EQ(got.count("[1] parent rank=1 size=2 remote=2 sum=0 merged=4 total=602"), 1u) << r.out;
  std::string job = first_match(r.out, "job=([0-9a-f]+)");
  ASSERT_FALSE(job.empty()) << r.out;
  // Spawned processes have their own namespace and environment contract.
  for (int c = 0; c < 2; ++c) {
    std::string want = "[spawn1:" + std::to_string(c) + "] child rank=" + std::to_string(c) +
                       " size=2 got=" + std::to_string(7 * (c + 1)) + " total=602 env=" + std::to_string(c) +
                       ",2,0,accrun." + job + ".1 job=" + job + " host=";
    bool found = false;
    for (const auto& l : got) found |= l.rfind(want, 0) == 0;
    EXPECT_TRUE(found) << want << "\n" << r.out;
  }
  expect_no_job_dirs(job);
  EXPECT_EQ(spawn_programs_running(token), 0);
}

TEST(Launcher, MpiCommSpawnBeyondTheHostsSlotsIsRefused) {
  std::string token = spawn_token("MpiCommSpawnBeyondTheHostsSlotsIsRefused");
  std::string hostfile = tmpdir() + "/accrun-spawn-hostfile-" + std::to_string(getpid());
  std::ofstream(hostfile) << "localhost slots=3\n";
  // MPI_UNIVERSE_SIZE counts the slots (mpirun's rule).
  RunResult u = run({"--hostfile", hostfile, "-n", "2", MPI_SPAWN_EXE, "2", "universe", token});
  EXPECT_EQ(u.status, 0) << u.err;
  EXPECT_EQ(u.out, "universe=3\n") << u.err;
  RunResult r = run({"--hostfile", hostfile, "-n", "2", MPI_SPAWN_EXE, "2", "talk", token});
  EXPECT_NE(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("rank 0's MPI_Comm_spawn (PMIx_Spawn) of 2 process(es) was refused: the job's hosts have 1 "
                       "free slot(s) (localhost 1 of 3)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--oversubscribe"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("child"), std::string::npos) << r.out;
  // The same job with --oversubscribe spawns.
  RunResult ok = run({"--hostfile", hostfile, "--oversubscribe", "-n", "2", MPI_SPAWN_EXE, "2", "talk", token});
  EXPECT_EQ(ok.status, 0) << ok.err;
  EXPECT_EQ(lines_of(ok.out).size(), 4u) << ok.out;
  unlink(hostfile.c_str());
  EXPECT_EQ(spawn_programs_running(token), 0);
}

TEST(Launcher, MpiCommSpawnMultipleNumbersTheApplications) {
  std::string token = spawn_token("MpiCommSpawnMultipleNumbersTheApplications");
  // Two applications of 1 process each: ranks 0 and 1 of one namespace,
  // MPI_APPNUM 0 and 1.
  RunResult r = run({"-n", "1", MPI_SPAWN_EXE, "1", "multiple", token});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("parent rank=0 size=1 remote=2 sum=23 merged=3 total=501"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("child rank=0 appnum=0\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("child rank=1 appnum=1\n"), std::string::npos) << r.out;
  EXPECT_EQ(spawn_programs_running(token), 0);
}

TEST(Launcher, MpiCommSpawnOfAMissingProgramSaysSo) {
  std::string token = spawn_token("MpiCommSpawnOfAMissingProgramSaysSo");
  RunResult r = run({"-n", "1", MPI_SPAWN_EXE, "1", "missing", token});
  EXPECT_NE(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("was refused: 'accrun-no-such-program'"), std::string::npos) << r.err;
  EXPECT_EQ(spawn_programs_running(token), 0);
}

TEST(Launcher, AFailingSpawnedProcessEndsTheJob) {
  std::string token = spawn_token("AFailingSpawnedProcessEndsTheJob");
  auto t0 = Clock::now();
  RunResult r = run({"-n", "2", MPI_SPAWN_EXE, "2", "child-fails", token});
  EXPECT_EQ(r.status, 5) << r.out << r.err;
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(15));
  EXPECT_TRUE(std::regex_search(r.err, std::regex("spawned process 1 of accrun\\.[0-9a-f]+\\.1 \\(started by rank 0\\) "
                                                  "on host \\S+ exited with status 5")))
      << r.err;
  EXPECT_EQ(spawn_programs_running(token), 0);
}
#endif

TEST(Launcher, Mpi4pyOneLiner) {
  if (system("/usr/bin/python3 -c 'import mpi4py' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3-mpi4py is not importable by /usr/bin/python3";
  RunResult r = run({"-n", "3", "/usr/bin/python3", "-c",
               "from mpi4py import MPI; c = MPI.COMM_WORLD; print(c.rank, c.size, c.allreduce(c.rank + 1))"});
  ASSERT_EQ(r.status, 0) << r.err;
  std::set<std::string> lines;
  for (const auto& l : lines_of(r.out)) lines.insert(l);
  EXPECT_EQ(lines, (std::set<std::string>{"0 3 6", "1 3 6", "2 3 6"})) << r.out << r.err;
}

// Each rank leads a process group of its own in its agent's session, as
// mpirun's ranks do (so under autogroup scheduling the host's ranks are one
// scheduling group, in which sched_yield hands the CPU to a waiting peer),
// and has no controlling terminal, though accrun has one here.
TEST(Launcher, EachRankLeadsAGroupInTheAgentsSessionWithoutATerminal) {
  int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  ASSERT_GE(master, 0) << std::strerror(errno);
  ASSERT_EQ(grantpt(master), 0);
  ASSERT_EQ(unlockpt(master), 0);
  const std::string terminal = ptsname(master);
  // /proc/PID/stat after the command: the state, ppid, pgrp, session and
  // tty_nr; the rank's parent is its agent.
  Proc p({"-n", "3", "sh", "-c",
          "read -r pid rest < /proc/$$/stat; set -- $rest; echo $pid $4 $5 $6 "
          "$(read -r a rest < /proc/$PPID/stat; set -- $rest; echo $5 $6) "
          "$(if true </dev/tty 2>/dev/null; then echo tty; else echo no-tty; fi)"},
         {}, nullptr, [&] {
           // A session of accrun's own whose controlling terminal is the pty.
           setsid();
           int slave = open(terminal.c_str(), O_RDWR);
           if (slave < 0 || ioctl(slave, TIOCSCTTY, 0) != 0) _exit(98);
         });
  int status = p.wait();
  close(master);
  ASSERT_EQ(status, 0) << p.err();
  auto lines = lines_of(p.out());
  ASSERT_EQ(lines.size(), 3u) << p.out();
  for (const auto& l : lines) {
    std::smatch m;
    ASSERT_TRUE(
        std::regex_match(l, m, std::regex("(\\d+) (\\d+) (\\d+) (\\d+) (\\d+) (\\d+) (\\S+)")))
        << l;
    EXPECT_EQ(m[1], m[2]) << "its own process group: " << l;
    EXPECT_EQ(m[3], std::to_string(p.pid())) << "accrun's session: " << l;
    EXPECT_EQ(m[5], m[3]) << "its agent's session: " << l;
    EXPECT_NE(m[6], "0") << "the agent has the terminal (so the test gave one): " << l;
    EXPECT_EQ(m[4], "0") << "no controlling terminal: " << l;
    EXPECT_EQ(m[7], "no-tty") << l;
  }
}

// ------------------------------------------------------ exit statuses

TEST(Launcher, ExitStatuses) {
  RunResult ok = run({"-n", "2", "true"});
  EXPECT_EQ(ok.status, 0) << ok.err;

  // exit(3) on rank 1; the others would sleep for 30 s and are terminated.
  auto t0 = Clock::now();
  RunResult three = run({"-n", "3", "sh", "-c", "echo J=$ACCRUN_JOB_ID; [ $ACCRUN_RANK = 1 ] && exit 3; exec sleep 30"});
  EXPECT_EQ(three.status, 3) << three.err;
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10));
  EXPECT_NE(three.err.find("rank 1 on host"), std::string::npos);
  EXPECT_NE(three.err.find("exited with status 3"), std::string::npos) << three.err;
  expect_no_job_dirs(first_match(three.out, "J=([0-9a-f]+)"));

  RunResult segv = run({"-n", "2", "sh", "-c", "echo J=$ACCRUN_JOB_ID; [ $ACCRUN_RANK = 0 ] && kill -SEGV $$; exec sleep 30"});
  EXPECT_EQ(segv.status, 139) << segv.err;
  EXPECT_NE(segv.err.find("SIGSEGV"), std::string::npos) << segv.err;
  expect_no_job_dirs(first_match(segv.out, "J=([0-9a-f]+)"));

  RunResult missing = run({"-n", "2", "/nonexistent/program"});
  EXPECT_EQ(missing.status, 127);
  EXPECT_NE(missing.err.find("/nonexistent/program"), std::string::npos) << missing.err;
  RunResult notfound = run({"-n", "2", "accrun-no-such-command"});
  EXPECT_EQ(notfound.status, 127);
  EXPECT_EQ(lines_of(notfound.err).size(), 1u) << notfound.err;  // one clear message
  RunResult notexec = run({"-n", "2", "/etc/hostname"});
  EXPECT_EQ(notexec.status, 126) << notexec.err;
}

// How many processes carry `mark` ("NAME=value") in their environment.
int processes_marked(const std::string& mark) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(e.path() / "environ", std::ios::binary);
    for (std::string var; std::getline(f, var, '\0');) {
      if (var == mark) {
        ++n;
        break;
      }
    }
  }
  return n;
}

// A job of this host alone is planned while its agent already starts the
// janitor, the job's directories and the PMIx server (docs/design.md §4).
// Bad input the planner finds (no GPU here; -n 0) still ends with status 2,
// and once accrun has exited none of what the agent started is left.
TEST(Launcher, BadInputFoundWhileTheAgentStartsLeavesNothing) {
  for (const std::vector<std::string>& args : {std::vector<std::string>{"-n", "2", "--gpus-per-rank", "1", "/bin/true"},
                                               std::vector<std::string>{"--resources", "TPU:1", "-n", "3", "--resources-per-rank", "TPU:1", "/bin/true"}}) {
    RunResult r = run(args, {"ACCRUN_LOG=debug"});
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_NE(r.err.find("cannot place rank"), std::string::npos) << r.err;
    std::string jobid = first_match(r.err, "job ([0-9a-f]+): ");
    expect_no_job_dirs(jobid);
    EXPECT_EQ(processes_marked("ACCRUN_JOB_ID=" + jobid), 0) << "the janitor of job " << jobid << " outlived accrun";
    RunResult quiet = run(args);
    EXPECT_EQ(quiet.status, 2) << quiet.err;
    EXPECT_EQ(lines_of(quiet.err).size(), 1u) << quiet.err;  // one clear message
  }
}

TEST(Launcher, EmptyProgramNameIsBadInput) {
  RunResult r = run({"-n", "2", ""});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("accrun: empty program name"), std::string::npos) << r.err;
  EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
}

// As bash 5 does: 127 for a "#!" interpreter that does not exist, and the
// message names the interpreter, not just the script.
TEST(Launcher, MissingScriptInterpreterIsNamed) {
  std::string script = tmpdir() + "/accrun-launcher-script-" + std::to_string(getpid());
  {
    std::ofstream f(script);
    f << "#!/nonexistent/accrun-interp -x\necho hi\n";
  }
  chmod(script.c_str(), 0755);
  RunResult r = run({"-n", "2", script});
  unlink(script.c_str());
  EXPECT_EQ(r.status, 127) << r.err;
  EXPECT_NE(r.err.find("'" + script + "': bad interpreter '/nonexistent/accrun-interp': No such file or directory"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
  EXPECT_EQ(r.out, "");
}

// An --output-dir that cannot be used is bad input, found before any rank
// starts.
TEST(Launcher, UnusableOutputDirIsBadInput) {
  std::string file = tmpdir() + "/accrun-launcher-file-" + std::to_string(getpid());
  std::string marker = file + ".started";
  { std::ofstream f(file); }
  for (const std::string& dir : {file + "/out", file}) {
    RunResult r = run({"-n", "2", "--output-dir", dir, "sh", "-c", "touch " + marker});
    EXPECT_EQ(r.status, 2) << dir << ": " << r.err;
    EXPECT_NE(r.err.find("--output-dir " + dir), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("Not a directory"), std::string::npos) << r.err;
    EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
    EXPECT_FALSE(exists(marker)) << "a rank was started";
  }
  unlink(file.c_str());
  unlink(marker.c_str());
}

// --output-dir in a directory other users can write: a symbolic link or a
// hard link planted where accrun writes rank.R/stdout, or a rank.R of
// another user, is refused before anything starts, and the file the link
// names keeps its bytes (before: accrun truncated it and wrote into it).
TEST(Launcher, OutputDirNeverFollowsAPlantedLink) {
  std::string base = tmpdir() + "/accrun-launcher-planted-" + std::to_string(getpid());
  std::string victim = base + ".victim";
  std::string marker = base + ".started";
  auto fresh = [&] {
    std::system(("rm -rf '" + base + "' && mkdir -m 1777 '" + base + "'").c_str());
    std::ofstream(victim) << "precious\n";
  };
  struct Case {
    std::string what;
    std::string plant;  // shell run in base before accrun
    std::string says;
  };
  std::vector<Case> cases = {
      {"a symbolic link as stdout", "mkdir rank.0 && ln -s '" + victim + "' rank.0/stdout", "rank.0/stdout is a symbolic link"},
      {"a symbolic link as rank.0", "mkdir d && ln -s d rank.0", "rank.0 is a symbolic link"},
      {"a hard link as stderr", "mkdir rank.0 && ln '" + victim + "' rank.0/stderr", "rank.0/stderr has other names"},
  };
  if (geteuid() == 0) cases.push_back({"another user's rank.0", "mkdir rank.0 && chown 65534 rank.0", "rank.0 belongs to uid 65534"});
  for (const Case& c : cases) {
    fresh();
    ASSERT_EQ(std::system(("cd '" + base + "' && " + c.plant).c_str()), 0) << c.what;
    RunResult r = run({"-n", "1", "--output-dir", base, "sh", "-c", "touch " + marker + "; echo overwritten"});
    EXPECT_EQ(r.status, 2) << c.what << ": " << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.what << ": " << r.err;
    EXPECT_NE(r.err.find("choose another --output-dir"), std::string::npos) << r.err;
    EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
    EXPECT_FALSE(exists(marker)) << c.what << ": a rank was started";
    std::ifstream f(victim);
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text, "precious\n") << c.what;
  }
  // DIR itself a symbolic link another user planted (towards a directory of
  // this user's, whose rank.0/stdout it would have emptied): refused.
  if (geteuid() == 0) {
    fresh();
    const std::string link = base + "/out", target = base + ".target";
    ASSERT_EQ(std::system(("mkdir -p '" + target + "/rank.0' && echo precious > '" + target + "/rank.0/stdout' && ln -s '" +
                           target + "' '" + link + "' && chown -h 65534 '" + link + "'").c_str()),
              0);
    RunResult r = run({"-n", "1", "--output-dir", link, "sh", "-c", "touch " + marker + "; echo overwritten"});
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_NE(r.err.find(link + " is a symbolic link of uid 65534"), std::string::npos) << r.err;
    EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
    EXPECT_FALSE(exists(marker)) << "a rank was started";
    std::ifstream f(target + "/rank.0/stdout");
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text, "precious\n");
    // The same link of this user's own is followed.
    ASSERT_EQ(std::system(("chown -h 0 '" + link + "'").c_str()), 0);
    EXPECT_EQ(run({"-n", "1", "--output-dir", link, "echo", "mine"}).status, 0);
    std::system(("rm -rf '" + target + "'").c_str());
  }
  // A directory of its own from an earlier run is reused, its files emptied.
  fresh();
  ASSERT_EQ(run({"-n", "1", "--output-dir", base, "sh", "-c", "echo first run, longer"}).status, 0);
  RunResult again = run({"-n", "1", "--output-dir", base, "echo", "second"});
  EXPECT_EQ(again.status, 0) << again.err;
  std::ifstream f(base + "/rank.0/stdout");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "second\n");
  // A refusal at a later rank's file changes nothing: the earlier ranks'
  // files keep their bytes, and what accrun had made is gone again.
  fresh();
  ASSERT_EQ(std::system(("cd '" + base + "' && mkdir rank.0 rank.2 && echo kept > rank.0/stdout && ln -s '" + victim +
                         "' rank.2/stderr").c_str()),
            0);
  RunResult refused = run({"-n", "3", "--output-dir", base, "echo", "overwritten"});
  EXPECT_EQ(refused.status, 2) << refused.err;
  std::ifstream kept(base + "/rank.0/stdout");
  std::string was((std::istreambuf_iterator<char>(kept)), std::istreambuf_iterator<char>());
  EXPECT_EQ(was, "kept\n");
  EXPECT_FALSE(exists(base + "/rank.0/stderr"));
  EXPECT_FALSE(exists(base + "/rank.1"));
  EXPECT_FALSE(exists(base + "/rank.2/stdout"));
  std::system(("rm -rf '" + base + "' '" + victim + "' '" + marker + "'").c_str());
}

TEST(Launcher, TimeoutEndsTheJobAndNamesTheRanks) {
  auto t0 = Clock::now();
  RunResult r = run({"-n", "3", "--timeout", "1", "sh", "-c", "echo J=$ACCRUN_JOB_ID; [ $ACCRUN_RANK = 2 ] && exit 0; exec sleep 30"});
  EXPECT_EQ(r.status, 124) << r.err;
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(8));
  EXPECT_NE(r.err.find("ranks still running: 0-1"), std::string::npos) << r.err;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  EXPECT_NE(r.err.find("--timeout 1 s reached on host " + std::string(host) + ";"), std::string::npos) << r.err;
  expect_no_job_dirs(first_match(r.out, "J=([0-9a-f]+)"));
  // A fraction is quoted as given (it used to be rounded up to 1 s).
  RunResult part = run({"--timeout", "0.25", "sleep", "30"});
  EXPECT_EQ(part.status, 124) << part.err;
  EXPECT_NE(part.err.find("--timeout 0.25 s reached"), std::string::npos) << part.err;
}

TEST(Launcher, OnFailureContinueLetsSurvivorsFinish) {
  RunResult r = run({"-n", "3", "--on-failure", "continue", "sh", "-c",
               "[ $ACCRUN_RANK = 0 ] && exit 4; sleep 0.3; echo survived $ACCRUN_RANK"});
  EXPECT_EQ(r.status, 4) << r.err;
  EXPECT_NE(r.out.find("survived 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("survived 2"), std::string::npos) << r.out;
  // A timeout after that failure ends the job, and the failure keeps naming
  // its status (accrun(1) EXIT STATUS, 124).
  RunResult late = run({"-n", "2", "--on-failure", "continue", "--timeout", "1", "sh", "-c",
                        "[ $ACCRUN_RANK = 0 ] && exit 4; exec sleep 30"});
  EXPECT_EQ(late.status, 4) << late.err;
  EXPECT_NE(late.err.find("ranks still running: 1; terminating them"), std::string::npos) << late.err;
}

// ------------------------------------------------------------- signals

TEST(Launcher, SigintReachesEveryRank) {
  Proc p({"-n", "3", "sh", "-c",
          "trap 'echo INT $ACCRUN_RANK; exit 9' INT; echo ready $ACCRUN_RANK; while :; do sleep 0.05; done"});
  ASSERT_TRUE(p.read_until([](const std::string& o) { return lines_of(o).size() >= 3; }, 10)) << p.out();
  kill(p.pid(), SIGINT);
  EXPECT_EQ(p.wait(10), 130) << p.err();
  for (int r = 0; r < 3; ++r) EXPECT_NE(p.out().find("INT " + std::to_string(r)), std::string::npos) << p.out();
}

// More ranks than the slots given for every host is bad input that needs
// no agent: status 2, the planner's message, and no launch agent started
// (before: an agent was started on every host first).
TEST(Launcher, MoreRanksThanTheGivenSlotsStartsNoAgent) {
  const std::string marker = tmpdir() + "/accrun-no-agent-" + std::to_string(getpid());
  RunResult r = run({"-n", "5", "-H", "ta:1,tb:1", "--launch-agent", "touch " + marker + "; : {host}; {cmd}", "true"});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("cannot place rank 2 of -n 5: the hosts have 2 slots (ta: 1, tb: 1)"), std::string::npos) << r.err;
  EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
  EXPECT_FALSE(exists(marker)) << "a launch agent was started";
  unlink(marker.c_str());
  // With --oversubscribe the same job runs.
  EXPECT_EQ(run({"-n", "5", "-H", "ta:1,tb:1", "--oversubscribe", "--launch-agent", "{cmd}", "true"}).status, 0);
}

// INT, TERM or HUP while the agents are still starting (here each host's
// launch agent takes 2 s) ends the job with 128 + the signal and a line
// saying so, starts no rank and leaves no agent behind; INT too when accrun
// was started with it ignored, as a script's background job is (before: the
// signal was lost, or killed accrun alone and left its agents running).
TEST(Launcher, ASignalWhileTheAgentsStartEndsTheJob) {
  const std::string marker = tmpdir() + "/accrun-early-signal-" + std::to_string(getpid());
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    Proc p({"-n", "2", "-H", "ta:1,tb:1", "--launch-agent", "sleep 2; : {host}; {cmd}", "sh", "-c",
            "touch " + marker + "; exec sleep 30"},
           {}, nullptr, [sig] {
             if (sig == SIGINT) signal(SIGINT, SIG_IGN);
           });
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    kill(p.pid(), sig);
    EXPECT_EQ(p.wait(10), 128 + sig) << sigabbrev_np(sig) << ": " << p.err();
    EXPECT_NE(p.err().find(std::string("received ") + sigabbrev_np(sig) + " while the agents were starting"),
              std::string::npos)
        << p.err();
    EXPECT_FALSE(exists(marker)) << sigabbrev_np(sig) << ": a rank was started";
    // (The launch agents' shells; the brackets keep pgrep's own shell out.)
    EXPECT_NE(std::system("pgrep -f 'sleep 2; : t[ab];' >/dev/null"), 0) << sigabbrev_np(sig) << ": a launch agent was left";
    unlink(marker.c_str());
  }
}

// Under nohup (SIGHUP ignored) a hangup neither ends the job nor reaches
// the ranks, which start with it ignored as nohup's own command would;
// without nohup it is forwarded and ends the job (129).
TEST(Launcher, UnderNohupTheJobAndItsRanksIgnoreHangups) {
  const std::vector<std::string> job = {"-n", "2", "sh", "-c",
                                        "grep SigIgn /proc/self/status; echo ready; sleep 1; echo survived $ACCRUN_RANK"};
  auto two_ready = [](const std::string& o) { return o.find("ready") != o.rfind("ready"); };
  Proc p(job, {}, nullptr, [] { signal(SIGHUP, SIG_IGN); });
  ASSERT_TRUE(p.read_until(two_ready, 10)) << p.out() << p.err();
  kill(p.pid(), SIGHUP);
  EXPECT_EQ(p.wait(10), 0) << p.err();
  std::smatch m;
  int ignored = 0, survived = 0;
  for (const auto& l : lines_of(p.out())) {
    if (std::regex_search(l, m, std::regex("^SigIgn:\\s*([0-9a-f]+)$")))
      ignored += (std::stoull(m[1].str(), nullptr, 16) >> (SIGHUP - 1)) & 1;
    survived += l.rfind("survived ", 0) == 0;
  }
  EXPECT_EQ(ignored, 2) << p.out();
  EXPECT_EQ(survived, 2) << p.out();

  Proc q(job);
  ASSERT_TRUE(q.read_until(two_ready, 10)) << q.out() << q.err();
  kill(q.pid(), SIGHUP);
  EXPECT_EQ(q.wait(10), 128 + SIGHUP) << q.err();
}

// Started with stdin closed, accrun's first descriptor (its signalfd) used
// to become fd 0 and be read as input: the job hung and ignored signals.
TEST(Launcher, ClosedStdinIsNotTakenForInput) {
  auto close_stdin = [] { close(0); };
  auto t0 = Clock::now();
  Proc quick({"-n", "1", "/bin/true"}, {}, nullptr, close_stdin);
  EXPECT_EQ(quick.wait(10), 0) << quick.err();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));

  Proc p({"-n", "2", "sh", "-c", "echo ready; exec sleep 30"}, {}, nullptr, close_stdin);
  ASSERT_TRUE(p.read_until([](const std::string& o) { return lines_of(o).size() >= 2; }, 10)) << p.err();
  kill(p.pid(), SIGTERM);
  EXPECT_EQ(p.wait(10), 128 + SIGTERM) << p.err();
}

// With fds 0-2 all closed the janitor's pipe used to land on one of them and
// be replaced by /dev/null: the janitor left at once and a SIGKILLed
// accrun's directories stayed behind.
TEST(Launcher, ClosedStandardFdsKeepTheJanitor) {
  auto close_all = [] {
    close(0);
    close(1);
    close(2);
  };
  std::string idfile = tmpdir() + "/accrun-launcher-jobid-" + std::to_string(getpid());
  unlink(idfile.c_str());
  Proc done({"-n", "2", "sh", "-c", "[ $ACCRUN_RANK = 0 ] && echo $ACCRUN_JOB_ID > " + idfile + "; exit 0"}, {},
            nullptr, close_all);
  EXPECT_EQ(done.wait(10), 0);
  std::string jobid = wait_for_line(idfile, 1);
  unlink(idfile.c_str());
  expect_no_job_dirs(jobid);

  Proc killed({"-n", "2", "sh", "-c", "[ $ACCRUN_RANK = 0 ] && echo $ACCRUN_JOB_ID > " + idfile + "; exec sleep 30"},
              {}, nullptr, close_all);
  jobid = wait_for_line(idfile, 10);
  unlink(idfile.c_str());
  ASSERT_FALSE(jobid.empty());
  std::string shm = "/dev/shm/accrun." + std::to_string(getuid()) + "." + jobid;
  std::string tmp = tmpdir() + "/accrun." + std::to_string(getuid()) + "." + jobid;
  ASSERT_TRUE(exists(shm));
  kill(killed.pid(), SIGKILL);
  EXPECT_EQ(killed.wait(10), 128 + SIGKILL);
  auto deadline = Clock::now() + std::chrono::seconds(5);
  while ((exists(shm) || exists(tmp)) && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  expect_no_job_dirs(jobid);
}

TEST(Launcher, KillNineOfAccrunLeavesNothingBehind) {
  Proc p({"-n", "3", "sh", "-c", "sleep 60 & echo pids $$ $! $ACCRUN_SHM_DIR; wait"});
  ASSERT_TRUE(p.read_until([](const std::string& o) { return lines_of(o).size() >= 3; }, 10)) << p.out();
  std::vector<pid_t> pids;
  std::string shm;
  for (const auto& l : lines_of(p.out())) {
    std::istringstream in(l);
    std::string tag;
    pid_t a, b;
    in >> tag >> a >> b >> shm;
    pids.push_back(a);
    pids.push_back(b);
  }
  ASSERT_EQ(pids.size(), 6u);
  ASSERT_TRUE(exists(shm));
  kill(p.pid(), SIGKILL);
  EXPECT_EQ(p.wait(10), 128 + SIGKILL);
  auto deadline = Clock::now() + std::chrono::seconds(5);
  auto left = [&] {
    int n = 0;
    for (pid_t pid : pids) n += alive(pid);
    return n + (exists(shm) ? 1 : 0);
  };
  while (left() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  for (pid_t pid : pids) EXPECT_FALSE(alive(pid)) << "pid " << pid << " survived accrun's SIGKILL";
  EXPECT_FALSE(exists(shm)) << shm;
  std::string jobid = shm.substr(shm.rfind('.') + 1);
  expect_no_job_dirs(jobid);
}

// Descendants of a rank that start a new session (setsid) are in no process
// group accrun signals; they die with the job however it ends: the ranks
// exit, accrun gets SIGTERM, accrun is SIGKILLed (its agent cleans up), or
// the agent is SIGKILLed (its janitor finds them by the job's marks in
// their environment).  accrun(7), PROCESS CLEAN-UP.
class SetsidDescendants : public ::testing::TestWithParam<std::string> {};

TEST_P(SetsidDescendants, DieWithTheJob) {
  const std::string how = GetParam();
  // Each rank starts a session leader that would sleep for ten minutes and
  // says its pid; the rank itself exits soon (once the leader has its own
  // session) or waits.
  std::string rank = "setsid sleep 600 </dev/null >/dev/null 2>&1 & echo leader $!; " +
                     std::string(how == "exit" ? "sleep 0.3; exit 0" : "sleep 60");
  Proc p({"-n", "2", "sh", "-c", rank});
  ASSERT_TRUE(p.read_until([](const std::string& o) { return lines_of(o).size() >= 2; }, 10)) << p.err();
  std::vector<pid_t> leaders;
  for (const auto& l : lines_of(p.out())) leaders.push_back(std::atoi(l.c_str() + 7));
  ASSERT_EQ(leaders.size(), 2u);
  for (pid_t l : leaders) ASSERT_GT(l, 1);
  // Past setsid(): out of the rank's process group.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  if (how == "term") {
    kill(p.pid(), SIGTERM);
  } else if (how == "kill-accrun") {
    kill(p.pid(), SIGKILL);
  } else if (how == "kill-agent") {
    // The agent: accrun's child that is not a rank's shell.
    std::ifstream f("/proc/" + std::to_string(p.pid()) + "/task/" + std::to_string(p.pid()) + "/children");
    pid_t agent = 0;
    f >> agent;
    ASSERT_GT(agent, 1);
    kill(agent, SIGKILL);
  }
  p.wait(20);
  auto deadline = Clock::now() + std::chrono::seconds(5);
  auto left = [&] { return static_cast<int>(alive(leaders[0])) + static_cast<int>(alive(leaders[1])); };
  while (left() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  for (pid_t l : leaders) {
    EXPECT_FALSE(alive(l)) << "the rank's session leader " << l << " survived (" << how << ")";
    kill(l, SIGKILL);
  }
}

INSTANTIATE_TEST_SUITE_P(Launcher, SetsidDescendants, ::testing::Values("exit", "term", "kill-accrun", "kill-agent"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// An agent that hangs (here: stopped) when its controller dies cannot clean
// up after itself: its janitor, which watches the controller's connection
// too, kills it after a grace of 10 s and cleans up in its place.
TEST(Launcher, AHungAgentIsCleanedUpAfterWhenTheControllerDies) {
  Proc p({"-n", "2", "sh", "-c", "echo pid $$ $ACCRUN_SHM_DIR; exec sleep 60"});
  ASSERT_TRUE(p.read_until([](const std::string& o) { return lines_of(o).size() >= 2; }, 10)) << p.err();
  std::vector<pid_t> ranks;
  std::string shm;
  for (const auto& l : lines_of(p.out())) {
    std::istringstream in(l);
    std::string tag;
    pid_t pid;
    in >> tag >> pid >> shm;
    ranks.push_back(pid);
  }
  std::ifstream f("/proc/" + std::to_string(p.pid()) + "/task/" + std::to_string(p.pid()) + "/children");
  pid_t agent = 0;
  f >> agent;
  ASSERT_GT(agent, 1);
  kill(agent, SIGSTOP);
  kill(p.pid(), SIGKILL);
  EXPECT_EQ(p.wait(10), 128 + SIGKILL);
  auto deadline = Clock::now() + std::chrono::seconds(20);
  auto left = [&] { return alive(agent) + alive(ranks[0]) + alive(ranks[1]) + (exists(shm) ? 1 : 0); };
  while (left() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(alive(agent)) << "the hung agent survived";
  for (pid_t r : ranks) EXPECT_FALSE(alive(r)) << "rank " << r << " survived";
  EXPECT_FALSE(exists(shm)) << shm;
  kill(agent, SIGKILL);
  for (pid_t r : ranks) kill(r, SIGKILL);
}

// ------------------------------------------------------------- output

TEST(Launcher, TaggedLinesFromFourRanksStayWhole) {
  const long kLines = 100000;
  RunResult r = run({"-n", "4", "--tag-output", FLOOD_EXE, std::to_string(kLines), "partial"}, {}, 60);
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<long> next(4, 0);
  std::vector<int> tails(4, 0);
  size_t bad = 0;
  for (const auto& l : lines_of(r.out)) {
    int tag = -1, rank = -1;
    long i = -1;
    char rest = 0;
    if (std::sscanf(l.c_str(), "[%d] rank %d line %ld%c", &tag, &rank, &i, &rest) == 3 && tag == rank &&
        tag >= 0 && tag < 4 && i == next[tag]) {
      ++next[tag];
    } else if (std::sscanf(l.c_str(), "[%d] rank %d tail%c", &tag, &rank, &rest) == 2 && tag == rank && tag >= 0 &&
               tag < 4) {
      ++tails[tag];
    } else if (bad++ < 5) {
      ADD_FAILURE() << "mangled line: '" << l << "'";
    }
  }
  EXPECT_EQ(bad, 0u);
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(next[t], kLines) << "rank " << t;
    EXPECT_EQ(tails[t], 1) << "rank " << t << "'s last line without a newline";
  }
}

// A reader that stops reading for a while (a paused pager) holds the ranks
// back without losing a line; the wait is longer than the agents' silence
// limits, and accrun still answers Ctrl-C at once (its loop never waits on
// the reader).
TEST(Launcher, ASlowReaderLosesNothingAndDoesNotBlockSignals) {
  Proc p({"-n", "2", "sh", "-c", "seq 1 300000"});
  std::this_thread::sleep_for(std::chrono::seconds(5));
  EXPECT_EQ(p.wait(30), 0) << p.err();
  EXPECT_EQ(lines_of(p.out()).size(), 600000u);
  EXPECT_EQ(p.err(), "");

  int out[2];
  ASSERT_EQ(pipe(out), 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    close(out[0]);
    close(out[1]);
    execl(ACCRUN_EXE, ACCRUN_EXE, "-n", "2", "yes", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the pipe is full long before
  kill(pid, SIGINT);
  auto t0 = Clock::now();
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0 && Clock::now() - t0 < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  auto took = Clock::now() - t0;
  EXPECT_LT(took, std::chrono::seconds(2)) << "accrun waited on its reader after Ctrl-C";
  if (took >= std::chrono::seconds(10)) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  close(out[0]);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 130) << status;
}

// Output that cannot be written ends the job as a shell pipeline would: the
// ranks' pipes are closed, they die of SIGPIPE, accrun exits 141 and says so
// once (accrun(1) OUTPUT, EXIT STATUS).
TEST(Launcher, OutputToAFullDeviceEndsTheJob) {
  auto to_full = [] {
    int fd = open("/dev/full", O_WRONLY);
    if (fd >= 0) dup2(fd, 1);
  };
  auto t0 = Clock::now();
  Proc p({"-n", "2", "yes"}, {}, nullptr, to_full);
  EXPECT_EQ(p.wait(20), 128 + SIGPIPE) << p.err();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10));
  EXPECT_NE(p.err().find("cannot write the ranks' standard output: No space left on device"), std::string::npos)
      << p.err();
  EXPECT_EQ(lines_of(p.err()).size(), 1u) << p.err();

  // Ranks that wrote everything and exited 0: the output was still lost.
  Proc echo({"-n", "1", "echo", "hi"}, {}, nullptr, to_full);
  EXPECT_EQ(echo.wait(10), 1) << echo.err();
  EXPECT_NE(echo.err().find("No space left on device"), std::string::npos) << echo.err();
}

TEST(Launcher, ReaderThatGoesAwayEndsTheJob) {
  auto t0 = Clock::now();
  Proc p({"-n", "2", "yes"});
  ASSERT_TRUE(p.read_until([](const std::string& o) { return o.find('\n') != std::string::npos; }, 10)) << p.err();
  p.close_out();  // `| head -1`
  EXPECT_EQ(p.wait(20), 128 + SIGPIPE) << p.err();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10));
  EXPECT_NE(p.err().find("cannot write the ranks' standard output: Broken pipe"), std::string::npos) << p.err();
  EXPECT_EQ(p.err().find("was killed"), std::string::npos) << p.err();
  EXPECT_EQ(lines_of(p.err()).size(), 1u) << p.err();
}

TEST(Launcher, OutputDirAndStdin) {
  std::string dir = tmpdir() + "/accrun-launcher-out-" + std::to_string(getpid());
  std::string input = "line one\nline two\n";
  RunResult r = run({"-n", "2", "--output-dir", dir, "sh", "-c", "cat; echo err $ACCRUN_RANK >&2"}, {}, 30, &input);
  ASSERT_EQ(r.status, 0) << r.err;
  auto slurp = [](const std::string& path) {
    std::ifstream f(path);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  };
  EXPECT_EQ(slurp(dir + "/rank.0/stdout"), input);  // stdin goes to rank 0 by default
  EXPECT_EQ(slurp(dir + "/rank.1/stdout"), "");
  EXPECT_EQ(slurp(dir + "/rank.1/stderr"), "err 1\n");
  if (std::system(("rm -rf '" + dir + "'").c_str()) != 0) ADD_FAILURE() << "rm " << dir;

  RunResult all = run({"-n", "3", "--stdin", "all", "--tag-output", "cat"}, {}, 30, &input);
  ASSERT_EQ(all.status, 0) << all.err;
  for (int rank = 0; rank < 3; ++rank) {
    std::string t = "[" + std::to_string(rank) + "] ";
    EXPECT_NE(all.out.find(t + "line one\n"), std::string::npos) << all.out;
    EXPECT_NE(all.out.find(t + "line two\n"), std::string::npos) << all.out;
  }
}

}  // namespace

namespace {

// Runs `cmd` with /bin/sh and returns its output; `cpu_s` gets the CPU time
// of everything it waited for (accrun included).
std::string shell_output(const std::string& cmd, double* cpu_s = nullptr) {
  int p[2];
  EXPECT_EQ(pipe(p), 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(p[1], 1);
    close(p[0]);
    close(p[1]);
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(p[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(p[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(p[0]);
  int status = 0;
  struct rusage ru {};
  wait4(pid, &status, 0, &ru);
  if (cpu_s != nullptr)
    *cpu_s = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
             static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  return out;
}

}  // namespace

// Input that ends before the rank reads it arrives whole (a chunk used to be
// overwritten by the next one: 84464 of 150000 bytes).
TEST(Launcher, StdinArrivesWholeWhenTheWriterEndsFirst) {
  std::string out = shell_output("head -c 150000 /dev/zero | " + std::string(ACCRUN_EXE) +
                                 " -n 1 sh -c 'sleep 1; wc -c'");
  EXPECT_EQ(out, "150000\n");
}

// accrun started with its standard output closed (>&-): output for it
// cannot be written, as for a reader that went away (it used to go to
// /dev/null with status 0); a job that writes none ends normally.
TEST(Launcher, OutputToAClosedStandardOutputIsAnError) {
  const std::string a = ACCRUN_EXE;
  // A rank that keeps writing (one that ended first leaves status 1).
  std::string out = shell_output("exec 3>&1; " + a + " -n 2 yes >&- 2>&3; echo \"exit=$?\"; " + a +
                                 " -n 2 /bin/true >&-; echo \"exit=$?\"");
  EXPECT_EQ(out,
            "accrun: cannot write the ranks' standard output: Bad file descriptor; closing it for every rank (a rank "
            "writing to it gets SIGPIPE)\nexit=141\nexit=0\n");
}

// A rank that closes its stdin while accrun has nothing to write costs
// nothing (its pipe's error state used to wake the loop ~8,000 times a second).
TEST(Launcher, ARankThatClosesItsStdinCostsNothing) {
  double cpu = 0;
  shell_output("sleep 3 | " + std::string(ACCRUN_EXE) + " -n 1 sh -c 'exec 0<&-; sleep 2'", &cpu);
  EXPECT_LT(cpu, 0.5) << "CPU seconds used while the rank slept";
}

namespace {

// The state letter of /proc/PID/stat ('S', 'T', ...), or '?' once gone.
char proc_state(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return '?';
  size_t close_paren = line.rfind(')');
  return close_paren != std::string::npos && close_paren + 2 < line.size() ? line[close_paren + 2] : '?';
}

bool wait_state(pid_t pid, char want) {
  for (int i = 0; i < 200; ++i) {
    if (proc_state(pid) == want) return true;
    usleep(10000);
  }
  return false;
}

}  // namespace

// Ctrl-Z stops the ranks and then accrun; fg (SIGCONT to accrun) resumes
// them all, as a shell job would.
TEST(Launcher, SigtstpStopsTheRanksAndSigcontResumesThem) {
  pid_t pid = fork();
  if (pid == 0) {
    int null = open("/dev/null", O_RDWR);
    dup2(null, 0);
    dup2(null, 1);
    execl(ACCRUN_EXE, ACCRUN_EXE, "-n", "2", "--timeout", "30", "sleep", "20", static_cast<char*>(nullptr));
    _exit(127);
  }
  // The ranks: accrun's descendants (children of its node agent) that run
  // sleep.
  std::vector<pid_t> ranks;
  for (int i = 0; i < 300 && ranks.size() < 2; ++i) {
    ranks.clear();
    std::vector<pid_t> todo{pid};
    while (!todo.empty()) {
      pid_t p = todo.back();
      todo.pop_back();
      std::ifstream f("/proc/" + std::to_string(p) + "/task/" + std::to_string(p) + "/children");
      pid_t c;
      while (f >> c) {
        todo.push_back(c);
        std::ifstream comm("/proc/" + std::to_string(c) + "/comm");
        std::string name;
        comm >> name;
        if (name == "sleep") ranks.push_back(c);
      }
    }
    usleep(10000);
  }
  ASSERT_EQ(ranks.size(), 2U);
  kill(pid, SIGTSTP);
  EXPECT_TRUE(wait_state(pid, 'T')) << "accrun did not stop";
  for (pid_t r : ranks) EXPECT_TRUE(wait_state(r, 'T')) << "rank " << r << " did not stop";
  kill(pid, SIGCONT);
  for (pid_t r : ranks) EXPECT_TRUE(wait_state(r, 'S')) << "rank " << r << " did not resume";
  EXPECT_TRUE(wait_state(pid, 'S')) << "accrun did not resume";
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 143) << status;
}
