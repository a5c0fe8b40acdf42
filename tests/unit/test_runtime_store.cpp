// The object store and the environment contract, without a launcher: an
// in-memory directory, a private temporary directory, and several
// ObjectStore instances standing in for several processes on one host.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <future>
#include <thread>

#include "config.hpp"
#include "directory.hpp"
#include "object_store.hpp"
#include "shm_temp_dir.hpp"

namespace accrun::runtime {
namespace {

using TempDir = testing::ShmTempDir;

std::unique_ptr<ObjectStore> open_store(Directory& dir, const std::string& path, int rank,
                                        const std::string& size = "") {
  auto s = ObjectStore::open(dir, StoreOptions{path, "h0", rank, size, ""});
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  return s.is_ok() ? std::move(s).value() : nullptr;
}

TEST(RuntimeStore, PutGetDeleteAcrossTwoProcessesOnOneHost) {
  TempDir tmp;
  MemoryDirectory dir;
  auto a = open_store(dir, tmp.path(), 0);
  auto b = open_store(dir, tmp.path(), 1);
  std::vector<int> data(1000);
  for (int i = 0; i < 1000; ++i) data[i] = i * 7;
  ASSERT_TRUE(a->put("weights/v1", data.data(), data.size() * sizeof(int)).is_ok());
  std::vector<int> out(1000);
  std::size_t len = 0;
  ASSERT_TRUE(b->get("weights/v1", out.data(), out.size() * sizeof(int), &len, 0).is_ok());
  EXPECT_EQ(len, 4000u);
  EXPECT_EQ(out, data);
  // The bytes are in a 0600 file in the shared directory, counted once.
  EXPECT_EQ(a->used(), 4000u);
  EXPECT_EQ(b->used(), 4000u);
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(tmp.path())) {
    struct stat st {};
    ASSERT_EQ(::stat(e.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u) << e.path();
    if (e.path().filename().string().rfind("obj.", 0) == 0) ++files;
  }
  EXPECT_EQ(files, 1);
  // b deletes what a put: freed for both, gone for both.
  ASSERT_TRUE(b->remove("weights/v1").is_ok());
  EXPECT_EQ(a->used(), 0u);
  EXPECT_EQ(a->get("weights/v1", out.data(), 4000, &len, 0).code(), Code::kNotFound);
  EXPECT_EQ(a->remove("weights/v1").code(), Code::kNotFound);
  // A deleted key can be put again.
  int one = 1;
  ASSERT_TRUE(a->put("weights/v1", &one, sizeof one).is_ok());
  ASSERT_TRUE(b->get("weights/v1", out.data(), 4000, &len, 0).is_ok());
  EXPECT_EQ(len, sizeof one);
  EXPECT_EQ(out[0], 1);
}

TEST(RuntimeStore, ObjectsAreImmutable) {
  TempDir tmp;
  MemoryDirectory dir;
  auto a = open_store(dir, tmp.path(), 0);
  char x = 'x';
  ASSERT_TRUE(a->put("k", &x, 1).is_ok());
  Status again = a->put("k", &x, 1);
  EXPECT_EQ(again.code(), Code::kInvalidUsage);
  EXPECT_NE(again.message().find("exists"), std::string::npos);
  EXPECT_EQ(a->used(), 1u);  // the failed put left nothing behind
}

TEST(RuntimeStore, SizeQueryAndShortBuffer) {
  TempDir tmp;
  MemoryDirectory dir;
  auto a = open_store(dir, tmp.path(), 0);
  std::string s = "hello, store";
  ASSERT_TRUE(a->put("s", s.data(), s.size()).is_ok());
  std::size_t len = 0;
  ASSERT_TRUE(a->get("s", nullptr, 0, &len, 0).is_ok());
  EXPECT_EQ(len, s.size());
  char small[4];
  EXPECT_EQ(a->get("s", small, sizeof small, &len, 0).code(), Code::kInvalidArgument);
  EXPECT_EQ(len, s.size());
  ASSERT_TRUE(a->put("empty", nullptr, 0).is_ok());
  ASSERT_TRUE(a->get("empty", small, sizeof small, &len, 0).is_ok());
  EXPECT_EQ(len, 0u);
}

TEST(RuntimeStore, FullStoreIsNoMemoryAndDeleteFrees) {
  TempDir tmp;
  MemoryDirectory dir;
  auto a = open_store(dir, tmp.path(), 0, "8K");
  auto b = open_store(dir, tmp.path(), 1, "8K");
  EXPECT_EQ(a->capacity(), 8192u);
  std::vector<char> blob(5000, 'z');
  ASSERT_TRUE(a->put("one", blob.data(), blob.size()).is_ok());
  // The limit is shared by the host's processes: b cannot add 5000 more.
  Status full = b->put("two", blob.data(), blob.size());
  EXPECT_EQ(full.code(), Code::kNoMemory);
  EXPECT_NE(full.message().find("ACCRUN_STORE_SIZE"), std::string::npos);
  ASSERT_TRUE(a->remove("one").is_ok());
  EXPECT_TRUE(b->put("two", blob.data(), blob.size()).is_ok());
}

// A process killed in the middle of a put or a delete.  The child, a
// forked process with its own ObjectStore on the same directory, stops for
// good at one step of its directory's (publish or unpublish, before or
// after it) and says so on a pipe, with what it published; the test then
// kills it with SIGKILL.
class StoppingDirectory final : public Directory {
 public:
  enum Stop { kBeforePublish, kAfterPublish, kBeforeUnpublish };
  StoppingDirectory(Directory& inner, Stop stop, int tell) : inner_(inner), stop_(stop), tell_(tell) {}
  Status publish(const std::string& key, const std::string& value) override {
    if (stop_ == kBeforePublish) halt("");
    Status st = inner_.publish(key, value);
    if (stop_ == kAfterPublish) halt(key + "\n" + value);
    return st;
  }
  Result<std::string> lookup(const std::string& key, int timeout_ms) override { return inner_.lookup(key, timeout_ms); }
  Status unpublish(const std::string& key) override {
    if (stop_ == kBeforeUnpublish) halt("");
    return inner_.unpublish(key);
  }
  void cancel_waits() override {}

