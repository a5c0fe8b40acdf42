// wire/codec.hpp — the byte encoding of the controller <-> agent protocol's payloads.
//
// Every integer is little-endian and fixed-width; f64 is the IEEE-754 bit
// pattern as a u64.  Strings and byte blobs are a u32 length followed by that
// many bytes (no terminator, no encoding check).  A string map is a u32 count
// followed by key, value pairs in key order; a string vector is a u32 count
// followed by the strings.
//
// Writer appends to a buffer it owns.  Reader reads a span it does not own and
// treats its input as untrusted: it never reads past the end, never allocates
// for a length the input cannot hold, and reports every malformed input as a
// Status (Code::kInvalidArgument) naming what it was reading and where —
// never an assertion or an exception.  Neither class is thread-safe; both are
// cheap to create per message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "accrun/status.hpp"

namespace accrun::wire {

// Appends encoded values to an owned byte buffer.  Never fails; a string,
// blob or container longer than UINT32_MAX is a bug (asserts) — payloads are
// bounded far below that by kMaxFrame (frame.hpp) anyway.
class Writer {
 public:
  Writer() = default;

  void u8(uint8_t v);
  void u16(uint16_t v);
  void u32(uint32_t v);
  void u64(uint64_t v);
  void i32(int32_t v);
  void i64(int64_t v);
  void f64(double v);
  void boolean(bool v) { u8(v ? 1 : 0); }
  // u32 length, then the bytes.
  void str(std::string_view s);
  // Same encoding as str(), for opaque binary data.
  void bytes(const void* data, size_t n);
  // u32 count, then key, value (each as str()) in the map's order.
  void string_map(const std::map<std::string, std::string>& m);
  // u32 count, then each string as str().
  void string_vector(const std::vector<std::string>& v);

  // The bytes written so far.
  const std::string& data() const { return buf_; }
  size_t size() const { return buf_.size(); }
  // Moves the buffer out, leaving the writer empty and reusable.
  std::string take() { return std::move(buf_); }

 private:
  void length(size_t n);

  std::string buf_;
};

// Reads encoded values from a span of bytes that must outlive the reader.
// Each read either consumes exactly its value and returns it, or consumes
// nothing and returns an error "wire: <what>: ..." with the offset; `what`
// names the field for the message (e.g. "rank", "env").  After an error
// the reader may be used again (the offset is unchanged), but callers
// normally give up on the message.
class Reader {
 public:
  Reader(const char* data, size_t n) : data_(data), size_(n) {}
  explicit Reader(std::string_view s) : Reader(s.data(), s.size()) {}

  Result<uint8_t> u8(std::string_view what);
  Result<uint16_t> u16(std::string_view what);
  Result<uint32_t> u32(std::string_view what);
  Result<uint64_t> u64(std::string_view what);
  Result<int32_t> i32(std::string_view what);
  Result<int64_t> i64(std::string_view what);
  Result<double> f64(std::string_view what);
  // A u8 that must be 0 or 1.
  Result<bool> boolean(std::string_view what);
  // A length-prefixed string; the length is checked against the remaining
  // input before anything is allocated.
  Result<std::string> str(std::string_view what);
  // Same encoding as str(): a copy of an opaque blob.
  Result<std::string> bytes(std::string_view what);
  // A blob without copying: the view points into the reader's input.
  Result<std::string_view> bytes_view(std::string_view what);
  // A map written by Writer::string_map.  The count is checked against the
  // remaining input (each entry takes at least 8 bytes) before allocation;
  // a repeated key is an error.
  Result<std::map<std::string, std::string>> string_map(std::string_view what);
  // A vector written by Writer::string_vector; the count is checked against
  // the remaining input (at least 4 bytes per string) before allocation.
  Result<std::vector<std::string>> string_vector(std::string_view what);

  // Succeeds when every byte was consumed; trailing bytes are an error
  // ("<what>: N trailing bytes").
  Status expect_end(std::string_view what) const;

  size_t offset() const { return off_; }
  size_t remaining() const { return size_ - off_; }
  bool at_end() const { return off_ == size_; }

 private:
  // An error for a field `what` that needed `need` bytes.
  Status truncated(std::string_view what, std::string_view type, size_t need) const;
  Result<uint64_t> fixed(std::string_view what, std::string_view type, size_t width);
  // A u32 count/length that must fit in the remaining input at `min_each`
  // bytes per element; consumes nothing on error.
  Result<uint32_t> count(std::string_view what, std::string_view type, size_t min_each);

  const char* data_;
  size_t size_;
  size_t off_ = 0;
};

}  // namespace accrun::wire
