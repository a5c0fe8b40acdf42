// The C API in a lone process (no launcher): a job of one rank.  Each test
// runs in its own process (gtest_discover_tests), so init state is fresh.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "accrun/accrun.h"

namespace {

std::string lone_prefix(pid_t pid) {
  return "accrun." + std::to_string(getuid()) + ".lone." + std::to_string(pid) + ".";
}

// This process's private directories (tests run in parallel, each in its
// own process, so another process's directories come and go meanwhile).
std::set<std::string> lone_dirs() {
  std::set<std::string> out;
  std::string prefix = lone_prefix(getpid());
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec))
    if (e.path().filename().string().rfind(prefix, 0) == 0) out.insert(e.path().string());
  return out;
}

TEST(RuntimeApi, GettersBeforeInit) {
  EXPECT_EQ(accrun_rank(), -1);
  EXPECT_EQ(accrun_size(), -1);
  EXPECT_EQ(accrun_local_rank(), -1);
  EXPECT_EQ(accrun_local_size(), -1);
  EXPECT_EQ(accrun_pod("pod"), nullptr);
  EXPECT_EQ(accrun_accelerator_type("GPU"), nullptr);
  int count = 5;
  EXPECT_EQ(accrun_accelerator_ids("GPU", nullptr, 0, &count), ACCRUN_ERR_INVALID_USAGE);
  EXPECT_EQ(accrun_put("k", "v", 1), ACCRUN_ERR_INVALID_USAGE);
  EXPECT_NE(std::string(accrun_last_error()).find("accrun_init"), std::string::npos);
  EXPECT_EQ(accrun_finalize(), ACCRUN_ERR_INVALID_USAGE);
}

TEST(RuntimeApi, StrerrorCoversEveryCode) {
  std::set<std::string> seen;
  for (int c = ACCRUN_SUCCESS; c <= ACCRUN_ERR_NO_MEMORY; ++c) {
    const char* s = accrun_strerror(c);
    ASSERT_NE(s, nullptr);
    EXPECT_GT(std::strlen(s), 0u);
    seen.insert(s);
  }
  EXPECT_EQ(seen.size(), 9u);
  EXPECT_STREQ(accrun_strerror(ACCRUN_ERR_TIMEOUT), "timeout");
  EXPECT_STREQ(accrun_strerror(99), "unknown accrun status code");
}

TEST(RuntimeApi, LoneProcessIsAJobOfOne) {
  auto before = lone_dirs();
  ASSERT_EQ(accrun_init(), ACCRUN_SUCCESS) << accrun_last_error();
  EXPECT_EQ(accrun_init(), ACCRUN_ERR_INVALID_USAGE);
  EXPECT_EQ(accrun_rank(), 0);
  EXPECT_EQ(accrun_size(), 1);
  EXPECT_EQ(accrun_local_rank(), 0);
  EXPECT_EQ(accrun_local_size(), 1);
  auto during = lone_dirs();
  EXPECT_EQ(during.size(), before.size() + 1);  // a private shm directory
  int ids[4] = {-1, -1, -1, -1}, count = -1;
  EXPECT_EQ(accrun_accelerator_ids("TPU", ids, 4, &count), ACCRUN_SUCCESS);
  EXPECT_EQ(count, 0);
  EXPECT_EQ(accrun_accelerator_ids(nullptr, ids, 4, &count), ACCRUN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accrun_accelerator_ids("GPU", nullptr, 4, &count), ACCRUN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accrun_accelerator_ids("GPU", ids, 4, nullptr), ACCRUN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accrun_pod("galaxy"), nullptr);
  ASSERT_EQ(accrun_finalize(), ACCRUN_SUCCESS);
  EXPECT_EQ(accrun_rank(), -1);
  EXPECT_EQ(lone_dirs(), before);  // removed at finalize
  // Init again after finalize works.
  ASSERT_EQ(accrun_init(), ACCRUN_SUCCESS) << accrun_last_error();
  EXPECT_EQ(accrun_finalize(), ACCRUN_SUCCESS);
}

