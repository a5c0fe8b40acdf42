// The object store across hosts without a launcher: two "hosts" are two
// private directories; the first host's agent is a real ObjectServer on
// 127.0.0.1, and ObjectStore instances with different host names stand in
// for ranks on each host (accrun(7) THE OBJECT STORE).
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <thread>
#include <vector>

#include "accrun/object_wire.hpp"
#include "agent/object_server.hpp"
#include "directory.hpp"
#include "loopback.hpp"
#include "object_fetch.hpp"
#include "object_store.hpp"
#include "shm_temp_dir.hpp"

namespace accrun {
namespace {

using launcher::ObjectServer;
using runtime::MemoryDirectory;
using runtime::ObjectStore;
using runtime::StoreOptions;

using TempDir = testing::ShmTempDir;

// Host h0 with its agent's server, and a rank on h1 that reads from it.
struct TwoHosts {
  TempDir d0, d1;
  MemoryDirectory dir;  // the job-wide name directory
  std::unique_ptr<ObjectServer> server;
  std::unique_ptr<ObjectStore> on_h0, on_h1;

  TwoHosts() {
    auto s = ObjectServer::start({"127.0.0.1"}, d0.path());
    EXPECT_TRUE(s.is_ok()) << s.status().message();
    if (s.is_ok()) server = std::move(s).value();
    std::string addr = server ? server->addresses() : "";
    auto a = ObjectStore::open(dir, StoreOptions{d0.path(), "h0", 0, "", addr});
    auto b = ObjectStore::open(dir, StoreOptions{d1.path(), "h1", 1, "", "127.0.0.1:1"});
    EXPECT_TRUE(a.is_ok() && b.is_ok());
    if (a.is_ok()) on_h0 = std::move(a).value();
    if (b.is_ok()) on_h1 = std::move(b).value();
  }
  // The port of h0's agent's server.
  std::uint16_t port() const {
    const std::string& addr = server->addresses();
    return static_cast<std::uint16_t>(std::atoi(addr.c_str() + addr.rfind(':') + 1));
  }
};

std::vector<unsigned char> pattern(std::size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>((i * 2654435761u + seed) >> 13);
  return v;
}

TEST(ObjectServer, GetFromAnotherHostReturnsTheExactBytes) {
  TwoHosts t;
  ASSERT_TRUE(t.server && t.on_h0 && t.on_h1);
  EXPECT_NE(t.server->addresses().find("127.0.0.1:"), std::string::npos);
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{1024}, std::size_t{32} << 20}) {
    std::string key = "blob/" + std::to_string(n);
    auto data = pattern(n, static_cast<unsigned>(n));
    ASSERT_TRUE(t.on_h0->put(key, data.data(), n).is_ok());
    std::vector<unsigned char> got(n + 1, 0xee);
    std::size_t len = 12345;
    Status st = t.on_h1->get(key, got.data(), got.size(), &len, 0);
    ASSERT_TRUE(st.is_ok()) << st.message();
    EXPECT_EQ(len, n);
    EXPECT_TRUE(std::equal(data.begin(), data.end(), got.begin())) << n << " bytes differ";
    EXPECT_EQ(got[n], 0xee) << "wrote past the object";
  }
}

TEST(ObjectServer, ManyReadersAtOnce) {
  TwoHosts t;
  ASSERT_TRUE(t.server && t.on_h0 && t.on_h1);
  auto data = pattern(4 << 20, 7);
  ASSERT_TRUE(t.on_h0->put("shared", data.data(), data.size()).is_ok());
  std::vector<std::thread> readers;
  std::atomic<int> exact{0};
  for (int i = 0; i < 16; ++i)
    readers.emplace_back([&] {
      std::vector<unsigned char> got(data.size());
      std::size_t len = 0;
      if (t.on_h1->get("shared", got.data(), got.size(), &len, 0).is_ok() && got == data) ++exact;
    });
  for (auto& r : readers) r.join();
  EXPECT_EQ(exact.load(), 16);
}

