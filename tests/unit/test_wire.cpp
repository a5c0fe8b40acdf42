// test_wire.cpp — the launcher's wire layer: codec, frames, handshake, connections.
//
// Hermetic: socketpairs and loopback TCP on port 0 only; every wait has a
// timeout.  The fuzz test is seeded and bounded to about two seconds.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "wire/auth.hpp"
#include "wire/codec.hpp"
#include "wire/connection.hpp"
#include "wire/frame.hpp"

namespace accrun::wire {
namespace {

using namespace std::chrono_literals;

// --- helpers ---

// Closes an fd at scope exit.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

Secret make_secret(uint8_t seed) {
  Secret s;
  for (size_t i = 0; i < s.bytes.size(); ++i) s.bytes[i] = static_cast<uint8_t>(seed * 31 + i);
  return s;
}

std::vector<Frame> decode_all(FrameDecoder& d, const std::string& bytes) {
  std::vector<Frame> out;
  Status s = d.feed(bytes.data(), bytes.size(), out);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return out;
}

// Runs two handshakes against each other in memory, delivering each side's
// output to the other in chunks of `chunk` bytes.  Returns both statuses.
struct Pair {
  Status parent;
  Status child;
  bool parent_done = false;
  bool child_done = false;
};

Pair run_pair(Handshake& a, Handshake& b, size_t chunk = 4096) {
  Pair r;
  std::string to_b = a.start();
  std::string to_a = b.start();
  for (int round = 0; round < 1000 && (!to_a.empty() || !to_b.empty()); ++round) {
    auto deliver = [&](Handshake& h, std::string& in, std::string& reply, Status& st, bool& done) {
      while (!in.empty() && st.is_ok()) {
        const size_t n = std::min(chunk, in.size());
        auto step = h.feed(in.data(), n);
        in.erase(0, n);
        if (!step) {
          st = step.status();
          break;
        }
        reply += step->send;
        if (step->done) {
          done = true;
          EXPECT_TRUE(step->leftover.empty());
          break;
        }
      }
      in.clear();
    };
    std::string new_to_a, new_to_b;
    deliver(b, to_b, new_to_a, r.child, r.child_done);
    deliver(a, to_a, new_to_b, r.parent, r.parent_done);
    to_a += new_to_a;
    to_b += new_to_b;
  }
  return r;
}

// A valid transcript of what a child sends a parent: hello then proof.
// Produced with a real parent so the proof matches `parent`'s nonce.
std::string child_transcript(Handshake& parent, const Secret& secret) {
  Handshake child(Role::kChild, secret);
  std::string to_child = parent.start();
  std::string out = child.start();
  auto step = child.feed(to_child.data(), to_child.size());
  EXPECT_TRUE(step.is_ok());
  out += step->send;
  return out;
}

// --- codec ---

TEST(WireCodec, RoundTripsEveryType) {
  Writer w;
  w.u8(0xab);
  w.u16(0xbeef);
  w.u32(0xdeadbeef);
  w.u64(0x0123456789abcdefULL);
  w.i32(-123456);
  w.i64(std::numeric_limits<int64_t>::min());
  w.f64(3.25);
  w.f64(-0.0);
  w.f64(std::numeric_limits<double>::infinity());
  w.boolean(true);
  w.boolean(false);
  w.str("hello");
  w.str("");
  const std::string blob("\0\1\2\xff", 4);
  w.bytes(blob.data(), blob.size());
  w.string_map({{"A", "1"}, {"B", ""}, {"", "empty key"}});
  w.string_map({});
  w.string_vector({"x", "", "zz"});
  w.string_vector({});

  Reader r(w.data());
  EXPECT_EQ(*r.u8("u8"), 0xab);
  EXPECT_EQ(*r.u16("u16"), 0xbeef);
  EXPECT_EQ(*r.u32("u32"), 0xdeadbeefu);
  EXPECT_EQ(*r.u64("u64"), 0x0123456789abcdefULL);
  EXPECT_EQ(*r.i32("i32"), -123456);
  EXPECT_EQ(*r.i64("i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(*r.f64("f64"), 3.25);
  const double nz = *r.f64("negative zero");
  EXPECT_EQ(nz, 0.0);
  EXPECT_TRUE(std::signbit(nz));
  EXPECT_EQ(*r.f64("inf"), std::numeric_limits<double>::infinity());
  EXPECT_TRUE(*r.boolean("t"));
  EXPECT_FALSE(*r.boolean("f"));
  EXPECT_EQ(*r.str("s"), "hello");
  EXPECT_EQ(*r.str("empty"), "");
  EXPECT_EQ(*r.bytes("blob"), blob);
  auto m = r.string_map("map");
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(m->size(), 3u);
  EXPECT_EQ(m->at("A"), "1");
  EXPECT_EQ(m->at(""), "empty key");
  EXPECT_TRUE(r.string_map("empty map")->empty());
  EXPECT_EQ(*r.string_vector("vec"), (std::vector<std::string>{"x", "", "zz"}));
  EXPECT_TRUE(r.string_vector("empty vec")->empty());
  EXPECT_TRUE(r.at_end());
  EXPECT_TRUE(r.expect_end("message").is_ok());
}

TEST(WireCodec, NanRoundTripsBitExact) {
  Writer w;
  w.f64(std::numeric_limits<double>::quiet_NaN());
  Reader r(w.data());
  EXPECT_TRUE(std::isnan(*r.f64("nan")));
}

TEST(WireCodec, LittleEndianLayout) {
  Writer w;
  w.u32(0x04030201);
  w.u16(0x0605);
  w.i32(-2);
  w.str("ab");
  EXPECT_EQ(w.data(), std::string("\x01\x02\x03\x04\x05\x06\xfe\xff\xff\xff\x02\0\0\0ab", 16));
  std::string taken = w.take();
  EXPECT_EQ(taken.size(), 16u);
  EXPECT_EQ(w.size(), 0u);
}

TEST(WireCodec, EveryTruncationIsAnErrorNamingTheField) {
  Writer w;
  w.u64(7);
  w.str("some string");
  w.string_map({{"k", "v"}});
  w.string_vector({"a", "b"});
  w.f64(1.5);
  const std::string full = w.data();
  for (size_t len = 0; len < full.size(); ++len) {
    Reader r(full.data(), len);
    Status first;
    auto note = [&](const Status& s) {
      if (first.is_ok() && !s.is_ok()) first = s;
    };
    note(r.u64("count").status());
    if (first.is_ok()) note(r.str("name").status());
    if (first.is_ok()) note(r.string_map("env").status());
    if (first.is_ok()) note(r.string_vector("argv").status());
    if (first.is_ok()) note(r.f64("weight").status());
    ASSERT_FALSE(first.is_ok()) << "prefix of " << len << " bytes decoded";
    EXPECT_EQ(first.code(), Code::kInvalidArgument);
    EXPECT_NE(first.message().find("wire: "), std::string::npos) << first.message();
  }
}

TEST(WireCodec, OverlongLengthRejectedBeforeAllocation) {
  // A 4 GiB string announced with 3 bytes behind it: refused, nothing consumed.
  const std::string huge("\xff\xff\xff\xff" "abc", 7);
  Reader r(huge);
  auto s = r.str("name");
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), Code::kInvalidArgument);
  EXPECT_NE(s.status().message().find("name"), std::string::npos) << s.status().message();
  EXPECT_NE(s.status().message().find("4294967295"), std::string::npos);
  EXPECT_EQ(r.offset(), 0u);
  // Counts of maps and vectors are bounded by the bytes that could hold them.
  Reader rm(huge);
  EXPECT_EQ(rm.string_map("env").status().code(), Code::kInvalidArgument);
  Reader rv(huge);
  EXPECT_EQ(rv.string_vector("argv").status().code(), Code::kInvalidArgument);
  // One byte short.
  Writer w;
  w.str("abcd");
  Reader rs(w.data().data(), w.size() - 1);
  EXPECT_FALSE(rs.str("s").is_ok());
  // A vector whose count is plausible but whose elements are missing.
  const std::string vec("\x02\0\0\0\x00\0\0\0\x05\0\0\0", 12);
  Reader rv2(vec);
  EXPECT_FALSE(rv2.string_vector("argv").is_ok());
  EXPECT_EQ(rv2.offset(), 0u);
}

TEST(WireCodec, MalformedValuesRejected) {
  const std::string two("\x02", 1);
  EXPECT_EQ(Reader(two).boolean("flag").status().code(), Code::kInvalidArgument);
  Writer w;
  w.u32(2);
  w.str("k");
  w.str("1");
  w.str("k");
  w.str("2");
  Reader r(w.data());
  auto m = r.string_map("env");
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("repeated key 'k'"), std::string::npos)
      << m.status().message();
  Writer t;
  t.u8(1);
  t.u8(2);
  Reader rt(t.data());
  ASSERT_TRUE(rt.u8("a").is_ok());
  Status end = rt.expect_end("message");
  EXPECT_EQ(end.code(), Code::kInvalidArgument);
  EXPECT_NE(end.message().find("1 trailing bytes"), std::string::npos) << end.message();
}

TEST(WireCodec, BytesViewPointsIntoInput) {
  Writer w;
  w.bytes("xyz", 3);
  const std::string data = w.data();
  Reader r(data);
  auto v = r.bytes_view("blob");
  ASSERT_TRUE(v.is_ok());
  EXPECT_EQ(*v, "xyz");
  EXPECT_EQ(v->data(), data.data() + 4);
}

// --- frames ---

TEST(WireFrame, EncodeLayout) {
  const std::string f = encode_frame(0x0102, "abc");
  EXPECT_EQ(f, std::string("\x03\0\0\0\x02\x01\0\0abc", 11));
  EXPECT_EQ(encode_frame(7, "").size(), kFrameHeaderSize);
  static_assert(kMaxFrame == 64u * 1024 * 1024);
}

std::vector<Frame> sample_frames() {
  std::vector<Frame> v;
  v.push_back({1, ""});
  v.push_back({2, "x"});
  v.push_back({65535, std::string(1000, 'q')});
  std::string bin(300, '\0');
  for (size_t i = 0; i < bin.size(); ++i) bin[i] = static_cast<char>(i);
  v.push_back({7, bin});
  v.push_back({0, "tail"});
  return v;
}

std::string concat(const std::vector<Frame>& frames) {
  std::string s;
  for (const auto& f : frames) s += encode_frame(f.type, f.payload);
  return s;
}

void expect_same(const std::vector<Frame>& got, const std::vector<Frame>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].type, want[i].type) << i;
    EXPECT_EQ(got[i].payload, want[i].payload) << i;
  }
}