TEST(RuntimeApi, DirectoryOfADeadLoneProcessIsRemovedAtTheNextInit) {
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);  // its pid is now free
  std::filesystem::path dead = "/dev/shm/" + lone_prefix(child) + "Xq3zLm";
  std::filesystem::path alive = "/dev/shm/" + lone_prefix(getppid()) + "Xq3zLm";
  // A dead pid whose owner lock is held: a live process of another pid
  // namespace sharing /dev/shm.
  std::filesystem::path elsewhere = "/dev/shm/" + lone_prefix(child) + "Yr4aNp";
  for (const auto& d : {dead, alive, elsewhere}) {
    std::filesystem::create_directories(d);
    std::FILE* f = std::fopen((d / "owner").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
  }
  const int lock = open((elsewhere / "owner").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(lock, 0);
  ASSERT_EQ(flock(lock, LOCK_EX), 0);
  ASSERT_EQ(accrun_init(), ACCRUN_SUCCESS) << accrun_last_error();
  EXPECT_FALSE(std::filesystem::exists(dead));
  EXPECT_TRUE(std::filesystem::exists(alive));      // its process still runs
  EXPECT_TRUE(std::filesystem::exists(elsewhere));  // its owner holds the lock
  EXPECT_EQ(accrun_finalize(), ACCRUN_SUCCESS);
  close(lock);
  std::filesystem::remove_all(alive);
  std::filesystem::remove_all(elsewhere);
}

// A dead pid's name is not enough: a directory of another user (or one
// open to others, or a link) with a matching name is left alone, and so is
// everything in it.
TEST(RuntimeApi, MatchingDirectoriesThatAreNotOursAreLeftAlone) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to make a directory owned by another uid";
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  const std::filesystem::path shm = "/dev/shm";
  const std::filesystem::path foreign = shm / (lone_prefix(child) + "Fo0rgn");
  const std::filesystem::path open_dir = shm / (lone_prefix(child) + "Op3nDr");
  const std::filesystem::path link = shm / (lone_prefix(child) + "L1nkDr");
  const std::filesystem::path target = shm / ("accrun-test-target." + std::to_string(getpid()));
  for (const auto& d : {foreign, open_dir, target}) {
    ASSERT_TRUE(std::filesystem::create_directory(d)) << d;
    std::FILE* f = std::fopen((d / "data").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
    ASSERT_EQ(chmod(d.c_str(), 0777), 0);
  }
  ASSERT_EQ(chown(foreign.c_str(), 65534, 65534), 0);
  ASSERT_EQ(chown((foreign / "data").c_str(), 65534, 65534), 0);
  std::filesystem::create_directory_symlink(target, link);
  ASSERT_EQ(accrun_init(), ACCRUN_SUCCESS) << accrun_last_error();
  EXPECT_EQ(accrun_finalize(), ACCRUN_SUCCESS);
  EXPECT_TRUE(std::filesystem::exists(foreign / "data"));
  EXPECT_TRUE(std::filesystem::exists(open_dir / "data"));
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_TRUE(std::filesystem::exists(target / "data"));
  for (const auto& d : {foreign, open_dir, link, target}) std::filesystem::remove_all(d);
}

TEST(RuntimeApi, GroupArgumentErrors) {
  ASSERT_EQ(accrun_init(), ACCRUN_SUCCESS) << accrun_last_error();
  accrun_group_t g = nullptr;
  EXPECT_EQ(accrun_group_init("g", 1, 0, ACCRUN_BACKEND_STORE, nullptr), ACCRUN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accrun_group_init(nullptr, 1, 0, ACCRUN_BACKEND_STORE, &g), ACCRUN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accrun_group_init("", 1, 0, ACCRUN_BACKEND_STORE, &g), ACCRUN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accrun_group_init("g", 0, 0, ACCRUN_BACKEND_STORE, &g), ACCRUN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accrun_group_init("g", 2, 2, ACCRUN_BACKEND_STORE, &g), ACCRUN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(accrun_last_error()).find("rank 2 is out of range"), std::string::npos)
      << accrun_last_error();
  EXPECT_EQ(accrun_group_init("g", 1, -1, ACCRUN_BACKEND_STORE, &g), ACCRUN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accrun_group_init("g", 1, 0, static_cast<accrun_backend_t>(9), &g), ACCRUN_ERR_INVALID_ARGUMENT);
  // More members than the job has ranks can never gather: at once, not
  // after the init timeout.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(accrun_group_init("g", 100000, 0, ACCRUN_BACKEND_STORE, &g), ACCRUN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(accrun_last_error()).find("world size 100000 is larger than the job, which has 1 rank:"),
            std::string::npos)
      << accrun_last_error();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(500));
  EXPECT_EQ(g, nullptr);
  EXPECT_EQ(accrun_group_rank(nullptr), -1);
  EXPECT_EQ(accrun_group_size(nullptr), -1);
  EXPECT_EQ(accrun_barrier(nullptr), ACCRUN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accrun_group_destroy(nullptr), ACCRUN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accrun_finalize(), ACCRUN_SUCCESS);
}