TEST(ObjectServer, DeleteFromAnotherHostFreesTheOwningHostsBytes) {
  TwoHosts t;
  ASSERT_TRUE(t.server && t.on_h0 && t.on_h1);
  auto data = pattern(100000, 1);
  ASSERT_TRUE(t.on_h0->put("k", data.data(), data.size()).is_ok());
  EXPECT_EQ(t.on_h0->used(), data.size());
  ASSERT_TRUE(t.on_h1->remove("k").is_ok());
  EXPECT_EQ(t.on_h0->used(), 0u);
  std::size_t len = 0;
  EXPECT_EQ(t.on_h0->get("k", data.data(), data.size(), &len, 0).code(), Code::kNotFound);
  EXPECT_EQ(t.on_h1->remove("k").code(), Code::kNotFound);
  // The key is free again; put on h1 now, whose "agent" (port 1) never
  // answers: deleting it from h0 fails and changes nothing.
  EXPECT_TRUE(t.on_h1->put("k", data.data(), 10).is_ok());
  Status st = t.on_h0->remove("k");
  EXPECT_EQ(st.code(), Code::kRemote) << st.message();
  EXPECT_NE(st.message().find("cannot reach host h1"), std::string::npos) << st.message();
  EXPECT_EQ(t.on_h1->used(), 10u);
  EXPECT_TRUE(t.on_h1->remove("k").is_ok());
}

// A delete from another host that died between its two steps (the owning
// agent unlinked the file; the key was never unpublished) leaves a key that
// names nothing.  On another host, put refuses it as existing and the delete
// that put's message asks for removes the key (saying the object was
// deleted already); on the owning host, a delete does the same and a put
// finds the file gone and takes the key.
TEST(ObjectServer, ADeleteThatDiedBeforeItsUnpublishIsFinishedByTheNextDeleteOrPut) {
  TwoHosts t;
  ASSERT_TRUE(t.server && t.on_h0 && t.on_h1);
  auto data = pattern(4096, 3);
  // The dead delete's first step, as it asked the agent.
  auto half_delete = [&] {
    std::string file;
    for (const auto& e : std::filesystem::directory_iterator(t.d0.path()))
      if (e.path().filename().string().rfind("obj.", 0) == 0) file = e.path().filename().string();
    ASSERT_FALSE(file.empty());
    ASSERT_TRUE(runtime::delete_remote_object(t.server->addresses(), "h0", file).is_ok());
  };
  auto reads = [&](ObjectStore& on, std::size_t n) {
    std::vector<unsigned char> got(n);
    std::size_t len = 0;
    Status st = on.get("k", got.data(), got.size(), &len, 0);
    EXPECT_TRUE(st.is_ok()) << st.message();
    EXPECT_EQ(len, n);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), data.begin()));
  };
  for (ObjectStore* deleter : {t.on_h1.get(), t.on_h0.get()}) {
    ASSERT_TRUE(t.on_h0->put("k", data.data(), data.size()).is_ok());
    half_delete();
    EXPECT_EQ(t.on_h1->put("k", data.data(), 10).code(), Code::kInvalidUsage);
    Status st = deleter->remove("k");
    EXPECT_EQ(st.code(), Code::kNotFound) << st.message();
    EXPECT_NE(st.message().find("deleted already"), std::string::npos) << st.message();
    st = t.on_h1->put("k", data.data(), 10);
    ASSERT_TRUE(st.is_ok()) << st.message();
    reads(*t.on_h1, 10);  // (h1 has no agent: read there)
    ASSERT_TRUE(t.on_h1->remove("k").is_ok());
  }
  ASSERT_TRUE(t.on_h0->put("k", data.data(), data.size()).is_ok());
  half_delete();
  Status st = t.on_h0->put("k", data.data(), 20);
  ASSERT_TRUE(st.is_ok()) << st.message();
  reads(*t.on_h1, 20);
}