TEST(WireFrame, DecodesOneByteAtATime) {
  const auto frames = sample_frames();
  const std::string stream = concat(frames);
  FrameDecoder d;
  std::vector<Frame> got;
  for (char c : stream) {
    ASSERT_TRUE(d.feed(&c, 1, got).is_ok());
  }
  expect_same(got, frames);
  EXPECT_EQ(d.buffered(), 0u);
}

TEST(WireFrame, DecodesRandomChunkSplits) {
  const auto frames = sample_frames();
  const std::string stream = concat(frames);
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 200; ++trial) {
    FrameDecoder d;
    std::vector<Frame> got;
    size_t off = 0;
    while (off < stream.size()) {
      const size_t n = std::min<size_t>(stream.size() - off, 1 + rng() % 700);
      ASSERT_TRUE(d.feed(stream.data() + off, n, got).is_ok());
      off += n;
    }
    expect_same(got, frames);
  }
}

TEST(WireFrame, PartialFrameIsHeldNotDelivered) {
  FrameDecoder d;
  const std::string f = encode_frame(3, "payload");
  std::vector<Frame> got;
  ASSERT_TRUE(d.feed(f.data(), f.size() - 1, got).is_ok());
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(d.buffered(), f.size() - 1);
  ASSERT_TRUE(d.feed(f.data() + f.size() - 1, 1, got).is_ok());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].payload, "payload");
}

