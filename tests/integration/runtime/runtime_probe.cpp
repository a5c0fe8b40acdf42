// runtime_probe — one rank of a libaccrun integration test, started by
// test_runtime_integration under a real `accrun`.  argv[1] picks the
// scenario; every check prints "FAIL ..." and the rank exits 1, and a rank
// that passes prints "OK <scenario>".
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "accrun/accrun.h"

namespace {

int g_rank = -1;

[[noreturn]] void die(const std::string& what) {
  std::printf("FAIL rank %d: %s\n", g_rank, what.c_str());
  std::fflush(stdout);
  std::exit(1);
}

void ok(int rc, const char* call) {
  if (rc != ACCRUN_SUCCESS) die(std::string(call) + ": " + accrun_strerror(rc) + ": " + accrun_last_error());
}
#define OK(call) ok((call), #call)

void expect(bool cond, const std::string& what) {
  if (!cond) die(what);
}

std::string env(const char* n) {
  const char* v = std::getenv(n);
  return v ? v : "";
}

// Sum of group ranks through an allreduce on a fresh group; destroys it.
void sum_check(const std::string& name, int world, int grank) {
  accrun_group_t g;
  OK(accrun_group_init(name.c_str(), world, grank, ACCRUN_BACKEND_STORE, &g));
  expect(accrun_group_size(g) == world && accrun_group_rank(g) == grank, name + ": group rank/size");
  std::vector<std::int64_t> v(257, grank), out(257);
  OK(accrun_allreduce(g, v.data(), out.data(), v.size(), ACCRUN_INT64, ACCRUN_SUM, nullptr));
  for (auto x : out) expect(x == std::int64_t(world) * (world - 1) / 2, name + ": wrong sum " + std::to_string(x));
  OK(accrun_barrier(g));
  OK(accrun_group_destroy(g));
}

void context() {
  expect(accrun_rank() == std::atoi(env("ACCRUN_RANK").c_str()), "rank differs from ACCRUN_RANK");
  expect(accrun_size() == std::atoi(env("ACCRUN_SIZE").c_str()), "size differs from ACCRUN_SIZE");
  expect(accrun_local_rank() == std::atoi(env("ACCRUN_LOCAL_RANK").c_str()), "local rank differs");
  expect(accrun_local_size() == std::atoi(env("ACCRUN_LOCAL_SIZE").c_str()), "local size differs");
  int ids[16], count = -1;
  OK(accrun_accelerator_ids("GPU", ids, 16, &count));
  std::string got;
  for (int i = 0; i < count; ++i) got += (i ? "," : "") + std::to_string(ids[i]);
  expect(got == env("ACCRUN_GPU_IDS"), "GPU ids " + got + " differ from ACCRUN_GPU_IDS=" + env("ACCRUN_GPU_IDS"));
  const char* type = accrun_accelerator_type("gpu");
  expect((type ? std::string(type) : "") == (count > 0 ? env("ACCRUN_ACCELERATOR_TYPE") : ""), "accelerator type");
  const char* pod = accrun_pod("pod");
  expect((pod ? std::string(pod) : "") == env("ACCRUN_POD"), "pod label");
}

void groups() {
  const int n = accrun_size(), r = accrun_rank();
  // World sizes 1 .. n, each on the first w ranks.
  for (int w : {1, 2, 3, 4, 8})
    if (w <= n && r < w) sum_check("w" + std::to_string(w), w, r);
  // Subsets: the even ranks and the odd ranks, at the same time.
  sum_check(r % 2 ? "odd" : "even", (n - r % 2 + 1) / 2, r / 2);
  // A name destroyed and declared again, three times.
  for (int i = 0; i < 3; ++i) sum_check("again", n, r);
  // Many groups at once on the same ranks, from several threads.
  std::vector<std::thread> ts;
  std::atomic<int> failures{0};
  // Each failure prints what failed and accrun_last_error (per thread).
  auto failed = [&](int t, const std::string& what) {
    ++failures;
    std::fprintf(stderr, "rank %d thread %d: %s: %s\n", r, t, what.c_str(), accrun_last_error());
  };
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      accrun_group_t g;
      // Group ranks reversed in odd groups: they need not follow job ranks.
      int grank = t % 2 ? n - 1 - r : r;
      if (accrun_group_init(("thread" + std::to_string(t)).c_str(), n, grank, ACCRUN_BACKEND_STORE, &g) != 0) {
        failed(t, "accrun_group_init");
        return;
      }
      for (int i = 0; i < 20; ++i) {
        std::int32_t v = grank + t, out = 0;
        if (accrun_allreduce(g, &v, &out, 1, ACCRUN_INT32, ACCRUN_MAX, nullptr) != 0 || out != n - 1 + t)
          failed(t, "accrun_allreduce " + std::to_string(i) + " gave " + std::to_string(out));
      }
      if (accrun_group_destroy(g) != 0) failed(t, "accrun_group_destroy");
    });
  for (auto& t : ts) t.join();
  expect(failures == 0, "concurrent groups: " + std::to_string(failures.load()) + " failures");
}