// A rank stopped while it holds the host's store lock (here: the lock
// byte taken through a descriptor of the test's own) holds a delete from
// another host up a moment only; the bytes it frees are counted again by
// the next put on the owning host.
TEST(ObjectServer, ADeleteFromAnotherHostDoesNotWaitForAStoppedLockHolder) {
  TwoHosts t;
  ASSERT_TRUE(t.server && t.on_h0 && t.on_h1);
  auto data = pattern(100000, 2);
  ASSERT_TRUE(t.on_h0->put("k", data.data(), data.size()).is_ok());
  const int fd = ::open((t.d0.path() + "/store.accounting").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = static_cast<off_t>(objects::kAccountingLockAt);
  fl.l_len = 1;
  ASSERT_EQ(::fcntl(fd, F_OFD_SETLK, &fl), 0);
  const auto t0 = std::chrono::steady_clock::now();
  Status st = t.on_h1->remove("k");
  const auto took = std::chrono::steady_clock::now() - t0;
  ::close(fd);
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_LT(took, std::chrono::seconds(2));
  ASSERT_TRUE(t.on_h0->put("small", data.data(), 10).is_ok());
  EXPECT_EQ(t.on_h0->used(), 10u);  // counted again
}

TEST(ObjectServer, AnObjectDeletedBeforeTheTransferIsNotFound) {
  TwoHosts t;
  ASSERT_TRUE(t.server && t.on_h0 && t.on_h1);
  int v = 42;
  ASSERT_TRUE(t.on_h0->put("gone", &v, sizeof v).is_ok());
  // Its file goes, its metadata stays (as between a delete's two steps).
  for (const auto& e : std::filesystem::directory_iterator(t.d0.path()))
    if (e.path().filename().string().rfind("obj.", 0) == 0) std::filesystem::remove(e.path());
  std::size_t len = 0;
  Status st = t.on_h1->get("gone", &v, sizeof v, &len, 0);
  EXPECT_EQ(st.code(), Code::kNotFound) << st.message();
  EXPECT_NE(st.message().find("'gone' was deleted"), std::string::npos) << st.message();
}

// A raw request, as a stranger on the network would send it.
objects::Reply ask(const std::string& addr, std::string_view name, objects::Op op = objects::Op::kGet,
                   std::string_view magic = objects::kMagic) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::atoi(addr.c_str() + addr.rfind(':') + 1)));
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  std::string req(magic);
  req += static_cast<char>(op);
  req += '\0';
  req += static_cast<char>(name.size() & 0xff);
  req += static_cast<char>(name.size() >> 8);
  req += name;
  EXPECT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  unsigned char h[objects::kReplyHeader] = {0xff};
  ssize_t n = ::recv(fd, h, sizeof h, MSG_WAITALL);
  ::close(fd);
  return n == static_cast<ssize_t>(sizeof h) ? static_cast<objects::Reply>(h[0]) : objects::Reply::kFailed;
}

TEST(ObjectServer, ServesObjectFilesOnlyAndOnlyByTheirFullName) {
  TwoHosts t;
  ASSERT_TRUE(t.server && t.on_h0);
  int v = 7;
  ASSERT_TRUE(t.on_h0->put("k", &v, sizeof v).is_ok());
  std::string file;
  for (const auto& e : std::filesystem::directory_iterator(t.d0.path()))
    if (e.path().filename().string().rfind("obj.", 0) == 0) file = e.path().filename();
  ASSERT_TRUE(objects::is_object_file(file)) << file;
  const std::string& addr = t.server->addresses();
  EXPECT_EQ(ask(addr, file), objects::Reply::kOk);
  // Guessing: the same name with another token.
  std::string guess = file;
  guess.back() = guess.back() == '0' ? '1' : '0';
  EXPECT_EQ(ask(addr, guess), objects::Reply::kNotFound);
  // Anything that is not an object file's name.
  for (std::string_view bad : {"store.accounting", "../x", "obj.0.1.2", "obj.0.1.2./../../etc/passwd", ""})
    EXPECT_EQ(ask(addr, bad), objects::Reply::kBadRequest) << bad;
  EXPECT_EQ(ask(addr, file, static_cast<objects::Op>(9)), objects::Reply::kBadRequest);
  EXPECT_EQ(ask(addr, file, objects::Op::kGet, "HTTP"), objects::Reply::kBadRequest);
  // A symlink named like an object is not followed.
  std::string link = "obj.9.9.9." + std::string(32, 'a');
  std::filesystem::create_symlink("/etc/hostname", t.d0.path() + "/" + link);
  EXPECT_EQ(ask(addr, link), objects::Reply::kFailed);
  // The file is still there and still served.
  std::size_t len = 0;
  EXPECT_TRUE(t.on_h1->get("k", &v, sizeof v, &len, 0).is_ok());
  EXPECT_EQ(v, 7);
}