TEST(RuntimeApi, StoreGroupOfOneAndDataArgumentErrors) {
  ASSERT_EQ(accrun_init(), ACCRUN_SUCCESS) << accrun_last_error();
  accrun_group_t g = nullptr;
  ASSERT_EQ(accrun_group_init("solo", 1, 0, ACCRUN_BACKEND_STORE, &g), ACCRUN_SUCCESS) << accrun_last_error();
  EXPECT_EQ(accrun_group_rank(g), 0);
  EXPECT_EQ(accrun_group_size(g), 1);
  float in[4] = {1, 2, 3, 4}, out[4] = {};
  ASSERT_EQ(accrun_allreduce(g, in, out, 4, ACCRUN_FLOAT32, ACCRUN_SUM, nullptr), ACCRUN_SUCCESS)
      << accrun_last_error();
  EXPECT_EQ(out[3], 4.0f);
  EXPECT_EQ(accrun_allreduce(g, in, out, 4, static_cast<accrun_dtype_t>(8), ACCRUN_SUM, nullptr),
            ACCRUN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(accrun_last_error()).find("dtype 8"), std::string::npos);
  EXPECT_EQ(accrun_allreduce(g, in, out, 4, ACCRUN_FLOAT32, static_cast<accrun_op_t>(4), nullptr),
            ACCRUN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accrun_allreduce(g, nullptr, out, 4, ACCRUN_FLOAT32, ACCRUN_SUM, nullptr), ACCRUN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accrun_allreduce(g, in, out, 4, ACCRUN_FLOAT32, ACCRUN_SUM, reinterpret_cast<void*>(0x1)),
            ACCRUN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(accrun_last_error()).find("stream"), std::string::npos);
  EXPECT_EQ(accrun_broadcast(g, out, 4, ACCRUN_FLOAT32, 1, nullptr), ACCRUN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(accrun_last_error()).find("root 1 is out of range"), std::string::npos);
  EXPECT_EQ(accrun_reduce(g, in, out, 4, ACCRUN_FLOAT32, ACCRUN_SUM, -1, nullptr), ACCRUN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accrun_send(g, in, 4, ACCRUN_FLOAT32, 3, nullptr), ACCRUN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accrun_recv(g, out, 4, ACCRUN_FLOAT32, -2, nullptr), ACCRUN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accrun_allgather(g, in, out, SIZE_MAX / 2, ACCRUN_FLOAT32, nullptr), ACCRUN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accrun_barrier(g), ACCRUN_SUCCESS) << accrun_last_error();
  EXPECT_EQ(accrun_group_set_timeout(g, 1000), ACCRUN_SUCCESS);
  ASSERT_EQ(accrun_group_destroy(g), ACCRUN_SUCCESS);
  EXPECT_EQ(accrun_group_destroy(g), ACCRUN_ERR_INVALID_ARGUMENT);  // the handle is dead
  // The name can be declared again (a new epoch).
  ASSERT_EQ(accrun_group_init("solo", 1, 0, ACCRUN_BACKEND_AUTO, &g), ACCRUN_SUCCESS) << accrun_last_error();
  EXPECT_EQ(accrun_finalize(), ACCRUN_SUCCESS);  // destroys groups still alive
}