 private:
  [[noreturn]] void halt(const std::string& said) {
    const std::string msg = said + '\0';
    if (::write(tell_, msg.data(), msg.size()) < 0) _exit(9);
    for (;;) ::pause();
  }
  Directory& inner_;
  Stop stop_;
  int tell_;
};

// Runs body(directory) in a child that stops where `stop` says; returns what
// it said once it stopped, after killing it.
template <class Body>
std::string kill_at(Directory& parent_dir, StoppingDirectory::Stop stop, Body body) {
  int p[2];
  if (::pipe(p) != 0) return "pipe failed";
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(p[0]);
    StoppingDirectory dir(parent_dir, stop, p[1]);
    body(dir);
    _exit(8);  // it did not stop where it should have
  }
  ::close(p[1]);
  std::string said;
  char c;
  bool stopped = false;
  while (::read(p[0], &c, 1) == 1 && !(stopped = c == '\0')) said += c;
  ::close(p[0]);
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  if (!stopped) return "the child ended (status " + std::to_string(status) + ") before it stopped";
  return said;
}

// Puts `big` as "big" in a child that stops at `stop` and is killed there.
std::string kill_putting(Directory& dir, const std::string& path, StoppingDirectory::Stop stop,
                         const std::vector<char>& big) {
  return kill_at(dir, stop, [&](Directory& d) {
    auto s = ObjectStore::open(d, StoreOptions{path, "h0", 1, "64M", ""});
    if (s) (void)(*s)->put("big", big.data(), big.size());
  });
}

std::vector<char> pattern(std::size_t n) {
  std::vector<char> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<char>(i * 131 >> 7);
  return v;
}

int object_files(const std::string& dir) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().rfind("obj.", 0) == 0) ++n;
  return n;
}

TEST(RuntimeStore, APutKilledWhileWritingGivesItsBytesBack) {
  TempDir tmp;
  MemoryDirectory dir;
  auto a = open_store(dir, tmp.path(), 0, "64M");
  std::vector<char> big(48 << 20, 'b');
  // The child dies of SIGXFSZ when the put allocates its file past the
  // file-size limit: bytes reserved, file made, nothing written or published.
  const pid_t child = ::fork();
  if (child == 0) {
    const rlimit fsize{1 << 20, 1 << 20}, core{0, 0};
    ::setrlimit(RLIMIT_FSIZE, &fsize);
    ::setrlimit(RLIMIT_CORE, &core);
    auto s = ObjectStore::open(dir, StoreOptions{tmp.path(), "h0", 1, "64M", ""});
    if (s) (void)(*s)->put("big", big.data(), big.size());
    _exit(8);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGXFSZ) << status;
  EXPECT_EQ(a->used(), big.size());
  EXPECT_EQ(object_files(tmp.path()), 1);
  // 32 MiB more fits once the dead put is undone: its file goes.
  std::vector<char> other(32 << 20, 'o');
  Status st = a->put("other", other.data(), other.size());
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(a->used(), other.size());
  EXPECT_EQ(object_files(tmp.path()), 1);
  std::size_t len = 0;
  EXPECT_EQ(a->get("big", nullptr, 0, &len, 0).code(), Code::kNotFound);
}

