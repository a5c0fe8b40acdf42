// No other local user can join a running job (accrun(7) SECURITY): an
// intruder of another uid, with the job's server address and a faked uid,
// is refused at every step while the job runs on unaffected; and the
// kernel's view of a connection's owner, on which that rests; and no
// library is ever loaded from a job's working directory.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../../unit/loopback.hpp"
#include "peer_guard.hpp"

namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kIntruder = "accrun-intruder";

std::string run_capture(const std::string& cmd, int* status = nullptr) {
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  int st = pclose(f);
  if (status) *status = st;
  return out;
}

// A second local user, created for the test when it does not exist (and
// removed again by the suite's end if this test made it).
class OtherUser {
 public:
  OtherUser() {
    if (geteuid() != 0) {
      why_ = "creating a second user needs root";
      return;
    }
    if (getpwnam(kIntruder) == nullptr) {
      int st = 0;
      std::string out = run_capture(std::string("useradd --system --no-create-home --shell /usr/sbin/nologin ") +
                                        kIntruder + " 2>&1",
                                    &st);
      if (st != 0) {
        why_ = "useradd failed: " + out;
        return;
      }
      created_ = true;
    }
    const passwd* pw = getpwnam(kIntruder);
    if (pw == nullptr) {
      why_ = "user not found after useradd";
      return;
    }
    uid_ = pw->pw_uid;
    gid_ = pw->pw_gid;
    if (run_capture("command -v setpriv").empty()) why_ = "setpriv (util-linux) is missing";
  }
  ~OtherUser() {
    if (created_) run_capture(std::string("userdel ") + kIntruder + " 2>&1");
  }
  const std::string& why_not() const { return why_; }
  uid_t uid() const { return uid_; }
  gid_t gid() const { return gid_; }

 private:
  std::string why_;
  bool created_ = false;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
};

// Reads lines from `fd` until `want` lines starting with `prefix` arrived or
// the deadline passed.
std::vector<std::string> read_lines(int fd, const std::string& prefix, size_t want, std::string* all,
                                    std::chrono::seconds limit) {
  std::vector<std::string> got;
  auto deadline = Clock::now() + limit;
  std::string pending;
  while (got.size() < want && Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    all->append(buf, static_cast<size_t>(n));
    pending.append(buf, static_cast<size_t>(n));
    size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      if (line.rfind(prefix, 0) == 0) got.push_back(line);
    }
  }
  return got;
}