// Anyone who reaches the port may connect: connections that send nothing,
// more than the server reads at once and more than the kernel's backlog,
// neither hold up a rank's get nor stay open past the request's wait.
TEST(ObjectServer, IdleConnectionsNeitherHoldUpAGetNorStayOpen) {
  TwoHosts t;
  ASSERT_TRUE(t.server && t.on_h0 && t.on_h1);
  int v = 7;
  ASSERT_TRUE(t.on_h0->put("k", &v, sizeof v).is_ok());
  const std::uint16_t port = t.port();
  const std::vector<int> idle = testing::open_idle(port, static_cast<int>(ObjectServer::kMaxReading) + 200);
  ASSERT_EQ(idle.size(), ObjectServer::kMaxReading + 200);
  const auto t0 = std::chrono::steady_clock::now();
  v = 0;
  std::size_t len = 0;
  Status st = t.on_h1->get("k", &v, sizeof v, &len, 0);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(v, 7);
  EXPECT_LT(took, 1.0) << "a get behind " << idle.size() << " idle connections";
  // Past the request's wait the server has closed every idle connection.
  std::this_thread::sleep_for(std::chrono::milliseconds(ObjectServer::kRequestWaitMs + 700));
  const std::size_t closed = testing::closed_by_peer(idle);
  EXPECT_EQ(closed, idle.size());
}