void store() {
  const int n = accrun_size(), r = accrun_rank();
  accrun_group_t g;
  OK(accrun_group_init("store-sync", n, r, ACCRUN_BACKEND_STORE, &g));
  std::string mine = "from rank " + std::to_string(r);
  OK(accrun_put(("obj/" + std::to_string(r)).c_str(), mine.data(), mine.size()));
  expect(accrun_put(("obj/" + std::to_string(r)).c_str(), "x", 1) == ACCRUN_ERR_INVALID_USAGE, "put twice");
  // Every rank reads every other rank's object, waiting for it if needed.
  for (int p = 0; p < n; ++p) {
    char buf[64] = {};
    size_t len = 0;
    OK(accrun_get(("obj/" + std::to_string(p)).c_str(), buf, sizeof buf, &len, 10000));
    expect(std::string(buf, len) == "from rank " + std::to_string(p), "object of rank " + std::to_string(p));
  }
  OK(accrun_barrier(g));
  // The next rank deletes it; afterwards nobody finds it.
  OK(accrun_delete(("obj/" + std::to_string((r + 1) % n)).c_str()));
  OK(accrun_barrier(g));
  size_t len = 0;
  char buf[8];
  expect(accrun_get(("obj/" + std::to_string(r)).c_str(), buf, sizeof buf, &len, 0) == ACCRUN_ERR_NOT_FOUND,
         "deleted object still found");
  OK(accrun_group_destroy(g));
}

// Objects between hosts (argv[2]: the large object's MiB).  Every rank puts
// a 1 KiB and a large object; the next rank, on another host when the job
// has one rank per host, reads both, exactly, and deletes them from there.
// Rank 0 puts one more object and exits at once: rank 1 reads it after.
unsigned char byte_at(std::size_t i, int seed) { return static_cast<unsigned char>((i * 2654435761u + seed) >> 11); }

void objects(std::size_t mib) {
  const int n = accrun_size(), r = accrun_rank(), from = (r + n - 1) % n;
  std::vector<unsigned char> mine(mib << 20);
  for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = byte_at(i, r);
  OK(accrun_put(("small/" + std::to_string(r)).c_str(), mine.data(), 1024));
  OK(accrun_put(("large/" + std::to_string(r)).c_str(), mine.data(), mine.size()));
  std::vector<unsigned char> got(mine.size());
  size_t len = 0;
  OK(accrun_get(("small/" + std::to_string(from)).c_str(), got.data(), got.size(), &len, 30000));
  expect(len == 1024, "small object's size");
  for (std::size_t i = 0; i < len; ++i)
    if (got[i] != byte_at(i, from)) die("small object of rank " + std::to_string(from) + " differs at " + std::to_string(i));
  auto t0 = std::chrono::steady_clock::now();
  OK(accrun_get(("large/" + std::to_string(from)).c_str(), got.data(), got.size(), &len, 30000));
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  expect(len == mine.size(), "large object's size");
  for (std::size_t i = 0; i < len; ++i)
    if (got[i] != byte_at(i, from)) die("large object of rank " + std::to_string(from) + " differs at " + std::to_string(i));
  std::printf("rank %d: got %zu MiB of rank %d in %.3f s (%.2f GB/s)\n", r, mib, from, s,
              static_cast<double>(len) / s / 1e9);
  OK(accrun_delete(("small/" + std::to_string(from)).c_str()));
  OK(accrun_delete(("large/" + std::to_string(from)).c_str()));
  expect(accrun_get(("large/" + std::to_string(from)).c_str(), got.data(), got.size(), &len, 0) == ACCRUN_ERR_NOT_FOUND,
         "deleted object still found");
  // Put before exiting: the object outlives its rank (rank 1 reads it later).
  if (r == 0) {
    OK(accrun_put("left-behind", "still here", 10));
  } else if (r == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    char buf[16];
    OK(accrun_get("left-behind", buf, sizeof buf, &len, 30000));
    expect(std::string(buf, len) == "still here", "the object rank 0 left behind");
  }
}

