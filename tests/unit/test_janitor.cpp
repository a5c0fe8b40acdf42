// The sweep of stale job directories and the owner lock that marks a live
// job (launcher/src/agent/janitor.hpp).  Each test works in its own temporary
// roots, never in the real /tmp or /dev/shm.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "agent/janitor.hpp"

namespace fs = std::filesystem;
using accrun::launcher::hold_owner_lock;
using accrun::launcher::Janitor;
using accrun::launcher::make_private_dir;
using accrun::launcher::sweep_stale_job_dirs;

namespace {

// Two private roots standing in for $TMPDIR and /dev/shm.
class Sweep : public ::testing::Test {
 protected:
  void SetUp() override {
    for (auto* root : {&tmp_, &shm_}) {
      std::string tmpl = (fs::temp_directory_path() / "accrun-sweep-test.XXXXXX").string();
      ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
      *root = tmpl;
    }
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(tmp_, ec);
    fs::remove_all(shm_, ec);
  }
  static std::string job_name(const std::string& id) { return "accrun." + std::to_string(getuid()) + "." + id; }
  // A job directory as accrun makes it (0700), with something inside.
  fs::path make_job(const fs::path& root, const std::string& id) {
    fs::path d = root / job_name(id);
    EXPECT_TRUE(make_private_dir(d.string()).is_ok());
    EXPECT_TRUE(make_private_dir((d / "job").string()).is_ok());
    std::ofstream(d / "job" / "data") << "x";
    return d;
  }
  static void age(const fs::path& d, int seconds) {
    timespec times[2];
    clock_gettime(CLOCK_REALTIME, &times[0]);
    times[0].tv_sec -= seconds;
    times[1] = times[0];
    ASSERT_EQ(utimensat(AT_FDCWD, d.c_str(), times, AT_SYMLINK_NOFOLLOW), 0);
  }
  void sweep() { sweep_stale_job_dirs(tmp_.string(), shm_.string()); }

  fs::path tmp_, shm_;
};

TEST_F(Sweep, HeldOwnerLockKeepsTheJobAndReleasedOneMakesItStale) {
  fs::path a = make_job(tmp_, "0a1b2c3d4e5f");
  fs::path b = make_job(shm_, "0a1b2c3d4e5f");
  auto la = hold_owner_lock(a.string());
  auto lb = hold_owner_lock(b.string());
  ASSERT_TRUE(la.is_ok()) << la.status().message();
  ASSERT_TRUE(lb.is_ok()) << lb.status().message();
  // The owner file says who holds it, under its final name only.
  std::ifstream in(a / "owner");
  int pid = 0;
  in >> pid;
  EXPECT_EQ(pid, getpid());
  EXPECT_EQ(std::distance(fs::directory_iterator(a), fs::directory_iterator()), 2);  // job, owner
  age(a, 3600);
  sweep();
  EXPECT_TRUE(fs::exists(a / "job" / "data"));
  EXPECT_TRUE(fs::exists(b / "job" / "data"));
  close(*la);  // the owner died
  sweep();
  EXPECT_FALSE(fs::exists(a));
  EXPECT_TRUE(fs::exists(b / "job" / "data"));
  close(*lb);
  sweep();
  EXPECT_FALSE(fs::exists(b));
}

TEST_F(Sweep, HoldOwnerLockFailsCleanly) {
  fs::path a = make_job(tmp_, "abcdef");
  auto first = hold_owner_lock(a.string());
  ASSERT_TRUE(first.is_ok());
  auto second = hold_owner_lock(a.string());  // `owner` exists already
  ASSERT_FALSE(second.is_ok());
  EXPECT_NE(second.status().message().find("owner"), std::string::npos) << second.status().message();
  EXPECT_EQ(std::distance(fs::directory_iterator(a), fs::directory_iterator()), 2);  // no temporary left
  close(*first);
  auto missing = hold_owner_lock((tmp_ / "nope").string());
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("nope"), std::string::npos);
}

TEST_F(Sweep, DirectoryWithoutOwnerIsStaleOnlyWhenOld) {
  fs::path young = make_job(tmp_, "111111111111");
  fs::path old = make_job(shm_, "222222222222");
  age(old, accrun::launcher::kOwnerlessGraceSeconds + 60);
  sweep();
  EXPECT_TRUE(fs::exists(young / "job" / "data"));  // may be a job between mkdir and its lock
  EXPECT_FALSE(fs::exists(old));
}