TEST(WireFrame, TooLongRefusedAndSticky) {
  // A header announcing kMaxFrame + 1 bytes, after one good frame.
  std::string s = encode_frame(1, "ok");
  const uint32_t len = static_cast<uint32_t>(kMaxFrame + 1);
  const char hdr[8] = {static_cast<char>(len & 0xff), static_cast<char>((len >> 8) & 0xff),
                       static_cast<char>((len >> 16) & 0xff), static_cast<char>(len >> 24),
                       9, 0, 0, 0};
  s.append(hdr, 8);
  FrameDecoder d;
  std::vector<Frame> got;
  Status st = d.feed(s.data(), s.size(), got);
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("more than the limit"), std::string::npos) << st.message();
  ASSERT_EQ(got.size(), 1u);  // the frame before the bad header
  EXPECT_EQ(got[0].payload, "ok");
  // Sticky: even a valid frame is refused now.
  const std::string good = encode_frame(1, "again");
  std::vector<Frame> more;
  EXPECT_FALSE(d.feed(good.data(), good.size(), more).is_ok());
  EXPECT_TRUE(more.empty());
  EXPECT_FALSE(d.status().is_ok());
}

TEST(WireFrame, MaximalHeaderAcceptedWithoutHugeAllocation) {
  const uint32_t len = static_cast<uint32_t>(kMaxFrame);
  const char hdr[8] = {static_cast<char>(len & 0xff), static_cast<char>((len >> 8) & 0xff),
                       static_cast<char>((len >> 16) & 0xff), static_cast<char>(len >> 24),
                       1, 0, 0, 0};
  FrameDecoder d;
  std::vector<Frame> got;
  EXPECT_TRUE(d.feed(hdr, 8, got).is_ok());
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(d.buffered(), kFrameHeaderSize);
}

TEST(WireFrame, NonZeroReservedRefused) {
  std::string f = encode_frame(1, "x");
  f[7] = 1;
  FrameDecoder d;
  std::vector<Frame> got;
  Status st = d.feed(f.data(), f.size(), got);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("reserved"), std::string::npos);
}

// --- secret ---

TEST(WireSecret, HexRoundTrip) {
  auto s = Secret::generate();
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  const std::string hex = s->to_hex();
  EXPECT_EQ(hex.size(), 64u);
  EXPECT_EQ(hex.find_first_not_of("0123456789abcdef"), std::string::npos);
  auto back = Secret::from_hex(hex);
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(back->bytes, s->bytes);
  auto line = Secret::from_hex(hex + "\n");
  ASSERT_TRUE(line.is_ok());
  EXPECT_EQ(line->bytes, s->bytes);
  std::string upper = hex;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  auto up = Secret::from_hex(upper + "\r\n");
  ASSERT_TRUE(up.is_ok());
  EXPECT_EQ(up->bytes, s->bytes);
}

TEST(WireSecret, GeneratedSecretsDiffer) {
  auto a = Secret::generate();
  auto b = Secret::generate();
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_NE(a->bytes, b->bytes);
}

TEST(WireSecret, FromHexRejectsBadInput) {
  const std::string good(64, 'a');
  EXPECT_TRUE(Secret::from_hex(good).is_ok());
  for (const std::string& bad :
       {std::string(), std::string(63, 'a'), std::string(65, 'a'), good + "\n\n",
        std::string(63, 'a') + "g", " " + std::string(63, 'a'), good + " "}) {
    auto r = Secret::from_hex(bad);
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  }
}

// --- handshake (state machines) ---

TEST(WireHandshake, TwoStateMachinesAgree) {
  const Secret secret = make_secret(1);
  for (size_t chunk : {size_t{1}, size_t{3}, size_t{41}, size_t{4096}}) {
    Handshake parent(Role::kParent, secret);
    Handshake child(Role::kChild, secret);
    Pair r = run_pair(parent, child, chunk);
    EXPECT_TRUE(r.parent.is_ok()) << r.parent.message();
    EXPECT_TRUE(r.child.is_ok()) << r.child.message();
    EXPECT_TRUE(r.parent_done && r.child_done) << "chunk " << chunk;
    EXPECT_TRUE(parent.done() && child.done());
    EXPECT_EQ(parent.wanted(), 0u);
  }
}

TEST(WireHandshake, LeftoverBytesAreHandedBack) {
  const Secret secret = make_secret(2);
  Handshake parent(Role::kParent, secret);
  std::string in = child_transcript(parent, secret);
  ASSERT_EQ(in.size(), kHelloSize + kProofSize);
  const std::string frames = encode_frame(5, "first") + encode_frame(6, "second");
  in += frames;
  auto step = parent.feed(in.data(), in.size());
  ASSERT_TRUE(step.is_ok()) << step.status().message();
  EXPECT_TRUE(step->done);
  EXPECT_EQ(step->send.size(), kProofSize);  // the parent's own proof
  EXPECT_EQ(step->leftover, frames);
  FrameDecoder d;
  auto got = decode_all(d, step->leftover);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].payload, "second");
  // Anything fed after completion is over-long input.
  auto after = parent.feed("x", 1);
  ASSERT_FALSE(after.is_ok());
  EXPECT_EQ(after.status().code(), Code::kInvalidUsage);
}