// A rank that forked a worker (which lives on) dies during a put: the
// worker's copy of the store's descriptor, let go at the fork, does not
// keep the dead put's slot looking alive.
TEST(RuntimeStore, AForkedChildDoesNotKeepADeadPutAlive) {
  TempDir tmp;
  MemoryDirectory dir;
  auto a = open_store(dir, tmp.path(), 0, "64M");
  std::vector<char> big(48 << 20, 'b');
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  const pid_t rank = ::fork();
  if (rank == 0) {
    ::close(p[0]);
    auto s = ObjectStore::open(dir, StoreOptions{tmp.path(), "h0", 1, "64M", ""});
    if (!s) _exit(7);
    int ready[2];
    if (::pipe(ready) != 0) _exit(5);
    const pid_t worker = ::fork();
    if (worker == 0) {
      (*s)->after_fork();  // what libaccrun's fork handler does
      if (::write(ready[1], "r", 1) != 1) _exit(1);
      ::sleep(30);
      _exit(0);
    }
    char r;
    if (::read(ready[0], &r, 1) != 1) _exit(4);
    if (::write(p[1], &worker, sizeof worker) != sizeof worker) _exit(6);
    const rlimit fsize{1 << 20, 1 << 20}, core{0, 0};
    ::setrlimit(RLIMIT_FSIZE, &fsize);
    ::setrlimit(RLIMIT_CORE, &core);
    (void)(*s)->put("big", big.data(), big.size());
    _exit(8);
  }
  ::close(p[1]);
  pid_t worker = -1;
  const bool told = ::read(p[0], &worker, sizeof worker) == static_cast<ssize_t>(sizeof worker);
  ::close(p[0]);
  struct KillWorker {
    pid_t& pid;
    ~KillWorker() {
      if (pid > 0) ::kill(pid, SIGKILL);
    }
  } kill_worker{worker};
  ASSERT_TRUE(told);
  int status = 0;
  ASSERT_EQ(::waitpid(rank, &status, 0), rank);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGXFSZ) << status;
  ASSERT_EQ(::kill(worker, 0), 0);  // the worker lives on
  std::vector<char> other(32 << 20, 'o');
  Status st = a->put("other", other.data(), other.size());
  EXPECT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(a->used(), other.size());
}

// A 64 MiB store with a 48 MiB put killed at `stop` by another process.
struct KilledPut {
  explicit KilledPut(StoppingDirectory::Stop stop)
      : a(open_store(dir, tmp.path(), 0, "64M")), big(pattern(48 << 20)), said(kill_putting(dir, tmp.path(), stop, big)) {}
  TempDir tmp;
  MemoryDirectory dir;
  std::unique_ptr<ObjectStore> a;
  const std::vector<char> big;
  const std::string said;
};

TEST(RuntimeStore, APutKilledBeforeItPublishedIsPublishedForIt) {
  KilledPut k(StoppingDirectory::kBeforePublish);
  auto& [tmp, dir, a, big, said] = k;
  ASSERT_EQ(said, "");
  // Killed with its bytes whole and its key not (yet) published: the first
  // put that finds the store full publishes it as the dead put would have
  // (whose publish may still have been on its way), and is refused.
  std::size_t len = 0;
  EXPECT_EQ(a->get("big", nullptr, 0, &len, 0).code(), Code::kNotFound);
  std::vector<char> other(32 << 20, 'o');
  EXPECT_EQ(a->put("other", other.data(), other.size()).code(), Code::kNoMemory);
  std::vector<char> out(big.size());
  ASSERT_TRUE(a->get("big", out.data(), out.size(), &len, 0).is_ok());
  EXPECT_EQ(len, big.size());
  EXPECT_TRUE(out == big);
  EXPECT_EQ(a->used(), big.size());
  ASSERT_TRUE(a->remove("big").is_ok());
  EXPECT_TRUE(a->put("other", other.data(), other.size()).is_ok());
  EXPECT_EQ(a->used(), other.size());
  EXPECT_EQ(object_files(tmp.path()), 1);
}