TEST_F(Sweep, OtherNamesAreLeftAlone) {
  const std::string uid = std::to_string(getuid());
  for (const std::string& n : {"accrun." + uid + ".lone.1.abcdef", "accrun." + uid + ".pmix.1.abcdef",
                               "accrun." + uid + ".XYZ", "accrun." + uid + ".", "accrun." + uid + "1.abc",
                               std::string("accrun.abc"), std::string("other.dir")}) {
    fs::path d = tmp_ / n;
    ASSERT_TRUE(fs::create_directory(d)) << n;
    ASSERT_EQ(chmod(d.c_str(), 0700), 0);
    std::ofstream(d / "data") << "x";
    age(d, 3600);
  }
  sweep();
  EXPECT_EQ(std::distance(fs::directory_iterator(tmp_), fs::directory_iterator()), 7);
}

TEST_F(Sweep, DirectoriesThatAreNotOursAreLeftAlone) {
  // Our own name but open to everyone: somebody else may have put files in it.
  fs::path open_dir = make_job(tmp_, "aaaaaaaaaaaa");
  ASSERT_EQ(chmod(open_dir.c_str(), 0777), 0);
  age(open_dir, 3600);
  // A link with a job's name to a stale-looking directory elsewhere.
  fs::path target = make_job(shm_, "bbbbbbbbbbbb");
  ASSERT_EQ(chmod(target.c_str(), 0700), 0);
  fs::path elsewhere = shm_ / "elsewhere";
  fs::rename(target, elsewhere);
  age(elsewhere, 3600);
  fs::path link = tmp_ / job_name("cccccccccccc");
  fs::create_directory_symlink(elsewhere, link);
  sweep();
  EXPECT_TRUE(fs::exists(open_dir / "job" / "data"));
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_TRUE(fs::exists(elsewhere / "job" / "data"));
  if (geteuid() != 0) GTEST_SKIP() << "needs root to make a directory owned by another uid";
  // Another user's directory with a name of ours, 0700 and 0777.
  for (mode_t mode : {0700, 0777}) {
    fs::path foreign = make_job(tmp_, mode == 0700 ? "dddddddddddd" : "eeeeeeeeeeee");
    ASSERT_EQ(chmod(foreign.c_str(), mode), 0);
    ASSERT_EQ(chown(foreign.c_str(), 65534, 65534), 0);
    ASSERT_EQ(chown((foreign / "job").c_str(), 65534, 65534), 0);
    age(foreign, 3600);
    sweep();
    EXPECT_TRUE(fs::exists(foreign / "job" / "data")) << foreign;
  }
}

// The janitor keeps a copy of the owner lock: the job stays live while
// either accrun or the janitor lives, and is stale once both are gone.
TEST_F(Sweep, JanitorHoldsTheOwnerLockUntilItDies) {
  fs::path a = tmp_ / job_name("0123456789ab");
  auto jan = Janitor::start({a.string()});
  ASSERT_TRUE(jan.is_ok()) << jan.status().message();
  Janitor janitor = std::move(*jan);
  ASSERT_TRUE(make_private_dir(a.string()).is_ok());
  auto lock = hold_owner_lock(a.string());
  ASSERT_TRUE(lock.is_ok()) << lock.status().message();
  ASSERT_TRUE(janitor.hold(*lock).is_ok());
  close(*lock);  // accrun is gone, the janitor is not
  // Whether or not the janitor has read it yet, the descriptor in flight
  // keeps the open file, and so the lock, alive.
  sweep();
  EXPECT_TRUE(fs::exists(a));
  ASSERT_EQ(kill(janitor.pid(), SIGKILL), 0);  // and now the janitor too
  int status = 0;
  ASSERT_EQ(waitpid(janitor.pid(), &status, 0), janitor.pid());
  janitor.dismiss(/*reaped=*/true);
  sweep();
  EXPECT_FALSE(fs::exists(a));
}

TEST(Janitor, HoldWithoutAJanitorIsAnError) {
  Janitor none;
  EXPECT_EQ(none.hold(0).code(), accrun::Code::kInvalidUsage);
}

}  // namespace