TEST(WireHandshake, WrongSecretRejectedOnBothSides) {
  Handshake parent(Role::kParent, make_secret(1));
  Handshake child(Role::kChild, make_secret(2));
  Pair r = run_pair(parent, child);
  EXPECT_FALSE(r.parent_done);
  EXPECT_FALSE(r.child_done);
  EXPECT_EQ(r.parent.code(), Code::kInvalidArgument);
  EXPECT_EQ(r.child.code(), Code::kInvalidArgument);
  EXPECT_NE(r.parent.message().find("the child failed to prove"), std::string::npos)
      << r.parent.message();
  EXPECT_NE(r.child.message().find("the parent failed to prove"), std::string::npos)
      << r.child.message();
  EXPECT_TRUE(parent.failed() && child.failed());
}

TEST(WireHandshake, GarbageMagicRejectedAtFirstWrongByte) {
  Handshake parent(Role::kParent, make_secret(1));
  (void)parent.start();
  auto step = parent.feed("GET / HTTP/1.1\r\n", 16);
  ASSERT_FALSE(step.is_ok());
  EXPECT_NE(step.status().message().find("bad magic"), std::string::npos);
  // A single wrong byte is enough, long before a full hello.
  Handshake p2(Role::kParent, make_secret(1));
  (void)p2.start();
  EXPECT_TRUE(p2.feed("ACC", 3).is_ok());
  EXPECT_FALSE(p2.feed("X", 1).is_ok());
  // Sticky.
  EXPECT_FALSE(p2.feed("R", 1).is_ok());
  // Another protocol version.
  Handshake p3(Role::kParent, make_secret(1));
  (void)p3.start();
  EXPECT_FALSE(p3.feed("ACCRUN2", 7).is_ok());
}

TEST(WireHandshake, SameRoleRejected) {
  const Secret secret = make_secret(3);
  for (Role role : {Role::kParent, Role::kChild}) {
    Handshake a(role, secret);
    Handshake b(role, secret);
    Pair r = run_pair(a, b);
    EXPECT_FALSE(r.parent_done || r.child_done);
    EXPECT_NE(r.parent.message().find("this side's role"), std::string::npos)
        << r.parent.message();
    EXPECT_NE(r.child.message().find("this side's role"), std::string::npos);
  }
}

TEST(WireHandshake, UnknownRoleRejected) {
  const Secret secret = make_secret(3);
  Handshake parent(Role::kParent, secret);
  std::string t = child_transcript(parent, secret);
  t[kHandshakeMagicSize] = 9;
  auto step = parent.feed(t.data(), t.size());
  ASSERT_FALSE(step.is_ok());
  EXPECT_NE(step.status().message().find("unknown role 9"), std::string::npos);
}

TEST(WireHandshake, ReplayedProofRejected) {
  // Record a complete child transcript for one parent, replay it to another.
  const Secret secret = make_secret(4);
  Handshake first(Role::kParent, secret);
  const std::string recorded = child_transcript(first, secret);
  auto ok = first.feed(recorded.data(), recorded.size());
  ASSERT_TRUE(ok.is_ok() && ok->done);
  Handshake second(Role::kParent, secret);
  (void)second.start();
  auto replay = second.feed(recorded.data(), recorded.size());
  ASSERT_FALSE(replay.is_ok());
  EXPECT_NE(replay.status().message().find("failed to prove"), std::string::npos);
}

TEST(WireHandshake, AlteredProofOrNonceRejected) {
  const Secret secret = make_secret(5);
  for (size_t pos : {kHandshakeMagicSize + 1, kHelloSize - 1, kHelloSize, kHelloSize + 17,
                     kHelloSize + kProofSize - 1}) {
    Handshake parent(Role::kParent, secret);
    std::string t = child_transcript(parent, secret);
    t[pos] = static_cast<char>(t[pos] ^ 0x01);
    auto step = parent.feed(t.data(), t.size());
    EXPECT_FALSE(step.is_ok()) << "flipped byte " << pos;
  }
}

TEST(WireHandshake, ReflectedHelloRejected) {
  // An attacker echoes the parent's own hello (with the role byte flipped)
  // and then the parent's own proof.
  const Secret secret = make_secret(6);
  Handshake parent(Role::kParent, secret);
  std::string hello = parent.start();
  hello[kHandshakeMagicSize] = static_cast<char>(Role::kChild);
  auto step = parent.feed(hello.data(), hello.size());
  ASSERT_FALSE(step.is_ok());
}

TEST(WireHandshake, FeedBeforeStartIsAnError) {
  Handshake h(Role::kChild, make_secret(1));
  auto step = h.feed("A", 1);
  ASSERT_FALSE(step.is_ok());
  EXPECT_EQ(step.status().code(), Code::kInvalidUsage);
}

// --- handshake over sockets ---

