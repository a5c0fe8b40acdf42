// wire/fuzz_frame.cpp — libFuzzer entry point for the FrameDecoder and the Reader.
//
// Not part of any normal target.  A fuzzer build compiles it with
// -fsanitize=fuzzer (which defines FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION by
// convention; ACCRUN_FUZZ=1 also works) together with wire/codec.cpp and
// wire/frame.cpp, e.g.
//
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -DACCRUN_FUZZ=1
//     -Ilauncher/src -Icommon/include launcher/src/wire/{fuzz_frame,codec,frame}.cpp
//
// Input layout: byte 0 picks the chunk size the stream is fed in (1..256),
// the rest is the byte stream.  Every complete frame's payload is then read
// with a schema chosen by its type.  Any crash, sanitizer report, or error
// with a code other than invalid argument is a finding.
#if defined(ACCRUN_FUZZ) || defined(FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION)

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "wire/codec.hpp"
#include "wire/frame.hpp"

namespace {

using accrun::Code;
using accrun::Status;
using accrun::wire::Frame;
using accrun::wire::FrameDecoder;
using accrun::wire::Reader;

void require_clean(const Status& s) {
  // Malformed input must be a clean invalid-argument error, nothing else.
  if (!s.is_ok() && s.code() != Code::kInvalidArgument) std::abort();
}

Status read_payload(std::string_view payload, uint16_t type) {
  Reader r(payload);
  switch (type % 4) {
    case 0:
      if (auto v = r.u32("a"); !v) return v.status();
      if (auto v = r.str("b"); !v) return v.status();
      if (auto v = r.string_map("c"); !v) return v.status();
      break;
    case 1:
      if (auto v = r.string_vector("d"); !v) return v.status();
      if (auto v = r.f64("e"); !v) return v.status();
      if (auto v = r.boolean("f"); !v) return v.status();
      break;
    case 2:
      if (auto v = r.u8("g"); !v) return v.status();
      if (auto v = r.u16("h"); !v) return v.status();
      if (auto v = r.i32("i"); !v) return v.status();
      if (auto v = r.i64("j"); !v) return v.status();
      if (auto v = r.u64("k"); !v) return v.status();
      if (auto v = r.bytes_view("l"); !v) return v.status();
      break;
    default:
      if (auto v = r.bytes("m"); !v) return v.status();
      break;
  }
  return r.expect_end("payload");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t chunk = 1 + data[0];
  const char* bytes = reinterpret_cast<const char*>(data + 1);
  const size_t n = size - 1;

  FrameDecoder decoder;
  std::vector<Frame> frames;
  for (size_t off = 0; off < n;) {
    const size_t take = n - off < chunk ? n - off : chunk;
    Status s = decoder.feed(bytes + off, take, frames);
    off += take;
    require_clean(s);
    if (!s.is_ok()) break;
  }
  for (const Frame& f : frames) {
    if (f.payload.size() > accrun::wire::kMaxFrame) std::abort();
    require_clean(read_payload(f.payload, f.type));
  }
  // The raw input as a payload too: the Reader alone.
  require_clean(read_payload(std::string_view(bytes, n), static_cast<uint16_t>(data[0])));
  return 0;
}

#endif  // ACCRUN_FUZZ || FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