TEST(RuntimeApi, ObjectStoreInALoneProcess) {
  ASSERT_EQ(accrun_init(), ACCRUN_SUCCESS) << accrun_last_error();
  const char msg[] = "payload";
  ASSERT_EQ(accrun_put("obj", msg, sizeof msg), ACCRUN_SUCCESS) << accrun_last_error();
  EXPECT_EQ(accrun_put("obj", msg, sizeof msg), ACCRUN_ERR_INVALID_USAGE);
  char buf[64] = {};
  size_t len = 0;
  ASSERT_EQ(accrun_get("obj", buf, sizeof buf, &len, 0), ACCRUN_SUCCESS);
  EXPECT_EQ(len, sizeof msg);
  EXPECT_STREQ(buf, msg);
  EXPECT_EQ(accrun_get("obj", buf, sizeof buf, nullptr, 0), ACCRUN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accrun_get("missing", buf, sizeof buf, &len, 0), ACCRUN_ERR_NOT_FOUND);
  EXPECT_EQ(accrun_get("missing", buf, sizeof buf, &len, 50), ACCRUN_ERR_TIMEOUT);
  EXPECT_EQ(accrun_put(nullptr, msg, 1), ACCRUN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accrun_put("x", nullptr, 1), ACCRUN_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(accrun_delete("obj"), ACCRUN_SUCCESS);
  EXPECT_EQ(accrun_delete("obj"), ACCRUN_ERR_NOT_FOUND);
  EXPECT_EQ(accrun_get("obj", buf, sizeof buf, &len, 0), ACCRUN_ERR_NOT_FOUND);
  EXPECT_EQ(accrun_finalize(), ACCRUN_SUCCESS);
}

TEST(RuntimeApi, LastErrorIsPerThread) {
  ASSERT_EQ(accrun_init(), ACCRUN_SUCCESS);
  EXPECT_EQ(accrun_get("nope", nullptr, 0, nullptr, 0), ACCRUN_ERR_INVALID_ARGUMENT);
  std::string mine = accrun_last_error();
  std::string theirs;
  std::thread t([&] {
    EXPECT_EQ(accrun_delete("absent"), ACCRUN_ERR_NOT_FOUND);
    theirs = accrun_last_error();
  });
  t.join();
  EXPECT_EQ(accrun_last_error(), mine);
  EXPECT_NE(theirs.find("absent"), std::string::npos);
  EXPECT_NE(mine, theirs);
  EXPECT_EQ(accrun_finalize(), ACCRUN_SUCCESS);
}

// Threads that keep calling do not starve accrun_finalize (before: it
// waited for ever behind their shared hold of the library's state, 3 of 3
// with two such threads); their calls after it fail as documented.
TEST(RuntimeApi, FinalizeIsNotStarvedByThreadsThatKeepCalling) {
  ASSERT_EQ(accrun_init(), ACCRUN_SUCCESS) << accrun_last_error();
  std::atomic<bool> stop{false};
  std::atomic<int> after{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&] {
      char b[8];
      std::size_t len = 0;
      while (!stop.load())
        if (accrun_get("flag", b, sizeof b, &len, 0) == ACCRUN_ERR_INVALID_USAGE) {
          ++after;
          break;
        }
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::atomic<bool> finalized{false};
  std::thread fin([&] {
    EXPECT_EQ(accrun_finalize(), ACCRUN_SUCCESS) << accrun_last_error();
    finalized = true;
  });
  const auto t0 = std::chrono::steady_clock::now();
  while (!finalized.load() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_TRUE(finalized.load()) << "accrun_finalize did not return within 5 s";
  // Each caller's next call after it fails; a caller the scheduler has not
  // run since is given 5 s to make that call.
  const auto t1 = std::chrono::steady_clock::now();
  while (finalized.load() && after.load() < 4 && std::chrono::steady_clock::now() - t1 < std::chrono::seconds(5))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  stop = true;  // (so a starved finalize ends and the test too)
  fin.join();
  for (auto& c : callers) c.join();
  EXPECT_EQ(after.load(), 4) << "every caller's next call fails once finalize ran";
}

// A get that waits for ever (timeout -1) does not hold finalize up: it
// ends with ACCRUN_ERR_INVALID_USAGE saying why (before: finalize waited
// for ever).
TEST(RuntimeApi, FinalizeEndsAGetThatWaitsForAKey) {
  ASSERT_EQ(accrun_init(), ACCRUN_SUCCESS) << accrun_last_error();
  int rc = -1;
  std::string why;
  std::thread waiter([&] {
    char b[8];
    std::size_t len = 0;
    rc = accrun_get("never", b, sizeof b, &len, -1);
    why = accrun_last_error();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(accrun_finalize(), ACCRUN_SUCCESS) << accrun_last_error();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  waiter.join();
  EXPECT_EQ(rc, ACCRUN_ERR_INVALID_USAGE);
  EXPECT_NE(why.find("accrun_finalize was called while this call waited"), std::string::npos) << why;
}

TEST(RuntimeApi, GroupsFromSeveralThreads) {
  ASSERT_EQ(accrun_init(), ACCRUN_SUCCESS);
  std::vector<std::thread> ts;
  std::atomic<int> ok{0};
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      accrun_group_t g;
      if (accrun_group_init(("t" + std::to_string(t)).c_str(), 1, 0, ACCRUN_BACKEND_STORE, &g) != ACCRUN_SUCCESS)
        return;
      int v = t, r = 0;
      for (int i = 0; i < 100; ++i)
        if (accrun_allreduce(g, &v, &r, 1, ACCRUN_INT32, ACCRUN_MAX, nullptr) != ACCRUN_SUCCESS) return;
      if (r == t && accrun_group_destroy(g) == ACCRUN_SUCCESS) ++ok;
    });
  for (auto& th : ts) th.join();
  EXPECT_EQ(ok.load(), 4);
  EXPECT_EQ(accrun_finalize(), ACCRUN_SUCCESS);
}

TEST(RuntimeApi, OneGroupFromSeveralThreadsAtOnce) {
  ASSERT_EQ(accrun_init(), ACCRUN_SUCCESS);
  accrun_group_t g = nullptr;
  ASSERT_EQ(accrun_group_init("shared", 1, 0, ACCRUN_BACKEND_STORE, &g), ACCRUN_SUCCESS) << accrun_last_error();
  std::vector<std::thread> ts;
  std::atomic<int> ok{0};
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      std::vector<int> v(64, t), r(64, -1);
      for (int i = 0; i < 2000; ++i) {
        if (accrun_allreduce(g, v.data(), r.data(), v.size(), ACCRUN_INT32, ACCRUN_SUM, nullptr) != ACCRUN_SUCCESS ||
            r != v)
          return;
      }
      ++ok;
    });
  for (auto& th : ts) th.join();
  EXPECT_EQ(ok.load(), 4);  // calls on one group are serialised
  EXPECT_EQ(accrun_finalize(), ACCRUN_SUCCESS);
}

// A call racing accrun_group_destroy or accrun_finalize either completes or
// fails with a clear error; it never touches a freed group.  Raced makes a
// one-rank store group and a thread that calls on it until a call fails.
struct Raced {
  accrun_group_t g = nullptr;
  std::atomic<bool> started{false};
  std::string error;
  std::atomic<int> rc{-1};  // -1 while the caller runs
  std::thread caller;

  void start() {
    ASSERT_EQ(accrun_init(), ACCRUN_SUCCESS);
    ASSERT_EQ(accrun_group_init("raced", 1, 0, ACCRUN_BACKEND_STORE, &g), ACCRUN_SUCCESS) << accrun_last_error();
    caller = std::thread([this] {
      int v = 1, r = 0, code;
      while ((code = accrun_allreduce(g, &v, &r, 1, ACCRUN_INT32, ACCRUN_SUM, nullptr)) == ACCRUN_SUCCESS)
        started = true;
      error = accrun_last_error();
      rc = code;
    });
    while (!started && rc == -1) std::this_thread::yield();
    ASSERT_TRUE(started) << "the first call failed: " << error;
  }
  ~Raced() {
    if (caller.joinable()) caller.join();
  }
};

TEST(RuntimeApi, DestroyWhileAnotherThreadCalls) {
  Raced raced;
  ASSERT_NO_FATAL_FAILURE(raced.start());
  EXPECT_EQ(accrun_group_destroy(raced.g), ACCRUN_SUCCESS) << accrun_last_error();
  raced.caller.join();
  EXPECT_EQ(raced.rc, ACCRUN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(raced.error.find("not a live group"), std::string::npos) << raced.error;
  EXPECT_EQ(accrun_finalize(), ACCRUN_SUCCESS);
}

TEST(RuntimeApi, FinalizeWhileAnotherThreadCalls) {
  Raced raced;
  ASSERT_NO_FATAL_FAILURE(raced.start());
  EXPECT_EQ(accrun_finalize(), ACCRUN_SUCCESS);
  raced.caller.join();
  EXPECT_EQ(raced.rc, ACCRUN_ERR_INVALID_USAGE);
  EXPECT_NE(raced.error.find("accrun_finalize"), std::string::npos) << raced.error;
  accrun_group_t g = raced.g;
  // The stale handle stays an error after a new accrun_init.
  ASSERT_EQ(accrun_init(), ACCRUN_SUCCESS);
  EXPECT_EQ(accrun_barrier(g), ACCRUN_ERR_INVALID_USAGE);
  EXPECT_EQ(accrun_group_destroy(g), ACCRUN_ERR_INVALID_USAGE);
  EXPECT_EQ(accrun_group_rank(g), -1);
  EXPECT_EQ(accrun_finalize(), ACCRUN_SUCCESS);
}

TEST(RuntimeApi, AForkedChildCannotUseTheLibraryNorUndoItsParent) {
  // Only the process that called accrun_init uses its job state; a child
  // forked after it (a data-loader worker, a shell-out) gets a clear error
  // from every call that would act, and its accrun_finalize (at exit, say)
  // returns at once without touching the parent's directory, group or keys.
  ASSERT_EQ(accrun_init(), ACCRUN_SUCCESS) << accrun_last_error();
  accrun_group_t g;
  ASSERT_EQ(accrun_group_init("parent", 1, 0, ACCRUN_BACKEND_STORE, &g), ACCRUN_SUCCESS) << accrun_last_error();
  const char msg[] = "kept";
  ASSERT_EQ(accrun_put("before", msg, sizeof msg), ACCRUN_SUCCESS) << accrun_last_error();
  const auto dirs = lone_dirs();
  ASSERT_EQ(dirs.size(), 1u);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Each failed check is one letter on the pipe; nothing written is a pass.
    auto fail = [&](char c) { (void)!write(pipe_fds[1], &c, 1); };
    if (accrun_rank() != 0 || accrun_size() != 1) fail('r');  // what it inherited, read only
    int v = 1, out = 0;
    if (accrun_allreduce(g, &v, &out, 1, ACCRUN_INT32, ACCRUN_SUM, nullptr) != ACCRUN_ERR_INVALID_USAGE) fail('a');
    if (std::string(accrun_last_error()).find("fork") == std::string::npos) fail('m');
    if (accrun_put("child", msg, sizeof msg) != ACCRUN_ERR_INVALID_USAGE) fail('p');
    // accrun_init_mpi's failure is the last error too (it names the call).
    if (accrun_init_mpi(nullptr, nullptr) != ACCRUN_ERR_INVALID_USAGE) fail('x');
    if (std::string(accrun_last_error()).rfind("accrun_init_mpi", 0) != 0) fail('l');
    accrun_group_t g2;
    if (accrun_group_init("child", 1, 0, ACCRUN_BACKEND_STORE, &g2) != ACCRUN_ERR_INVALID_USAGE) fail('g');
    if (accrun_init() != ACCRUN_ERR_INVALID_USAGE) fail('i');
    if (accrun_finalize() != ACCRUN_SUCCESS) fail('f');
    _exit(0);
  }
  close(pipe_fds[1]);
  int st = 0;
  for (int i = 0; i < 500 && waitpid(child, &st, WNOHANG) == 0; ++i) usleep(10'000);
  if (waitpid(child, &st, WNOHANG) == 0) {
    kill(child, SIGKILL);
    waitpid(child, &st, 0);
    FAIL() << "the child did not return from its calls within 5 s";
  }
  std::string letters;
  char c;
  while (read(pipe_fds[0], &c, 1) == 1) letters += c;
  close(pipe_fds[0]);
  EXPECT_EQ(letters, "")
      << "r: getters, a: allreduce, m: message, p: put, x: init_mpi, l: its last error, "
         "g: group_init, i: init, f: finalize";
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  // The parent goes on as before.
  EXPECT_EQ(lone_dirs(), dirs);
  int v = 2, out = 0;
  EXPECT_EQ(accrun_allreduce(g, &v, &out, 1, ACCRUN_INT32, ACCRUN_SUM, nullptr), ACCRUN_SUCCESS) << accrun_last_error();
  EXPECT_EQ(out, 2);
  char buf[16] = {};
  size_t len = 0;
  EXPECT_EQ(accrun_get("before", buf, sizeof buf, &len, 0), ACCRUN_SUCCESS) << accrun_last_error();
  EXPECT_STREQ(buf, msg);
  EXPECT_EQ(accrun_group_destroy(g), ACCRUN_SUCCESS);
  EXPECT_EQ(accrun_finalize(), ACCRUN_SUCCESS);
  EXPECT_TRUE(lone_dirs().empty());
}

}  // namespace