TEST(WireHandshake, BlockingOverSocketpairFromTwoThreads) {
  auto sp = stream_socketpair();
  ASSERT_TRUE(sp.is_ok());
  Fd a((*sp)[0]), b((*sp)[1]);
  const Secret secret = make_secret(7);
  Status child_status;
  std::thread child([&] {
    child_status = handshake_blocking(b.get(), Role::kChild, secret, 5s);
    // Frames right behind the proof: must not be eaten by the parent's handshake.
    if (child_status.is_ok()) {
      const std::string f = encode_frame(42, "inventory");
      (void)::send(b.get(), f.data(), f.size(), MSG_NOSIGNAL);
    }
  });
  Status parent_status = handshake_blocking(a.get(), Role::kParent, secret, 5s);
  child.join();
  ASSERT_TRUE(parent_status.is_ok()) << parent_status.message();
  ASSERT_TRUE(child_status.is_ok()) << child_status.message();
  Connection conn(a.release());
  std::vector<Frame> frames;
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (frames.empty() && std::chrono::steady_clock::now() < deadline) {
    auto got = conn.read_some();
    ASSERT_TRUE(got.is_ok()) << got.status().message();
    frames = std::move(*got);
    if (frames.empty()) std::this_thread::sleep_for(1ms);
  }
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].type, 42);
  EXPECT_EQ(frames[0].payload, "inventory");
}

TEST(WireHandshake, BlockingWrongSecretFailsBothEnds) {
  auto sp = stream_socketpair();
  ASSERT_TRUE(sp.is_ok());
  Fd a((*sp)[0]), b((*sp)[1]);
  Status child_status;
  std::thread child(
      [&] { child_status = handshake_blocking(b.get(), Role::kChild, make_secret(1), 5s); });
  Status parent_status = handshake_blocking(a.get(), Role::kParent, make_secret(2), 5s);
  child.join();
  EXPECT_EQ(parent_status.code(), Code::kInvalidArgument) << parent_status.message();
  EXPECT_EQ(child_status.code(), Code::kInvalidArgument) << child_status.message();
}

TEST(WireHandshake, StalledPeerHitsTheTimeout) {
  auto sp = stream_socketpair();
  ASSERT_TRUE(sp.is_ok());
  Fd a((*sp)[0]), b((*sp)[1]);
  // The peer sends half a hello and then nothing.
  ASSERT_EQ(::send(b.get(), "ACCRUN1", 7, MSG_NOSIGNAL), 7);
  const auto t0 = std::chrono::steady_clock::now();
  Status s = handshake_blocking(a.get(), Role::kParent, make_secret(1), 200ms);
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(s.code(), Code::kTimeout) << s.message();
  EXPECT_GE(took, 190ms);
  EXPECT_LT(took, 3s);
}

TEST(WireHandshake, PeerClosingIsARemoteError) {
  auto sp = stream_socketpair();
  ASSERT_TRUE(sp.is_ok());
  Fd a((*sp)[0]);
  ::close((*sp)[1]);
  Status s = handshake_blocking(a.get(), Role::kChild, make_secret(1), 2s);
  EXPECT_FALSE(s.is_ok());
  EXPECT_TRUE(s.code() == Code::kRemote || s.code() == Code::kSystem) << s.message();
}

// --- connections ---

// Pumps a <-> b until `want` frames arrived at b or the deadline passes.
std::vector<Frame> pump(Connection& a, Connection& b, size_t want) {
  std::vector<Frame> got;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (got.size() < want && std::chrono::steady_clock::now() < deadline) {
    auto pending = a.flush();
    EXPECT_TRUE(pending.is_ok()) << pending.status().message();
    if (!pending.is_ok()) break;
    auto frames = b.read_some();
    EXPECT_TRUE(frames.is_ok()) << frames.status().message();
    if (!frames.is_ok()) break;
    for (auto& f : *frames) got.push_back(std::move(f));
  }
  return got;
}

TEST(WireConnection, SendFlushReadOverSocketpair) {
  auto sp = stream_socketpair();
  ASSERT_TRUE(sp.is_ok());
  Connection a((*sp)[0]), b((*sp)[1]);
  std::string big(8u << 20, '\0');
  for (size_t i = 0; i < big.size(); i += 4096) big[i] = static_cast<char>(i >> 12);
  ASSERT_TRUE(a.send(1, "small").is_ok());
  ASSERT_TRUE(a.send(2, big).is_ok());
  ASSERT_TRUE(a.send(3, "").is_ok());
  EXPECT_EQ(a.pending_bytes(), 3 * kFrameHeaderSize + 5 + big.size());
  auto got = pump(a, b, 3);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].payload, "small");
  EXPECT_EQ(got[1].type, 2);
  EXPECT_TRUE(got[1].payload == big);
  EXPECT_EQ(got[2].type, 3);
  EXPECT_EQ(a.pending_bytes(), 0u);
  auto more = a.flush();
  ASSERT_TRUE(more.is_ok());
  EXPECT_FALSE(*more);
}

TEST(WireConnection, FlushReportsPendingWhenPeerIsNotReading) {
  auto sp = stream_socketpair();
  ASSERT_TRUE(sp.is_ok());
  Connection a((*sp)[0]), b((*sp)[1]);
  ASSERT_TRUE(a.send(1, std::string(16u << 20, 'x')).is_ok());
  auto pending = a.flush();  // must not block although nobody reads
  ASSERT_TRUE(pending.is_ok());
  EXPECT_TRUE(*pending);
  EXPECT_GT(a.pending_bytes(), 0u);
}

