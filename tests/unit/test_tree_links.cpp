// An agent's links along the launch tree (launcher/src/agent/tree_links.hpp)
// over real loopback sockets: children prove the job's secret and say who
// they are, whole-job fence rounds gather the subtree's contributions in
// order and go up once, answers come down to the children, and strangers
// (garbage, a wrong secret, an agent that is not a child) are refused
// without disturbing the links that work; once every child has joined the
// parent stops listening.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "agent/tree_links.hpp"
#include "controller/protocol.hpp"
#include "loopback.hpp"
#include "wire/codec.hpp"
#include "wire/connection.hpp"

namespace accrun::launcher {
namespace {

using namespace std::chrono_literals;

wire::Secret secret_of(char fill) {
  wire::Secret s;
  s.bytes.fill(static_cast<uint8_t>(fill));
  return s;
}

// Serves `links` for `d` (what arrives within it is handled).
void pump(TreeLinks& links, std::chrono::milliseconds d = 50ms) {
  auto end = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{links.fd(), POLLIN, 0};
    if (poll(&p, 1, 5) > 0) links.on_readable();
  }
}

// `child` joins `parent` at `address` while the parent serves.
Status join(TreeLinks& parent, TreeLinks& child, const std::string& address) {
  Status result = invalid_usage("not run");
  std::thread t([&] { result = child.join(address, 5000ms); });
  pump(parent, 300ms);
  t.join();
  pump(parent, 50ms);
  return result;
}

std::string answer(const std::string& sig, const std::string& all) {
  wire::Writer w;
  w.str(sig);
  w.boolean(true);
  w.bytes(all.data(), all.size());
  return w.take();
}

struct Pipe {
  int fd[2] = {-1, -1};
  Pipe() { EXPECT_EQ(pipe2(fd, O_NONBLOCK | O_CLOEXEC), 0); }
  ~Pipe() {
    close(fd[0]);
    close(fd[1]);
  }
  std::string read_all() {
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = read(fd[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
    return out;
  }
};

TEST(TreeLinks, RoundsGatherTheSubtreeGoUpOnceAndComeBackDown) {
  wire::Secret secret = secret_of('s');
  TreeLinks parent(secret, 0, "p"), a(secret, 1, "a"), b(secret, 2, "b");
  auto address = parent.listen("127.0.0.1", {1, 2});
  ASSERT_TRUE(address) << address.status().message();
  ASSERT_TRUE(join(parent, a, *address)) << "a";
  ASSERT_TRUE(join(parent, b, *address)) << "b";

  std::vector<std::string> up;
  parent.carry_fences({1, 2}, [&](std::string p) { up.push_back(std::move(p)); }, [](std::string_view) {});
  std::vector<std::string> down_a, down_b;
  a.carry_fences({}, [](std::string) { ADD_FAILURE() << "a child sent to the controller"; },
                 [&](std::string_view p) { down_a.emplace_back(p); });
  b.carry_fences({}, [](std::string) { ADD_FAILURE() << "a child sent to the controller"; },
                 [&](std::string_view p) { down_b.emplace_back(p); });
  EXPECT_TRUE(parent.carries("*"));
  EXPECT_TRUE(parent.carries("pmi:*"));
  EXPECT_FALSE(parent.carries("0,3"));

  // Two rounds from a, one from b: nothing goes up without the parent's own.
  a.contribute("*", "a1");
  a.contribute("*", "a2");
  b.contribute("*", "b1");
  pump(parent, 100ms);
  EXPECT_TRUE(up.empty());
  parent.contribute("*", "p1");
  ASSERT_EQ(up.size(), 1u);
  auto first = msg::decode_fence(up[0]);
  ASSERT_TRUE(first) << first.status().message();
  EXPECT_EQ(first->signature, "*");
  EXPECT_EQ(first->parts, (std::vector<std::pair<int, std::string>>{{0, "p1"}, {1, "a1"}, {2, "b1"}}));
  // Round 2 waits for b.
  parent.contribute("*", "p2");
  EXPECT_EQ(up.size(), 1u);
  b.contribute("*", "b2");
  pump(parent, 100ms);
  ASSERT_EQ(up.size(), 2u);
  EXPECT_EQ(msg::decode_fence(up[1])->parts, (std::vector<std::pair<int, std::string>>{{0, "p2"}, {1, "a2"}, {2, "b2"}}));

  // The answers come down, in order, to both children.
  parent.pass_down(answer("*", "p1a1b1"));
  parent.pass_down(answer("*", "p2a2b2"));
  pump(a, 100ms);
  pump(b, 100ms);
  ASSERT_EQ(down_a.size(), 2u);
  ASSERT_EQ(down_b.size(), 2u);
  EXPECT_EQ(down_a[0], answer("*", "p1a1b1"));
  EXPECT_EQ(down_b[1], answer("*", "p2a2b2"));
}

// A parent agent listening on loopback for its one child (agent 1), its
// messages in err.
struct ParentOfOne {
  wire::Secret secret = secret_of('s');
  Pipe err;
  TreeLinks parent{secret, 0, "p", err.fd[1]}, child{secret, 1, "c"};
  std::string address;
  uint16_t port = 0;
  ParentOfOne() {
    auto a = parent.listen("127.0.0.1", {1});
    EXPECT_TRUE(a) << a.status().message();
    if (!a) return;
    address = *a;
    port = static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
  }
};

TEST(TreeLinks, StrangersAreRefusedAndTheChildrenStillFence) {
  ParentOfOne bed;
  ASSERT_NE(bed.port, 0);
  wire::Secret& secret = bed.secret;
  Pipe& err = bed.err;
  TreeLinks &parent = bed.parent, &child = bed.child;
  const std::string& address = bed.address;
  const uint16_t port = bed.port;

  // Garbage instead of a handshake.
  auto raw = wire::connect_tcp("127.0.0.1", port, 1000ms);
  ASSERT_TRUE(raw);
  std::string junk(100, 'x');
  ASSERT_EQ(send(*raw, junk.data(), junk.size(), MSG_NOSIGNAL), 100);
  pump(parent, 100ms);
  EXPECT_NE(err.read_all().find("refused a connection from 127.0.0.1:"), std::string::npos);
  close(*raw);

  // The wrong secret: the joiner fails, the parent says so.
  TreeLinks wrong(secret_of('w'), 1, "w");
  EXPECT_FALSE(join(parent, wrong, address));
  EXPECT_NE(err.read_all().find("refused a connection"), std::string::npos);

  // The right secret, but an agent this one did not start.
  TreeLinks other(secret, 7, "o");
  ASSERT_TRUE(join(parent, other, address));
  pump(parent, 100ms);
  EXPECT_NE(err.read_all().find("agent 7 is not one this agent started"), std::string::npos);

  // The real child joins and fences as if nothing happened.
  ASSERT_TRUE(join(parent, child, address));
  std::vector<std::string> up;
  parent.carry_fences({1}, [&](std::string p) { up.push_back(std::move(p)); }, [](std::string_view) {});
  child.carry_fences({}, [](std::string) {}, [](std::string_view) {});
  child.contribute("pmi:*", "c");
  parent.contribute("pmi:*", "p");
  pump(parent, 100ms);
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(msg::decode_fence(up[0])->parts, (std::vector<std::pair<int, std::string>>{{0, "p"}, {1, "c"}}));
  // Every child has joined: the parent listens no more, so a second join
  // by the same agent finds nobody; the first link stays.
  TreeLinks again(secret, 1, "c2");
  EXPECT_FALSE(join(parent, again, address));
  child.contribute("pmi:*", "c");
  parent.contribute("pmi:*", "p");
  pump(parent, 100ms);
  EXPECT_EQ(up.size(), 2u);
}

// Silent connections (anyone who reaches the port may open them) arrive
// right behind a child, more than the parent keeps waiting: the silent ones
// go, the child joins, and only the first refusals are reported.
TEST(TreeLinks, AFloodOfSilentConnectionsNeitherPushesOutAChildNorFloodsTheLog) {
  ParentOfOne bed;
  ASSERT_NE(bed.port, 0);
  Pipe& err = bed.err;
  TreeLinks &parent = bed.parent, &child = bed.child;
  const std::string& address = bed.address;
  const uint16_t port = bed.port;
  std::vector<int> idle = testing::open_idle(port, 63);
  pump(parent, 100ms);
  Status joined = invalid_usage("not run");
  std::thread t([&] { joined = child.join(address, 5000ms); });
  std::this_thread::sleep_for(50ms);  // the child's connection is in the backlog
  for (int fd : testing::open_idle(port, 120)) idle.push_back(fd);
  pump(parent, 500ms);
  t.join();
  pump(parent, 50ms);
  EXPECT_TRUE(joined) << joined.message();
  std::vector<std::string> up;
  parent.carry_fences({1}, [&](std::string p) { up.push_back(std::move(p)); }, [](std::string_view) {});
  child.carry_fences({}, [](std::string) {}, [](std::string_view) {});
  child.contribute("pmi:*", "c");
  parent.contribute("pmi:*", "p");
  pump(parent, 100ms);
  EXPECT_EQ(up.size(), 1u) << "the child fences";
  const std::string said = err.read_all();
  std::size_t lines = 0;
  for (char c : said) lines += c == '\n';
  EXPECT_LE(lines, 11u) << said;
  EXPECT_NE(said.find("further refusals are not reported"), std::string::npos) << said;
  testing::closed_by_peer(idle);
}

}  // namespace
}  // namespace accrun::launcher