void sendrecv() {
  const int r = accrun_rank();
  if (r > 1) return;
  accrun_group_t g;
  OK(accrun_group_init("pair", 2, r, ACCRUN_BACKEND_STORE, &g));
  // Each sends to the other first, then receives: never a deadlock on the store.
  std::vector<float> out(100000, float(r + 1)), in(100000);
  OK(accrun_send(g, out.data(), out.size(), ACCRUN_FLOAT32, 1 - r, nullptr));
  OK(accrun_recv(g, in.data(), in.size(), ACCRUN_FLOAT32, 1 - r, nullptr));
  expect(in[0] == float(2 - r) && in.back() == float(2 - r), "received data");
  OK(accrun_group_start(g));
  OK(accrun_send(g, out.data(), 10, ACCRUN_FLOAT32, 1 - r, nullptr));
  OK(accrun_recv(g, in.data(), 10, ACCRUN_FLOAT32, 1 - r, nullptr));
  OK(accrun_group_end(g));
  OK(accrun_group_destroy(g));
}

// Rank 1 dies after joining; the others must get ACCRUN_ERR_REMOTE naming it.
void death() {
  const int n = accrun_size(), r = accrun_rank();
  accrun_group_t g;
  OK(accrun_group_init("doomed", n, r, ACCRUN_BACKEND_STORE, &g));
  OK(accrun_barrier(g));
  // Rank 1 dies once the others are in their allreduce loop (a member that
  // fails right as a collective ends may fail that collective for the
  // others too, which is not what this scenario is about).
  if (r == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::_Exit(3);
  }
  auto t0 = std::chrono::steady_clock::now();
  int rc = ACCRUN_SUCCESS;
  for (int i = 0; i < 1000000 && rc == ACCRUN_SUCCESS; ++i) {
    double v = 1, out = 0;
    rc = accrun_allreduce(g, &v, &out, 1, ACCRUN_FLOAT64, ACCRUN_SUM, nullptr);
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string msg = accrun_last_error();
  expect(rc == ACCRUN_ERR_REMOTE, std::string("expected a remote error, got ") + accrun_strerror(rc) + ": " + msg);
  expect(msg.find("rank 1") != std::string::npos, "error does not name rank 1: " + msg);
  expect(secs < 5.0, "took " + std::to_string(secs) + " s");
  std::printf("rank %d: %s (%.2f s)\n", r, msg.c_str(), secs);
  accrun_group_destroy(g);
}

// The last rank leaves the group the proper way (destroy, finalize, exit
// 0) before the others' allreduce.  Across hosts (h1:1,h2:2) rank 1 leads
// the leaver's host: its reduce inside the host fails, and it stays alive
// (in the group) for 8 s.  Rank 0, on the other host, must hear from rank
// 1 why at once, not wait for rank 1's connection to close.
void leave() {
  const int n = accrun_size(), r = accrun_rank();
  accrun_group_t g;
  OK(accrun_group_init("leaving", n, r, ACCRUN_BACKEND_STORE, &g));
  OK(accrun_barrier(g));
  if (r == n - 1) {
    OK(accrun_group_destroy(g));
    OK(accrun_finalize());
    std::printf("rank %d left the group\n", r);
    std::fflush(stdout);
    std::exit(0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto t0 = std::chrono::steady_clock::now();
  double v = 1, out = 0;
  const int rc = accrun_allreduce(g, &v, &out, 1, ACCRUN_FLOAT64, ACCRUN_SUM, nullptr);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string msg = accrun_last_error();
  expect(rc == ACCRUN_ERR_REMOTE, std::string("expected a remote error, got ") + accrun_strerror(rc) + ": " + msg);
  expect(msg.find("job rank " + std::to_string(n - 1)) != std::string::npos, "error does not name the leaver: " + msg);
  expect(secs < 5.0, "took " + std::to_string(secs) + " s: " + msg);
  std::printf("rank %d: %s (%.2f s)\n", r, msg.c_str(), secs);
  std::fflush(stdout);
  if (r == 1) std::this_thread::sleep_for(std::chrono::seconds(8));
  accrun_group_destroy(g);
}

// Every rank runs allreduces (1 MiB, so the ring between hosts runs) until
// one fails or 30 s pass; the test kills a rank, or cuts a host off, from
// outside.  A survivor prints its error and when it came (seconds since the
// epoch), for the test to compare with the moment of the kill.
void loop() {
  const int n = accrun_size(), r = accrun_rank();
  accrun_group_t g;
  OK(accrun_group_init("looping", n, r, ACCRUN_BACKEND_STORE, &g));
  std::vector<float> in(1u << 18, 1.0f), out(in.size());
  std::printf("rank %d: looping\n", r);
  const auto t0 = std::chrono::steady_clock::now();
  int rc = ACCRUN_SUCCESS;
  while (rc == ACCRUN_SUCCESS && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30))
    rc = accrun_allreduce(g, in.data(), out.data(), in.size(), ACCRUN_FLOAT32, ACCRUN_SUM, nullptr);
  const double at = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  expect(rc == ACCRUN_ERR_REMOTE, std::string("expected a remote error, got ") + accrun_strerror(rc));
  std::printf("rank %d: failed at %.3f: %s\n", r, at, accrun_last_error());
  accrun_group_destroy(g);
}

void badargs() {
  const int r = accrun_rank();
  accrun_group_t g;
  // World sizes that disagree: an error on both sides, quickly.  Rank 1's
  // is larger than the job (2 ranks): refused at once if it comes first.
  int rc = accrun_group_init("sizes", r == 0 ? 2 : 3, r, ACCRUN_BACKEND_STORE, &g);
  expect(rc == ACCRUN_ERR_INVALID_USAGE || (r == 1 && rc == ACCRUN_ERR_INVALID_ARGUMENT),
         std::string("disagreeing sizes: ") + accrun_strerror(rc));
  expect(std::string(accrun_last_error()).find("world size") != std::string::npos, accrun_last_error());
  // A world size larger than the job can never gather: refused at once.
  const auto t0 = std::chrono::steady_clock::now();
  rc = accrun_group_init("too-big", 5, r, ACCRUN_BACKEND_STORE, &g);
  expect(rc == ACCRUN_ERR_INVALID_ARGUMENT, std::string("world size 5 of 2: ") + accrun_strerror(rc));
  expect(std::string(accrun_last_error()).find("larger than the job, which has 2 ranks") != std::string::npos,
         accrun_last_error());
  expect(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(500), "world size 5 of 2: slow");
  // Two members claiming one rank.
  rc = accrun_group_init("claim", 2, 0, ACCRUN_BACKEND_STORE, &g);
  expect(rc == ACCRUN_ERR_INVALID_USAGE, std::string("two claim rank 0: ") + accrun_strerror(rc));
  // Bad arguments on a good group.
  OK(accrun_group_init("fine", 2, r, ACCRUN_BACKEND_STORE, &g));
  int v = 0;
  expect(accrun_broadcast(g, &v, 1, ACCRUN_INT32, 2, nullptr) == ACCRUN_ERR_INVALID_ARGUMENT, "root 2");
  expect(accrun_send(g, &v, 1, ACCRUN_INT32, 5, nullptr) == ACCRUN_ERR_INVALID_ARGUMENT, "peer 5");
  expect(accrun_allreduce(g, &v, &v, 1, ACCRUN_INT32, (accrun_op_t)7, nullptr) == ACCRUN_ERR_INVALID_ARGUMENT, "op");
  OK(accrun_group_destroy(g));
  // A member that never comes: the timeout names it (ACCRUN_GROUP_INIT_TIMEOUT=1).
  if (r == 0) {
    rc = accrun_group_init("lonely", 2, 0, ACCRUN_BACKEND_STORE, &g);
    expect(rc == ACCRUN_ERR_TIMEOUT, std::string("missing member: ") + accrun_strerror(rc));
    expect(std::string(accrun_last_error()).find("group rank 1 of 2") != std::string::npos, accrun_last_error());
  }
}

// A child forked after accrun_init, on every rank: its calls are refused
// and its exit (accrun_finalize, then exit's handlers) returns at once,
// leaving its parent's connection, group and keys working.
void forked() {
  const int n = accrun_size(), r = accrun_rank();
  accrun_group_t g;
  OK(accrun_group_init("forked", n, r, ACCRUN_BACKEND_STORE, &g));
  const pid_t child = fork();
  expect(child >= 0, "fork");
  if (child == 0) {
    int v = 0;
    if (accrun_put("from-child", &v, sizeof v) != ACCRUN_ERR_INVALID_USAGE) _exit(3);
    if (accrun_barrier(g) != ACCRUN_ERR_INVALID_USAGE) _exit(4);
    if (accrun_finalize() != ACCRUN_SUCCESS) _exit(5);
    std::exit(0);
  }
  int st = 0;
  for (int i = 0; i < 500 && waitpid(child, &st, WNOHANG) == 0; ++i) usleep(10'000);
  if (waitpid(child, &st, WNOHANG) == 0) {
    kill(child, SIGKILL);
    die("the forked child did not exit within 5 s");
  }
  expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the forked child's checks: status " + std::to_string(st));
  std::int64_t mine = r, sum = 0;
  OK(accrun_allreduce(g, &mine, &sum, 1, ACCRUN_INT64, ACCRUN_SUM, nullptr));
  expect(sum == std::int64_t(n) * (n - 1) / 2, "sum after the fork");
  const std::string key = "after-fork." + std::to_string(r);
  OK(accrun_put(key.c_str(), &mine, sizeof mine));
  const std::string theirs = "after-fork." + std::to_string((r + 1) % n);
  std::int64_t got = -1;
  std::size_t len = 0;
  OK(accrun_get(theirs.c_str(), &got, sizeof got, &len, 10'000));
  expect(got == (r + 1) % n, "the next rank's key after the fork");
  OK(accrun_barrier(g));
  OK(accrun_group_destroy(g));
}

// Eight threads on every rank at once, each putting keys and getting its
// own and the next rank's (waiting), then a group of its own: the agent's
// answers to one client come close together (the library once lost one
// of them, and a thread waited in PMIx_Lookup for ever).
void threads() {
  const int n = accrun_size(), r = accrun_rank();
  constexpr int kThreads = 8, kRounds = 200;
  std::atomic<int> bad{0};
  std::string first_error;
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t) {
    pool.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        const std::string mine = "t." + std::to_string(r) + "." + std::to_string(t) + "." + std::to_string(i);
        const std::string next = "t." + std::to_string((r + 1) % n) + "." + std::to_string(t) + "." + std::to_string(i);
        char buf[64];
        std::size_t len = 0;
        if (accrun_put(mine.c_str(), mine.c_str(), mine.size() + 1) != ACCRUN_SUCCESS ||
            accrun_get(mine.c_str(), buf, sizeof buf, &len, 0) != ACCRUN_SUCCESS || next.size() + 1 > sizeof buf ||
            accrun_get(next.c_str(), buf, sizeof buf, &len, 20'000) != ACCRUN_SUCCESS || next != buf) {
          if (bad++ == 0) first_error = mine + ": " + accrun_last_error();
          return;
        }
      }
      accrun_group_t g;
      const std::string name = "threads." + std::to_string(t);
      std::int64_t one = 1, sum = 0;
      if (accrun_group_init(name.c_str(), n, r, ACCRUN_BACKEND_STORE, &g) != ACCRUN_SUCCESS ||
          accrun_allreduce(g, &one, &sum, 1, ACCRUN_INT64, ACCRUN_SUM, nullptr) != ACCRUN_SUCCESS || sum != n ||
          accrun_group_destroy(g) != ACCRUN_SUCCESS) {
        if (bad++ == 0) first_error = name + ": " + accrun_last_error();
      }
    });
  }
  for (auto& th : pool) th.join();
  expect(bad == 0, std::to_string(bad.load()) + " thread(s) failed, the first: " + first_error);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  OK(accrun_init());
  g_rank = accrun_rank();
  std::string mode = argv[1];
  if (mode == "context") context();
  else if (mode == "groups") groups();
  else if (mode == "store") store();
  else if (mode == "sendrecv") sendrecv();
  else if (mode == "death") death();
  else if (mode == "loop") loop();
  else if (mode == "leave") leave();
  else if (mode == "badargs") badargs();
  else if (mode == "forked") forked();
  else if (mode == "threads") threads();
  else if (mode == "objects") objects(argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 1);
  else die("unknown scenario " + mode);
  OK(accrun_finalize());
  std::printf("OK %s rank %d\n", mode.c_str(), g_rank);
  return 0;
}