TEST(WireConnection, QueueCapAppliesBackpressure) {
  auto sp = stream_socketpair();
  ASSERT_TRUE(sp.is_ok());
  Connection a((*sp)[0], /*max_pending=*/100), b((*sp)[1]);
  ASSERT_TRUE(a.send(1, std::string(50, 'a')).is_ok());
  Status full = a.send(1, std::string(50, 'b'));
  EXPECT_EQ(full.code(), Code::kNoMemory) << full.message();
  EXPECT_EQ(a.pending_bytes(), 58u);  // the refused frame left nothing behind
  auto got = pump(a, b, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(a.send(1, std::string(50, 'b')).is_ok());
}

TEST(WireConnection, OversizePayloadRefused) {
  auto sp = stream_socketpair();
  ASSERT_TRUE(sp.is_ok());
  Connection a((*sp)[0]), b((*sp)[1]);
  Status s = a.send(1, std::string(kMaxFrame + 1, 'z'));
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(a.pending_bytes(), 0u);
}

TEST(WireConnection, EofReportedAfterTheLastFrames) {
  auto sp = stream_socketpair();
  ASSERT_TRUE(sp.is_ok());
  Connection b((*sp)[1]);
  {
    Connection a((*sp)[0]);
    ASSERT_TRUE(a.send(9, "last words").is_ok());
    auto p = a.flush();
    ASSERT_TRUE(p.is_ok() && !*p);
  }  // closes
  auto frames = b.read_some();
  ASSERT_TRUE(frames.is_ok()) << frames.status().message();
  ASSERT_EQ(frames->size(), 1u);
  EXPECT_EQ((*frames)[0].payload, "last words");
  auto end = b.read_some();
  ASSERT_FALSE(end.is_ok());
  EXPECT_EQ(end.status().code(), Code::kRemote);
  EXPECT_TRUE(b.eof());
}

TEST(WireConnection, EofInTheMiddleOfAFrame) {
  auto sp = stream_socketpair();
  ASSERT_TRUE(sp.is_ok());
  Connection b((*sp)[1]);
  const std::string f = encode_frame(1, "cut short");
  ASSERT_EQ(::send((*sp)[0], f.data(), 10, MSG_NOSIGNAL), 10);
  ::close((*sp)[0]);
  auto r = b.read_some();
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::kRemote);
  EXPECT_NE(r.status().message().find("middle of a frame"), std::string::npos)
      << r.status().message();
}

TEST(WireConnection, ProtocolErrorFromPeer) {
  auto sp = stream_socketpair();
  ASSERT_TRUE(sp.is_ok());
  Fd a((*sp)[0]);
  Connection b((*sp)[1]);
  const std::string bad("\xff\xff\xff\xff\1\0\0\0", 8);
  ASSERT_EQ(::send(a.get(), bad.data(), bad.size(), MSG_NOSIGNAL), 8);
  auto r = b.read_some();
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_FALSE(b.read_some().is_ok());  // sticky
}

TEST(WireConnection, FeedBufferedDecodesHandshakeLeftover) {
  auto sp = stream_socketpair();
  ASSERT_TRUE(sp.is_ok());
  Connection b((*sp)[1]);
  Fd a((*sp)[0]);
  const std::string f = encode_frame(4, "early") + encode_frame(5, "late");
  // The first frame and half the second came with the handshake's last read.
  auto early = b.feed_buffered(std::string_view(f).substr(0, f.size() - 2));
  ASSERT_TRUE(early.is_ok());
  ASSERT_EQ(early->size(), 1u);
  ASSERT_EQ(::send(a.get(), f.data() + f.size() - 2, 2, MSG_NOSIGNAL), 2);
  auto rest = b.read_some();
  ASSERT_TRUE(rest.is_ok());
  ASSERT_EQ(rest->size(), 1u);
  EXPECT_EQ((*rest)[0].payload, "late");
}

TEST(WireConnection, MoveTransfersOwnership) {
  auto sp = stream_socketpair();
  ASSERT_TRUE(sp.is_ok());
  Connection a((*sp)[0]);
  Connection b((*sp)[1]);
  const int fd = a.fd();
  ASSERT_TRUE(a.send(1, "queued").is_ok());
  Connection moved(std::move(a));
  EXPECT_EQ(moved.fd(), fd);
  EXPECT_FALSE(a.is_open());  // NOLINT(bugprone-use-after-move): checking the moved-from state
  EXPECT_EQ(a.send(1, "x").code(), Code::kInvalidUsage);  // NOLINT(bugprone-use-after-move)
  Connection assigned;
  assigned = std::move(moved);
  EXPECT_EQ(assigned.pending_bytes(), kFrameHeaderSize + 6);
  auto got = pump(assigned, b, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].payload, "queued");
}

// --- TCP helpers ---