std::string drain(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

std::vector<std::string> pmix_environment(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  std::vector<std::string> out;
  std::string var;
  while (std::getline(f, var, '\0'))
    if (var.rfind("PMIX_", 0) == 0) out.push_back(var);
  return out;
}

// Copies a file where the other user can read and execute it (the build
// tree may lie under a directory only root can enter).
std::string stage(const std::string& dir, const std::string& from) {
  std::string to = dir + "/" + from.substr(from.rfind('/') + 1);
  std::ifstream src(from, std::ios::binary);
  std::ofstream dst(to, std::ios::binary);
  dst << src.rdbuf();
  dst.close();
  chmod(to.c_str(), 0755);
  return to;
}

// The shared libraries `elf` names (readelf's NEEDED lines).
std::vector<std::string> needed(const std::string& elf) {
  std::vector<std::string> out;
  std::istringstream in(run_capture("readelf -d '" + elf + "' 2>/dev/null"));
  std::string line;
  while (std::getline(in, line)) {
    size_t open = line.find("(NEEDED)");
    size_t lb = line.find('[');
    size_t rb = line.rfind(']');
    if (open != std::string::npos && lb != std::string::npos && rb > lb) out.push_back(line.substr(lb + 1, rb - lb - 1));
  }
  return out;
}

// An empty RUNPATH entry (CMake pads the build tree's RUNPATH with them to
// edit it in place at install) is read by the loader as the working
// directory: a user running accrun in a directory another user can write
// would load that user's libhwloc.so.15, and so would every rank.
TEST(Security, NoLibraryIsLoadedFromTheWorkingDirectory) {
  if (run_capture("command -v readelf").empty()) GTEST_SKIP() << "readelf (binutils) is missing";
  std::vector<std::string> names = needed(ACCRUN_EXE);
  for (const std::string& n : needed(LIBACCRUN)) names.push_back(n);
  ASSERT_GT(names.size(), 3u) << "readelf found too few NEEDED entries";
  char dir_template[] = "/tmp/accrun-planted-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  std::string dir = dir_template;
  size_t planted = 0;
  for (const std::string& n : names) {
    // The C library and the loader stay real: the shell that starts the job
    // needs them, and planting the others shows the search order.
    if (n.rfind("libc.so", 0) == 0 || n.rfind("ld-linux", 0) == 0) continue;
    std::ifstream src(PLANTED_LIB, std::ios::binary);
    std::ofstream dst(dir + "/" + n, std::ios::binary);
    dst << src.rdbuf();
    ++planted;
  }
  ASSERT_GT(planted, 3u);
  int st = 0;
  std::string out = run_capture("cd '" + dir + "' && '" + ACCRUN_EXE + "' -n 2 '" + HELLO_EXE + "' 2>&1", &st);
  bool loaded = access((dir + "/planted-library-was-loaded").c_str(), F_OK) == 0;
  run_capture("rm -rf '" + dir + "'");
  EXPECT_FALSE(loaded) << "a library planted in the working directory was loaded; output:\n" << out;
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << out;
}

// accrun --version says whether the libraries the backends load are found
// without loading them: loading runs a library's constructors (code of
// whoever controls LD_LIBRARY_PATH's directories; libfabric's PSM
// providers alone spent ~200 ms calibrating a clock).
TEST(Security, VersionFindsLibrariesWithoutLoadingThem) {
  char dir_template[] = "/tmp/accrun-version-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  std::string dir = dir_template;
  {
    std::ifstream src(PLANTED_LIB, std::ios::binary);
    std::ofstream dst(dir + "/libnvidia-ml.so.1", std::ios::binary);
    dst << src.rdbuf();
  }
  int st = 0;
  std::string out = run_capture("cd '" + dir + "' && LD_LIBRARY_PATH='" + dir + "' '" + ACCRUN_EXE + "' --version 2>&1", &st);
  bool loaded = access((dir + "/planted-library-was-loaded").c_str(), F_OK) == 0;
  std::string missing = run_capture("LD_LIBRARY_PATH=/nonexistent ACCRUN_NVML_LIBRARY= '" + std::string(ACCRUN_EXE) +
                                    "' --version 2>&1");
  run_capture("rm -rf '" + dir + "'");
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << out;
  EXPECT_NE(out.find("libnvidia-ml.so.1 found"), std::string::npos) << out;
  EXPECT_FALSE(loaded) << "accrun --version loaded the library it looked for; output:\n" << out;
  if (access("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", F_OK) != 0 && access("/usr/lib64/libnvidia-ml.so.1", F_OK) != 0) {
    EXPECT_NE(missing.find("libnvidia-ml.so.1 not found"), std::string::npos) << missing;
  }
}

TEST(Security, AnotherUserWithAFakedUidCannotJoinReadPublishOrAbort) {
  OtherUser user;
  if (!user.why_not().empty()) GTEST_SKIP() << "cannot run as a second local user: " << user.why_not();

  char dir_template[] = "/tmp/accrun-security-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  std::string dir = dir_template;
  chmod(dir.c_str(), 0755);
  std::string intruder = stage(dir, INTRUDER_EXE);
  std::string shim = stage(dir, FAKE_ID_LIB);

  // The victim job: two ranks that wait on their stdin while we attack.
  int in[2], out[2], err[2];
  ASSERT_EQ(pipe2(in, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(err, O_CLOEXEC), 0);
  pid_t job = fork();
  if (job == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    execl(ACCRUN_EXE, ACCRUN_EXE, "-n", "2", "--stdin", "all", "--timeout", "60", VICTIM_EXE, (char*)nullptr);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  close(err[1]);
  std::string job_out;
  auto ready = read_lines(out[0], "ready ", 2, &job_out, std::chrono::seconds(30));
  ASSERT_EQ(ready.size(), 2U) << job_out;
  pid_t rank0 = std::atoi(ready[0].c_str() + 6);
  std::vector<std::string> pmix_env = pmix_environment(rank0);
  ASSERT_FALSE(pmix_env.empty());
  // Claim whichever rank printed first, with accrun's own uid.
  std::ostringstream cmd;
  cmd << "setpriv --reuid=" << user.uid() << " --regid=" << user.gid() << " --clear-groups env -i";
  for (const auto& v : pmix_env) cmd << " '" << v << "'";
  cmd << " LD_PRELOAD=" << shim << " ACCRUN_FAKE_UID=" << geteuid() << " ACCRUN_FAKE_GID=" << getegid() << " "
      << intruder << " 2>&1";
  std::string attack = run_capture(cmd.str());
  // The shim works: without it the intruder would not even claim our uid.
  for (const char* step : {"join", "read", "publish", "abort", "raw"}) {
    EXPECT_NE(attack.find(std::string(step) + " refused"), std::string::npos)
        << "step '" << step << "' was not refused:\n"
        << attack;
  }
  EXPECT_EQ(attack.find("ACCEPTED"), std::string::npos) << attack;

  // The job runs on: both ranks fence, publish and look up, and exit 0.
  close(in[1]);
  int status = -1;
  auto deadline = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < deadline && waitpid(job, &status, WNOHANG) == 0) usleep(20000);
  if (!WIFEXITED(status) && !WIFSIGNALED(status)) {
    kill(job, SIGKILL);
    waitpid(job, &status, 0);
  }
  job_out += drain(out[0]);
  std::string job_err = drain(err[0]);
  close(out[0]);
  close(err[0]);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << "\n" << job_out << job_err;
  size_t ok = 0;
  for (size_t p = job_out.find("victim ok"); p != std::string::npos; p = job_out.find("victim ok", p + 1)) ++ok;
  EXPECT_EQ(ok, 2U) << job_out << job_err;
  EXPECT_NE(job_err.find("refused a connection to the job's PMIx server"), std::string::npos) << job_err;
  EXPECT_NE(job_err.find("uid " + std::to_string(user.uid())), std::string::npos) << job_err;
  unlink(intruder.c_str());
  unlink(shim.c_str());
  rmdir(dir.c_str());
}

// The kernel's record of a connection's owner, which no process can fake.
class PeerOwner : public ::testing::Test {
 protected:
  void SetUp() override {
    listener_ = accrun::testing::listen_loopback(8, &port_);
    ASSERT_GE(listener_, 0);
  }
  void TearDown() override { close(listener_); }
  // Connects from a child process running as `uid`, returns our end.
  int connect_as(uid_t uid) {
    int sync[2];
    EXPECT_EQ(pipe(sync), 0);
    pid_t child = fork();
    if (child == 0) {
      close(sync[1]);
      if (uid != geteuid() && setuid(uid) != 0) _exit(1);
      const int fd = accrun::testing::connect_loopback(port_);
      if (fd < 0) _exit(2);
      char c;
      (void)!read(sync[0], &c, 1);  // stay connected until the parent looked
      _exit(0);
    }
    close(sync[0]);
    int fd = accrun::launcher::accept_unguarded(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    sync_ = sync[1];
    child_ = child;
    return fd;
  }
  void release() {
    close(sync_);
    waitpid(child_, nullptr, 0);
  }
  // The plain accept() of this program is the guarded one: it hands over a
  // socket already at end of file, counting `refused` more refusals.
  void expect_guarded_accept_drops(unsigned long refused) {
    unsigned long before = accrun::launcher::peer_guard_refusals();
    int fd = accept(listener_, nullptr, nullptr);
    ASSERT_GE(fd, 0);
    char c;
    EXPECT_EQ(read(fd, &c, 1), 0) << "the library must get a socket at end of file";
    close(fd);
    EXPECT_EQ(accrun::launcher::peer_guard_refusals(), before + refused);
  }
  int listener_ = -1;
  std::uint16_t port_ = 0;
  int sync_ = -1;
  pid_t child_ = -1;
};

TEST_F(PeerOwner, OwnConnectionIsOurUid) {
  int fd = connect_as(geteuid());
  ASSERT_GE(fd, 0);
  auto owner = accrun::launcher::peer_owner(fd);
  release();
  close(fd);
  ASSERT_TRUE(owner.uid.has_value()) << owner.why;
  EXPECT_EQ(*owner.uid, geteuid());
  EXPECT_NE(owner.peer.find("127.0.0.1:"), std::string::npos) << owner.peer;
}

TEST_F(PeerOwner, AnotherUidIsSeenAsIs) {
  if (geteuid() != 0) GTEST_SKIP() << "connecting as another uid needs root";
  int fd = connect_as(65534);
  ASSERT_GE(fd, 0);
  auto owner = accrun::launcher::peer_owner(fd);
  release();
  close(fd);
  ASSERT_TRUE(owner.uid.has_value()) << owner.why;
  EXPECT_EQ(*owner.uid, 65534U);
}

TEST_F(PeerOwner, GuardedAcceptRefusesAnotherUid) {
  if (geteuid() != 0) GTEST_SKIP() << "connecting as another uid needs root";
  int sync[2];
  ASSERT_EQ(pipe(sync), 0);
  pid_t child = fork();
  if (child == 0) {
    close(sync[1]);
    if (setuid(65534) != 0) _exit(1);
    const int fd = accrun::testing::connect_loopback(port_);
    if (fd < 0) _exit(2);
    char c;
    // The guard closed our connection: read sees its end at once.
    ssize_t n = read(fd, &c, 1);
    _exit(n == 0 ? 0 : 3);
  }
  close(sync[0]);
  expect_guarded_accept_drops(1);
  int st = 0;
  waitpid(child, &st, 0);
  close(sync[1]);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
}

// A client that resets its connection before the guard looks at it (a rank
// killed as it connects) is no intruder: the library gets a socket at end of
// file, and nothing is reported or counted.
TEST_F(PeerOwner, AConnectionResetBeforeTheCheckIsDroppedQuietly) {
  const int client = accrun::testing::connect_loopback(port_);
  ASSERT_GE(client, 0);
  linger now{1, 0};
  ASSERT_EQ(setsockopt(client, SOL_SOCKET, SO_LINGER, &now, sizeof now), 0);
  close(client);  // a reset, before the accept below
  expect_guarded_accept_drops(0);
}

}  // namespace