TEST(RuntimeStore, APutKilledAfterItPublishedKeepsItsObject) {
  KilledPut k(StoppingDirectory::kAfterPublish);
  auto& [tmp, dir, a, big, said] = k;
  // What the child published goes into the job's directory (the child's
  // copy of it died with it).
  const auto nl = said.find('\n');
  ASSERT_NE(nl, std::string::npos) << said;
  ASSERT_TRUE(dir.publish(said.substr(0, nl), said.substr(nl + 1)).is_ok());
  // The object is whole and stays: the store is still full for 32 MiB more,
  // and the look at the dead put's slot did not take its file.
  std::vector<char> other(32 << 20, 'o');
  EXPECT_EQ(a->put("other", other.data(), other.size()).code(), Code::kNoMemory);
  EXPECT_EQ(a->used(), big.size());
  std::vector<char> out(big.size());
  std::size_t len = 0;
  ASSERT_TRUE(a->get("big", out.data(), out.size(), &len, 0).is_ok());
  EXPECT_EQ(len, big.size());
  EXPECT_TRUE(out == big);
  ASSERT_TRUE(a->remove("big").is_ok());
  EXPECT_TRUE(a->put("other", other.data(), other.size()).is_ok());
  EXPECT_EQ(a->used(), other.size());
}

TEST(RuntimeStore, ADeleteKilledBeforeItUnpublishedLeavesNoKeyBehind) {
  TempDir tmp;
  MemoryDirectory dir;
  auto a = open_store(dir, tmp.path(), 0, "64M");
  std::vector<char> blob(1 << 20, 'x');
  ASSERT_TRUE(a->put("k", blob.data(), blob.size()).is_ok());
  const std::string said = kill_at(dir, StoppingDirectory::kBeforeUnpublish, [&](Directory& d) {
    auto s = ObjectStore::open(d, StoreOptions{tmp.path(), "h0", 1, "64M", ""});
    if (s) (void)(*s)->remove("k");
  });
  ASSERT_EQ(said, "");
  // Killed with the file unlinked and the key still published.
  EXPECT_EQ(object_files(tmp.path()), 0);
  EXPECT_EQ(a->used(), 0u);
  std::size_t len = 0;
  EXPECT_EQ(a->get("k", blob.data(), blob.size(), &len, 0).code(), Code::kNotFound);
  // The key can be put again: the dead delete is finished.
  const char two[] = "two";
  Status st = a->put("k", two, sizeof two);
  ASSERT_TRUE(st.is_ok()) << st.message();
  char out[sizeof two] = {};
  ASSERT_TRUE(a->get("k", out, sizeof out, &len, 0).is_ok());
  EXPECT_STREQ(out, "two");
  EXPECT_EQ(a->used(), sizeof two);
  // And a delete of such a key says it is gone, and leaves none.
  ASSERT_TRUE(a->remove("k").is_ok());
  ASSERT_TRUE(a->put("k", blob.data(), blob.size()).is_ok());
  const std::string said2 = kill_at(dir, StoppingDirectory::kBeforeUnpublish, [&](Directory& d) {
    auto s = ObjectStore::open(d, StoreOptions{tmp.path(), "h0", 1, "64M", ""});
    if (s) (void)(*s)->remove("k");
  });
  ASSERT_EQ(said2, "");
  EXPECT_EQ(a->remove("k").code(), Code::kNotFound);
  EXPECT_EQ(dir.size(), 0u);  // its key was unpublished
  EXPECT_EQ(a->get("k", nullptr, 0, &len, 0).code(), Code::kNotFound);
}