TEST(WireTcp, LoopbackListenConnectHandshakeAndFrames) {
  auto lfd = listen_tcp("127.0.0.1", 0);
  ASSERT_TRUE(lfd.is_ok()) << lfd.status().message();
  Fd listener(*lfd);
  auto port = local_port(listener.get());
  ASSERT_TRUE(port.is_ok());
  ASSERT_NE(*port, 0);
  const Secret secret = make_secret(8);

  Status child_status;
  std::thread child([&] {
    auto fd = connect_tcp("127.0.0.1", *port, 5s);
    if (!fd.is_ok()) {
      child_status = fd.status();
      return;
    }
    Connection conn(*fd);
    child_status = handshake_blocking(conn.fd(), Role::kChild, secret, 5s);
    if (!child_status.is_ok()) return;
    child_status = conn.send(100, "hello from the agent");
    while (child_status.is_ok()) {
      auto p = conn.flush();
      if (!p.is_ok()) child_status = p.status();
      if (!p.is_ok() || !*p) break;
    }
    // Wait for the parent's reply, then close.
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (child_status.is_ok() && std::chrono::steady_clock::now() < deadline) {
      auto frames = conn.read_some();
      if (!frames.is_ok()) {
        child_status = frames.status();
        break;
      }
      if (!frames->empty()) break;
      std::this_thread::sleep_for(1ms);
    }
  });

  // The parent side, as an event loop would drive it (non-blocking).
  int accepted = -1;
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (accepted < 0 && std::chrono::steady_clock::now() < deadline) {
    auto a = accept_tcp(listener.get());
    ASSERT_TRUE(a.is_ok()) << a.status().message();
    accepted = *a;
    if (accepted < 0) std::this_thread::sleep_for(1ms);
  }
  ASSERT_GE(accepted, 0);
  Connection conn(accepted);
  Handshake hs(Role::kParent, secret);
  std::string out = hs.start();
  std::vector<Frame> frames;
  bool done = false;
  char buf[256];
  while (!done && std::chrono::steady_clock::now() < deadline) {
    if (!out.empty()) {
      const ssize_t w = ::send(conn.fd(), out.data(), out.size(), MSG_NOSIGNAL);
      if (w > 0) out.erase(0, static_cast<size_t>(w));
    }
    const ssize_t r = ::recv(conn.fd(), buf, sizeof buf, MSG_DONTWAIT);
    if (r <= 0) {
      std::this_thread::sleep_for(1ms);
      continue;
    }
    auto step = hs.feed(buf, static_cast<size_t>(r));
    ASSERT_TRUE(step.is_ok()) << step.status().message();
    out += step->send;
    if (step->done) {
      done = true;
      auto early = conn.feed_buffered(step->leftover);
      ASSERT_TRUE(early.is_ok());
      frames = std::move(*early);
    }
  }
  ASSERT_TRUE(done);
  while (!out.empty()) {
    const ssize_t w = ::send(conn.fd(), out.data(), out.size(), MSG_NOSIGNAL);
    ASSERT_GT(w, 0);
    out.erase(0, static_cast<size_t>(w));
  }
  while (frames.empty() && std::chrono::steady_clock::now() < deadline) {
    auto got = conn.read_some();
    ASSERT_TRUE(got.is_ok()) << got.status().message();
    frames = std::move(*got);
    if (frames.empty()) std::this_thread::sleep_for(1ms);
  }
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].type, 100);
  EXPECT_EQ(frames[0].payload, "hello from the agent");
  ASSERT_TRUE(conn.send(101, "welcome").is_ok());
  auto p = conn.flush();
  ASSERT_TRUE(p.is_ok());
  child.join();
  EXPECT_TRUE(child_status.is_ok()) << child_status.message();
}

TEST(WireTcp, ListenBindsExactlyTheAddressGiven) {
  auto lfd = listen_tcp("127.0.0.1", 0);
  ASSERT_TRUE(lfd.is_ok());
  Fd listener(*lfd);
  sockaddr_in sin{};
  socklen_t len = sizeof sin;
  ASSERT_EQ(::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&sin), &len), 0);
  EXPECT_EQ(sin.sin_family, AF_INET);
  EXPECT_EQ(ntohl(sin.sin_addr.s_addr), INADDR_LOOPBACK);
}

TEST(WireTcp, ListenRejectsMissingOrBadAddress) {
  auto empty = listen_tcp("", 0);
  ASSERT_FALSE(empty.is_ok());
  EXPECT_EQ(empty.status().code(), Code::kInvalidArgument);
  auto bad = listen_tcp("not an address!", 0);
  EXPECT_FALSE(bad.is_ok());
  // An address this host does not have.
  auto foreign = listen_tcp("192.0.2.1", 0);  // TEST-NET-1
  ASSERT_FALSE(foreign.is_ok());
  EXPECT_EQ(foreign.status().code(), Code::kSystem);
  EXPECT_NE(foreign.status().message().find("192.0.2.1"), std::string::npos);
}

TEST(WireTcp, ConnectRefusedIsASystemError) {
  uint16_t port = 0;
  {
    auto lfd = listen_tcp("127.0.0.1", 0);
    ASSERT_TRUE(lfd.is_ok());
    Fd listener(*lfd);
    port = *local_port(listener.get());
  }  // closed: nothing listens on `port` now
  auto fd = connect_tcp("127.0.0.1", port, 2s);
  ASSERT_FALSE(fd.is_ok());
  EXPECT_EQ(fd.status().code(), Code::kSystem);
  EXPECT_NE(fd.status().message().find("127.0.0.1:" + std::to_string(port)), std::string::npos)
      << fd.status().message();
}

TEST(WireTcp, AcceptWithNothingPendingReturnsMinusOne) {
  auto lfd = listen_tcp("127.0.0.1", 0);
  ASSERT_TRUE(lfd.is_ok());
  Fd listener(*lfd);
  auto a = accept_tcp(listener.get());
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(*a, -1);
}

TEST(WireTcp, LocalAddressesPutLoopbackLast) {
  const auto addrs = local_addresses();
  bool seen_loopback = false;
  for (const auto& a : addrs) {
    const bool loop = a.rfind("127.", 0) == 0;
    if (seen_loopback) {
      EXPECT_TRUE(loop) << "non-loopback " << a << " after loopback";
    }
    seen_loopback = seen_loopback || loop;
    EXPECT_EQ(a.find(':'), std::string::npos) << a;  // IPv4 only
  }
  if (addrs.empty()) GTEST_SKIP() << "this host reports no IPv4 address (no network namespace?)";
}

// --- fuzz ---

