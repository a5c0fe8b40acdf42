// LineAssembler (launcher/src/iof.hpp): ranks' output goes out in whole
// pieces — a complete line, or 1 MiB of a longer one — each written by one
// call that holds no other rank's bytes (accrun(1) OUTPUT).
#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <vector>

#include "iof.hpp"

namespace {

using accrun::launcher::LineAssembler;
constexpr size_t kPiece = LineAssembler::kMaxPiece;

// Every call of the shared writer, with which assembler made it.
struct Recorder {
  struct Write {
    int who;
    std::string bytes;
  };
  std::vector<Write> writes;
  LineAssembler::Writer writer(int who) {
    return [this, who](const char* d, size_t n) {
      writes.push_back({who, std::string(d, n)});
      return true;
    };
  }
  std::string all() const {
    std::string s;
    for (const auto& w : writes) s += w.bytes;
    return s;
  }
};

// Feeds `s` in 64 KiB reads, as the event loop does.
void feed_chunked(LineAssembler& a, const std::string& s, size_t chunk = 65536) {
  for (size_t off = 0; off < s.size(); off += chunk) a.feed(s.data() + off, std::min(chunk, s.size() - off));
}

TEST(LineAssembler, SplitsLongUntaggedLinesAtExactlyOneMiB) {
  Recorder rec;
  LineAssembler a("", rec.writer(0));
  std::string line(2 * kPiece + kPiece / 2, 'a');
  feed_chunked(a, line + "\n");
  ASSERT_EQ(rec.writes.size(), 3u);
  EXPECT_EQ(rec.writes[0].bytes.size(), kPiece);
  EXPECT_EQ(rec.writes[1].bytes.size(), kPiece);
  EXPECT_EQ(rec.writes[2].bytes, std::string(kPiece / 2, 'a') + "\n");
  EXPECT_EQ(rec.all(), line + "\n");
  EXPECT_EQ(a.pending(), 0u);
}

TEST(LineAssembler, LineOfExactlyOneMiBStaysWhole) {
  Recorder rec;
  LineAssembler a("", rec.writer(0));
  feed_chunked(a, std::string(kPiece, 'a') + "\n" + std::string(kPiece + 1, 'b') + "\n");
  ASSERT_EQ(rec.writes.size(), 3u);
  EXPECT_EQ(rec.writes[0].bytes, std::string(kPiece, 'a') + "\n");
  EXPECT_EQ(rec.writes[1].bytes, std::string(kPiece, 'b'));
  EXPECT_EQ(rec.writes[2].bytes, "b\n");
}

TEST(LineAssembler, LineOfTwoMiBEndsWithAFullPiece) {
  Recorder rec;
  LineAssembler a("", rec.writer(0));
  feed_chunked(a, std::string(2 * kPiece, 'a') + "\nnext\n", 100000);
  ASSERT_GE(rec.writes.size(), 2u);
  EXPECT_EQ(rec.writes[0].bytes, std::string(kPiece, 'a'));
  EXPECT_EQ(rec.writes[1].bytes.substr(0, kPiece + 1), std::string(kPiece, 'a') + "\n");
  EXPECT_EQ(rec.all(), std::string(2 * kPiece, 'a') + "\nnext\n");
}

TEST(LineAssembler, TaggedPiecesCarryTheTagAndANewline) {
  Recorder rec;
  LineAssembler a("[3] ", rec.writer(3));
  feed_chunked(a, "short\n" + std::string(kPiece + 10, 'x') + "\nafter");
  a.finish();
  ASSERT_EQ(rec.writes.size(), 4u);
  EXPECT_EQ(rec.writes[0].bytes, "[3] short\n");  // earlier lines go out before a long line's piece
  EXPECT_EQ(rec.writes[1].bytes, "[3] " + std::string(kPiece, 'x') + "\n");
  EXPECT_EQ(rec.writes[2].bytes, "[3] " + std::string(10, 'x') + "\n");
  EXPECT_EQ(rec.writes[3].bytes, "[3] after\n");  // the last line, newline added
}

TEST(LineAssembler, TwoRanksNeverShareAWriteOrSplitAPiece) {
  Recorder rec;
  LineAssembler a("", rec.writer(0)), b("", rec.writer(1));
  // Rank 0 writes one 3.3 MiB line while rank 1 writes short lines between
  // its reads, as a flood from two ranks would arrive.
  std::string longline(3 * kPiece + kPiece / 3, 'a');
  longline += '\n';
  for (size_t off = 0, i = 0; off < longline.size(); off += 65536, ++i) {
    a.feed(longline.data() + off, std::min<size_t>(65536, longline.size() - off));
    std::string bl = "b" + std::to_string(i) + "\n";
    b.feed(bl.data(), bl.size());
  }
  std::string from_a;
  std::vector<size_t> sizes;
  for (const auto& w : rec.writes) {
    char mine = w.who == 0 ? 'a' : 'b';
    if (w.who == 0) {
      EXPECT_EQ(w.bytes.find_first_not_of("a\n"), std::string::npos);
      from_a += w.bytes;
      sizes.push_back(w.bytes.size());
    } else {
      EXPECT_EQ(w.bytes[0], mine);
      EXPECT_EQ(w.bytes.find('a'), std::string::npos);
    }
  }
  EXPECT_EQ(from_a, longline);
  EXPECT_EQ(sizes, (std::vector<size_t>{kPiece, kPiece, kPiece, kPiece / 3 + 1}));
}

TEST(LineAssembler, PendingNeverExceedsOnePiece) {
  Recorder rec;
  LineAssembler a("", rec.writer(0));
  std::string chunk(65536, 'z');
  for (int i = 0; i < 100; ++i) {
    a.feed(chunk.data(), chunk.size());
    EXPECT_LE(a.pending(), kPiece);
  }
  for (const auto& w : rec.writes) EXPECT_EQ(w.bytes.size(), kPiece);
}

TEST(LineAssembler, AFailedWriteIsReportedAndStopsOutput) {
  int calls = 0;
  LineAssembler a("", [&calls](const char*, size_t) {
    ++calls;
    errno = ENOSPC;
    return false;
  });
  a.feed("one\n", 4);
  EXPECT_TRUE(a.broken());
  EXPECT_EQ(a.error(), ENOSPC);
  a.feed("two\n", 4);
  a.finish();
  EXPECT_EQ(calls, 1);
}

}  // namespace