TEST(RuntimeStore, GetWaitsForALaterPutOrTimesOut) {
  TempDir tmp;
  MemoryDirectory dir;
  auto a = open_store(dir, tmp.path(), 0);
  auto b = open_store(dir, tmp.path(), 1);
  auto waiter = std::async(std::launch::async, [&] {
    int v = 0;
    std::size_t len = 0;
    Status st = b->get("later", &v, sizeof v, &len, 5000);
    return st.is_ok() ? v : -1;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  int v = 42;
  ASSERT_TRUE(a->put("later", &v, sizeof v).is_ok());
  EXPECT_EQ(waiter.get(), 42);
  std::size_t len = 0;
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(b->get("never", &v, sizeof v, &len, 100).code(), Code::kTimeout);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(100));
  EXPECT_EQ(b->get("", &v, sizeof v, &len, 0).code(), Code::kInvalidArgument);
}

// Put by a rank no agent serves (another PMIx launcher's): other hosts
// cannot reach the object; across accrun's hosts see test_object_server.
TEST(RuntimeStore, ObjectOnAHostWithoutAnAgentIsNotSupported) {
  TempDir tmp;
  MemoryDirectory dir;
  auto a = open_store(dir, tmp.path(), 0);
  auto far = ObjectStore::open(dir, StoreOptions{tmp.path(), "h1", 1, "", ""});
  ASSERT_TRUE(far.is_ok());
  int v = 1;
  ASSERT_TRUE(a->put("k", &v, sizeof v).is_ok());
  std::size_t len = 0;
  Status st = far.value()->get("k", &v, sizeof v, &len, 0);
  EXPECT_EQ(st.code(), Code::kNotSupported);
  EXPECT_NE(st.message().find("lives on host h0"), std::string::npos) << st.message();
  EXPECT_EQ(far.value()->remove("k").code(), Code::kNotSupported);
  // The size needs no transfer.
  EXPECT_TRUE(far.value()->get("k", nullptr, 0, &len, 0).is_ok());
  EXPECT_EQ(len, sizeof v);
}

TEST(RuntimeConfig, StoreSizeSyntax) {
  EXPECT_EQ(parse_store_size("1024", 0).value(), 1024u);
  EXPECT_EQ(parse_store_size("4K", 0).value(), 4096u);
  EXPECT_EQ(parse_store_size("512MiB", 0).value(), 512ull << 20);
  EXPECT_EQ(parse_store_size("2g", 0).value(), 2ull << 30);
  EXPECT_EQ(parse_store_size("1.5M", 0).value(), 3ull << 19);
  EXPECT_EQ(parse_store_size("25%", 1000).value(), 250u);
  EXPECT_EQ(parse_store_size("", 1000).value(), 500u);  // default: half the filesystem
  EXPECT_EQ(parse_store_size("12Q", 0).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(parse_store_size("lots", 0).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(parse_store_size("150%", 0).status().code(), Code::kInvalidArgument);
  for (const char* bad : {"1.2.3K", ".", "..M", "99999999999999999999999T", "8192P", "8388608T"})
    EXPECT_EQ(parse_store_size(bad, 0).status().code(), Code::kInvalidArgument) << bad;
  // What the messages say is what is taken: 0% as 0 is (the percentage is
  // 0-100), and the largest size is just under 2^63 bytes.
  EXPECT_EQ(parse_store_size("0%", 1000).value(), 0u);
  EXPECT_EQ(parse_store_size("8388607T", 0).value(), 8388607ull << 40);
  EXPECT_NE(parse_store_size("8388608T", 0).status().message().find("less than 8388608T"), std::string::npos);
}

TEST(RuntimeConfig, GroupInitTimeoutIsAFiniteTimeAboveZero) {
  for (const char* bad : {"nan", "-nan", "NAN", "inf", "0", "-1", "1e9", "30s", ""})
    EXPECT_EQ(read_config({std::string("ACCRUN_GROUP_INIT_TIMEOUT=") + bad}).status().code(),
              Code::kInvalidArgument)
        << bad;
  EXPECT_EQ(read_config({"ACCRUN_GROUP_INIT_TIMEOUT=0.0001"}).value().group_init_timeout_ms, 1);
  EXPECT_EQ(read_config({"ACCRUN_GROUP_INIT_TIMEOUT=2.5"}).value().group_init_timeout_ms, 2500);
}

TEST(RuntimeConfig, ReadsTheLaunchersEnvironment) {
  auto c = read_config({"PMIX_NAMESPACE=accrun.0001", "ACCRUN_RANK=3", "ACCRUN_SIZE=8", "ACCRUN_LOCAL_RANK=1",
                        "ACCRUN_LOCAL_SIZE=4", "ACCRUN_NODE_RANK=1", "ACCRUN_HOST=n1",
                        "ACCRUN_ACCELERATOR_TYPE=H100", "ACCRUN_GPU_IDS=2,3", "ACCRUN_NEURON_CORES_IDS=0",
                        "ACCRUN_NEURON_CORES_TYPE=TRN1",
                        "ACCRUN_GPU_FRACTION=0.5", "ACCRUN_POD=slice-a", "ACCRUN_ZONE=", "ACCRUN_OVERSUBSCRIBED=1",
                        "ACCRUN_SHM_DIR=/dev/shm/x", "ACCRUN_STORE_SIZE=1G", "ACCRUN_GROUP_INIT_TIMEOUT=2.5",
                        "UNRELATED=1"});
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_TRUE(c->pmix_server);
  EXPECT_EQ(c->rank, 3);
  EXPECT_EQ(c->size, 8);
  EXPECT_EQ(c->local_rank, 1);
  EXPECT_EQ(c->local_size, 4);
  EXPECT_EQ(c->node_rank, 1);
  EXPECT_EQ(c->host, "n1");
  EXPECT_EQ(c->accelerator_type, "H100");
  EXPECT_EQ(c->accelerator_ids.at("GPU"), (std::vector<int>{2, 3}));
  EXPECT_EQ(c->accelerator_ids.at("NEURON_CORES"), (std::vector<int>{0}));
  EXPECT_EQ(c->accelerator_types.at("NEURON_CORES"), "TRN1");
  EXPECT_EQ(c->accelerator_types.count("ACCELERATOR"), 0u);
  EXPECT_EQ(c->fractions.at("GPU"), "0.5");
  EXPECT_EQ(c->pod, "slice-a");
  EXPECT_FALSE(c->zone.has_value());  // empty means unlabelled
  EXPECT_FALSE(c->region.has_value());
  EXPECT_TRUE(c->oversubscribed);
  EXPECT_EQ(c->shm_dir, "/dev/shm/x");
  EXPECT_EQ(c->group_init_timeout_ms, 2500);

  auto lone = read_config({"PATH=/bin"});
  ASSERT_TRUE(lone.is_ok());
  EXPECT_FALSE(lone->pmix_server);
  EXPECT_EQ(lone->rank, -1);
  EXPECT_TRUE(lone->accelerator_ids.empty());

  auto bad = read_config({"ACCRUN_GPU_IDS=0,x"});
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("ACCRUN_GPU_IDS"), std::string::npos);
  EXPECT_EQ(read_config({"ACCRUN_STORE_SIZE=big"}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(read_config({"ACCRUN_RANK=one"}).status().code(), Code::kInvalidArgument);
}

TEST(RuntimeConfig, StoreTcpCongestionIsANameOrSystem) {
  EXPECT_EQ(read_config({"PATH=/bin"})->store_tcp_congestion, "");  // accrun's default (Reno)
  EXPECT_EQ(read_config({"ACCRUN_STORE_TCP_CONGESTION=cubic"})->store_tcp_congestion, "cubic");
  EXPECT_EQ(read_config({"ACCRUN_STORE_TCP_CONGESTION=system"})->store_tcp_congestion, "system");
  EXPECT_EQ(read_config({"ACCRUN_STORE_TCP_CONGESTION="})->store_tcp_congestion, "");
  for (const char* bad : {"ACCRUN_STORE_TCP_CONGESTION=Reno", "ACCRUN_STORE_TCP_CONGESTION=bbr cubic",
                          "ACCRUN_STORE_TCP_CONGESTION=a_name_of_16char", "ACCRUN_STORE_TCP_CONGESTION=../x"}) {
    auto c = read_config({bad});
    ASSERT_FALSE(c.is_ok()) << bad;
    EXPECT_EQ(c.status().code(), Code::kInvalidArgument);
    EXPECT_NE(c.status().message().find("ACCRUN_STORE_TCP_CONGESTION"), std::string::npos) << c.status().message();
  }
}

TEST(RuntimeConfig, GroupTimeoutIsTenMinutesUnlessTheEnvironmentSays) {
  EXPECT_EQ(read_config({"PATH=/bin"})->group_timeout_ms, 600'000);
  EXPECT_EQ(read_config({"ACCRUN_GROUP_TIMEOUT=0.25"})->group_timeout_ms, 250);
  EXPECT_EQ(read_config({"ACCRUN_GROUP_TIMEOUT=90"})->group_timeout_ms, 90'000);
  EXPECT_EQ(read_config({"ACCRUN_GROUP_TIMEOUT=0"})->group_timeout_ms, -1);  // no limit
  for (const char* bad : {"ACCRUN_GROUP_TIMEOUT=", "ACCRUN_GROUP_TIMEOUT=soon", "ACCRUN_GROUP_TIMEOUT=-1"}) {
    auto c = read_config({bad});
    ASSERT_FALSE(c.is_ok()) << bad;
    EXPECT_EQ(c.status().code(), Code::kInvalidArgument);
    EXPECT_NE(c.status().message().find("ACCRUN_GROUP_TIMEOUT"), std::string::npos) << c.status().message();
  }
}

}  // namespace
}  // namespace accrun::runtime