// Reads a payload with a fixed schema covering every Reader call; returns
// the first error or ok.  Must never crash on any input.
Status read_schema(std::string_view payload, uint16_t type) {
  Reader r(payload);
  switch (type % 4) {
    case 0: {
      if (auto v = r.u32("a"); !v) return v.status();
      if (auto v = r.str("b"); !v) return v.status();
      if (auto v = r.string_map("c"); !v) return v.status();
      break;
    }
    case 1: {
      if (auto v = r.string_vector("d"); !v) return v.status();
      if (auto v = r.f64("e"); !v) return v.status();
      if (auto v = r.boolean("f"); !v) return v.status();
      break;
    }
    case 2: {
      if (auto v = r.u8("g"); !v) return v.status();
      if (auto v = r.u16("h"); !v) return v.status();
      if (auto v = r.i32("i"); !v) return v.status();
      if (auto v = r.i64("j"); !v) return v.status();
      if (auto v = r.u64("k"); !v) return v.status();
      if (auto v = r.bytes_view("l"); !v) return v.status();
      break;
    }
    default: {
      if (auto v = r.bytes("m"); !v) return v.status();
      break;
    }
  }
  return r.expect_end("payload");
}

std::string mutate(std::string s, std::mt19937& rng) {
  const int n = 1 + static_cast<int>(rng() % 4);
  for (int i = 0; i < n; ++i) {
    switch (rng() % 6) {
      case 0:  // flip a bit
        if (!s.empty()) s[rng() % s.size()] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1:  // set a byte to an interesting value
        if (!s.empty()) {
          const char vals[] = {0, 1, 0x7f, static_cast<char>(0x80), static_cast<char>(0xff)};
          s[rng() % s.size()] = vals[rng() % 5];
        }
        break;
      case 2:  // truncate
        if (!s.empty()) s.resize(rng() % s.size());
        break;
      case 3:  // insert random bytes
        s.insert(s.begin() + static_cast<std::ptrdiff_t>(s.empty() ? 0 : rng() % s.size()),
                 1 + rng() % 8, static_cast<char>(rng()));
        break;
      case 4:  // duplicate a slice
        if (!s.empty()) {
          const size_t at = rng() % s.size();
          s += s.substr(at, rng() % 32);
        }
        break;
      default:  // erase a byte
        if (!s.empty()) s.erase(rng() % s.size(), 1);
        break;
    }
  }
  return s;
}

TEST(WireFuzz, MutatedFramesPayloadsAndTranscriptsNeverCrash) {
  std::mt19937 rng(20240611);
  const Secret secret = make_secret(9);

  // Valid seeds: frames carrying codec payloads of each schema.
  std::vector<std::string> seeds;
  {
    Writer w0;
    w0.u32(7);
    w0.str("host-a");
    w0.string_map({{"PATH", "/bin"}, {"X", "y"}});
    Writer w1;
    w1.string_vector({"a.out", "--flag"});
    w1.f64(0.5);
    w1.boolean(true);
    Writer w2;
    w2.u8(1);
    w2.u16(2);
    w2.i32(-3);
    w2.i64(-4);
    w2.u64(5);
    w2.bytes("blob", 4);
    Writer w3;
    w3.bytes("\0\1\2", 3);
    seeds.push_back(encode_frame(0, w0.data()) + encode_frame(1, w1.data()));
    seeds.push_back(encode_frame(2, w2.data()) + encode_frame(3, w3.data()));
  }

  const auto stop = std::chrono::steady_clock::now() + 2s;
  size_t iterations = 0, frames_ok = 0, hs_done = 0;
  while (std::chrono::steady_clock::now() < stop) {
    ++iterations;
    // Frames and payloads.
    const std::string input = mutate(seeds[rng() % seeds.size()], rng);
    FrameDecoder d;
    std::vector<Frame> frames;
    Status st;
    for (size_t off = 0; off < input.size() && st.is_ok();) {
      const size_t n = std::min<size_t>(input.size() - off, 1 + rng() % 16);
      st = d.feed(input.data() + off, n, frames);
      off += n;
    }
    if (!st.is_ok()) {
      ASSERT_EQ(st.code(), Code::kInvalidArgument) << st.message();
    }
    for (const Frame& f : frames) {
      ASSERT_LE(f.payload.size(), kMaxFrame);
      Status ps = read_schema(f.payload, f.type);
      if (ps.is_ok()) {
        ++frames_ok;
      } else {
        ASSERT_EQ(ps.code(), Code::kInvalidArgument) << ps.message();
      }
    }
    // The raw mutated bytes as a payload, too.
    Status raw = read_schema(input, static_cast<uint16_t>(rng()));
    if (!raw.is_ok()) {
      ASSERT_EQ(raw.code(), Code::kInvalidArgument);
    }

    // Handshake transcripts: a parent fed a mutated child transcript.
    Handshake parent(Role::kParent, secret);
    const std::string good = child_transcript(parent, secret);
    const std::string bad = mutate(good, rng);
    bool done = false;
    for (size_t off = 0; off < bad.size();) {
      const size_t n = std::min<size_t>(bad.size() - off, 1 + rng() % 50);
      auto step = parent.feed(bad.data() + off, n);
      off += n;
      if (!step.is_ok()) {
        const Code c = step.status().code();
        ASSERT_TRUE(c == Code::kInvalidArgument || c == Code::kInvalidUsage)
            << step.status().message();
        break;
      }
      if (step->done) {
        done = true;
        // Success is only possible when the 73 handshake bytes were intact.
        ASSERT_EQ(bad.compare(0, good.size(), good), 0) << "a mutated transcript authenticated";
        ++hs_done;
        break;
      }
    }
    if (!done) {
      EXPECT_FALSE(parent.done());
    }
  }
  EXPECT_GT(iterations, 100u);
  RecordProperty("iterations", static_cast<int>(iterations));
  RecordProperty("frames_ok", static_cast<int>(frames_ok));
  RecordProperty("handshakes_done", static_cast<int>(hs_done));
}

}  // namespace
}  // namespace accrun::wire