// An agent out of descriptors cannot accept a connection, which stays in
// the backlog with the listener readable: the server leaves its listeners
// alone a while instead of spinning on them (before: a core's worth of CPU
// for as long as it lasted), and serves again once descriptors are free.
TEST(ObjectServer, AnAgentOutOfDescriptorsWaitsInsteadOfSpinning) {
  TwoHosts t;
  ASSERT_TRUE(t.server && t.on_h0 && t.on_h1);
  int v = 7;
  ASSERT_TRUE(t.on_h0->put("k", &v, sizeof v).is_ok());
  const std::uint16_t port = t.port();
  auto cpu_ms = [] {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1000.0 +
           (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1000.0;
  };
  testing::DescriptorLimit one(1);  // the test's connection, and none for the server
  ASSERT_TRUE(one.ok());
  const int fd = testing::connect_loopback(port);
  const double before = cpu_ms();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const double spent = cpu_ms() - before;
  ASSERT_TRUE(one.lift());
  ASSERT_GE(fd, 0);
  EXPECT_LT(spent, 300.0) << "ms of CPU in 1 s with a connection the server could not accept";
  v = 0;
  std::size_t len = 0;
  Status st = t.on_h1->get("k", &v, sizeof v, &len, 0);
  EXPECT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(v, 7);
  ::close(fd);
}

TEST(ObjectServer, AnAgentThatIsGoneIsARemoteErrorNamingItsHost) {
  TwoHosts t;
  ASSERT_TRUE(t.server && t.on_h0 && t.on_h1);
  int v = 1;
  ASSERT_TRUE(t.on_h0->put("k", &v, sizeof v).is_ok());
  t.server.reset();
  auto t0 = std::chrono::steady_clock::now();
  std::size_t len = 0;
  Status st = t.on_h1->get("k", &v, sizeof v, &len, 0);
  EXPECT_EQ(st.code(), Code::kRemote) << st.message();
  EXPECT_NE(st.message().find("host h0"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("'k'"), std::string::npos) << st.message();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(6));
}

// An agent that is stopped (SIGSTOP) still has its connections accepted by
// the kernel, but answers nothing: a get gives up after 5 s naming the
// host (before: 30 s, "nothing moved").  Here the "agent" is a listener
// that never accepts.
TEST(ObjectServer, AnAgentThatDoesNotAnswerIsGivenUpAfterFiveSeconds) {
  TempDir d0, d1;
  MemoryDirectory dir;
  std::uint16_t port = 0;
  const int l = testing::listen_loopback(16, &port);
  ASSERT_GE(l, 0);
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  auto h0 = ObjectStore::open(dir, StoreOptions{d0.path(), "h0", 0, "", addr});
  auto h1 = ObjectStore::open(dir, StoreOptions{d1.path(), "h1", 1, "", "127.0.0.1:1"});
  ASSERT_TRUE(h0.is_ok() && h1.is_ok());
  int v = 1;
  ASSERT_TRUE((*h0)->put("k", &v, sizeof v).is_ok());
  const auto t0 = std::chrono::steady_clock::now();
  std::size_t len = 0;
  Status st = (*h1)->get("k", &v, sizeof v, &len, 0);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(st.code(), Code::kRemote) << st.message();
  EXPECT_NE(st.message().find("host h0"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("no answer within 5 s"), std::string::npos) << st.message();
  EXPECT_GT(took, 4.5);
  EXPECT_LT(took, 7.0);
  ::close(l);
}

// A get of `file` from the server at 127.0.0.1:port whose reader then
// reads nothing, with a small receive buffer: the server's transfer blocks.
int stalled_get(std::uint16_t port, const std::string& file) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int small = 4096;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  const sockaddr_in a = testing::loopback_address(port);
  std::string req(objects::kMagic);
  req += static_cast<char>(objects::Op::kGet);
  req += '\0';
  req += static_cast<char>(file.size());
  req += '\0';
  req += file;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 ||
      ::send(fd, req.data(), req.size(), 0) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// The object files in a host's directory.
std::vector<std::string> object_files(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().rfind("obj.", 0) == 0) files.push_back(e.path().filename());
  return files;
}

// A get that finds every transfer thread of the agent busy waits its turn,
// however long the transfers ahead of it take (before: it failed as a
// stall, "nothing moved for 30 s", once they took longer than that; here
// the get is given a 1 s stall and waits 3 s).
TEST(ObjectServer, AGetWaitsItsTurnBehindTheTransfersInFlight) {
  TwoHosts t;
  ASSERT_TRUE(t.server && t.on_h0);
  const auto big = pattern(16 << 20, 5), small = pattern(4096, 6);
  ASSERT_TRUE(t.on_h0->put("big", big.data(), big.size()).is_ok());
  const std::vector<std::string> before = object_files(t.d0.path());
  ASSERT_EQ(before.size(), 1u);
  ASSERT_TRUE(t.on_h0->put("small", small.data(), small.size()).is_ok());
  std::string small_file;
  for (const std::string& f : object_files(t.d0.path()))
    if (f != before[0]) small_file = f;
  ASSERT_FALSE(small_file.empty());
  std::vector<int> readers;
  for (int i = 0; i < ObjectServer::kMaxRequests; ++i) {
    readers.push_back(stalled_get(t.port(), before[0]));
    ASSERT_GE(readers.back(), 0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // every thread taken
  std::vector<unsigned char> got(small.size());
  Status st;
  double took = 0;
  std::thread getter([&] {
    const auto t0 = std::chrono::steady_clock::now();
    st = runtime::fetch_remote_object(t.server->addresses(), "h0", small_file, got.data(),
                                      got.size(), std::chrono::seconds(1));
    took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
  std::this_thread::sleep_for(std::chrono::seconds(3));
  for (int fd : readers) ::close(fd);
  getter.join();
  EXPECT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(got, small);
  EXPECT_GE(took, 2.5) << "the get did not wait behind the transfers in flight";
}

TEST(ObjectServer, StoppingCutsATransferThatStalls) {
  TwoHosts t;
  ASSERT_TRUE(t.server && t.on_h0);
  auto data = pattern(64 << 20, 3);
  ASSERT_TRUE(t.on_h0->put("big", data.data(), data.size()).is_ok());
  std::string file;
  for (const auto& e : std::filesystem::directory_iterator(t.d0.path()))
    if (e.path().filename().string().rfind("obj.", 0) == 0) file = e.path().filename();
  // A reader that asks and then reads nothing: the server blocks in sendfile.
  const int fd = stalled_get(t.port(), file);
  ASSERT_GE(fd, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto t0 = std::chrono::steady_clock::now();
  t.server.reset();  // joins every request's thread
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  ::close(fd);
}

}  // namespace
}  // namespace accrun
