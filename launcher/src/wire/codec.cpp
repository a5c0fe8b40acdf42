// wire/codec.cpp — little-endian Writer and bounds-checked Reader.
#include "wire/codec.hpp"

#include <bit>
#include <cassert>
#include <cstring>
#include <limits>

namespace accrun::wire {
namespace {

void put_le(std::string& buf, uint64_t v, size_t width) {
  char tmp[8];
  for (size_t i = 0; i < width; ++i) tmp[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  buf.append(tmp, width);
}

std::string field_error(std::string_view what, size_t offset, const std::string& detail) {
  std::string m = "wire: ";
  m.append(what);
  m += " at offset " + std::to_string(offset) + ": " + detail;
  return m;
}

}  // namespace

void Writer::u8(uint8_t v) { buf_.push_back(static_cast<char>(v)); }
void Writer::u16(uint16_t v) { put_le(buf_, v, 2); }
void Writer::u32(uint32_t v) { put_le(buf_, v, 4); }
void Writer::u64(uint64_t v) { put_le(buf_, v, 8); }
void Writer::i32(int32_t v) { put_le(buf_, static_cast<uint32_t>(v), 4); }
void Writer::i64(int64_t v) { put_le(buf_, static_cast<uint64_t>(v), 8); }
void Writer::f64(double v) { put_le(buf_, std::bit_cast<uint64_t>(v), 8); }

void Writer::length(size_t n) {
  assert(n <= std::numeric_limits<uint32_t>::max() && "wire: length does not fit in u32");
  u32(static_cast<uint32_t>(n));
}

void Writer::str(std::string_view s) {
  length(s.size());
  buf_.append(s.data(), s.size());
}

void Writer::bytes(const void* data, size_t n) {
  length(n);
  if (n != 0) buf_.append(static_cast<const char*>(data), n);
}

void Writer::string_map(const std::map<std::string, std::string>& m) {
  length(m.size());
  for (const auto& [k, v] : m) {
    str(k);
    str(v);
  }
}

void Writer::string_vector(const std::vector<std::string>& v) {
  length(v.size());
  for (const auto& s : v) str(s);
}

Status Reader::truncated(std::string_view what, std::string_view type, size_t need) const {
  return invalid_argument(field_error(what, off_,
                                      "truncated " + std::string(type) + " (need " +
                                          std::to_string(need) + " bytes, " +
                                          std::to_string(remaining()) + " left)"));
}

Result<uint64_t> Reader::fixed(std::string_view what, std::string_view type, size_t width) {
  if (remaining() < width) return truncated(what, type, width);
  uint64_t v = 0;
  for (size_t i = 0; i < width; ++i) {
    v |= static_cast<uint64_t>(static_cast<unsigned char>(data_[off_ + i])) << (8 * i);
  }
  off_ += width;
  return v;
}

Result<uint8_t> Reader::u8(std::string_view what) {
  auto v = fixed(what, "u8", 1);
  if (!v) return v.status();
  return static_cast<uint8_t>(*v);
}

Result<uint16_t> Reader::u16(std::string_view what) {
  auto v = fixed(what, "u16", 2);
  if (!v) return v.status();
  return static_cast<uint16_t>(*v);
}

Result<uint32_t> Reader::u32(std::string_view what) {
  auto v = fixed(what, "u32", 4);
  if (!v) return v.status();
  return static_cast<uint32_t>(*v);
}

Result<uint64_t> Reader::u64(std::string_view what) { return fixed(what, "u64", 8); }

Result<int32_t> Reader::i32(std::string_view what) {
  auto v = fixed(what, "i32", 4);
  if (!v) return v.status();
  return static_cast<int32_t>(static_cast<uint32_t>(*v));
}

Result<int64_t> Reader::i64(std::string_view what) {
  auto v = fixed(what, "i64", 8);
  if (!v) return v.status();
  return static_cast<int64_t>(*v);
}

Result<double> Reader::f64(std::string_view what) {
  auto v = fixed(what, "f64", 8);
  if (!v) return v.status();
  return std::bit_cast<double>(*v);
}

Result<bool> Reader::boolean(std::string_view what) {
  if (remaining() < 1) return truncated(what, "bool", 1);
  auto b = static_cast<unsigned char>(data_[off_]);
  if (b > 1) {
    return invalid_argument(
        field_error(what, off_, "bool must be 0 or 1, got " + std::to_string(b)));
  }
  ++off_;
  return b == 1;
}

Result<uint32_t> Reader::count(std::string_view what, std::string_view type, size_t min_each) {
  const size_t start = off_;
  auto n = fixed(what, type, 4);
  if (!n) return n.status();
  // Checked before any allocation: a hostile length cannot make us reserve
  // more than the input we already hold.
  const size_t left = remaining();
  if (min_each != 0 && *n > left / min_each) {
    off_ = start;
    return invalid_argument(field_error(
        what, start,
        std::string(type) + " announces " + std::to_string(*n) +
            (min_each == 1 ? " bytes" : " entries") + " but only " + std::to_string(left) +
            " bytes follow"));
  }
  return static_cast<uint32_t>(*n);
}

Result<std::string_view> Reader::bytes_view(std::string_view what) {
  auto n = count(what, "length prefix", 1);
  if (!n) return n.status();
  std::string_view v(data_ + off_, *n);
  off_ += *n;
  return v;
}

Result<std::string> Reader::str(std::string_view what) {
  auto v = bytes_view(what);
  if (!v) return v.status();
  return std::string(*v);
}

Result<std::string> Reader::bytes(std::string_view what) { return str(what); }

Result<std::map<std::string, std::string>> Reader::string_map(std::string_view what) {
  const size_t start = off_;
  auto n = count(what, "map count", 8);
  if (!n) return n.status();
  std::map<std::string, std::string> m;
  for (uint32_t i = 0; i < *n; ++i) {
    auto k = str(what);
    if (!k) {
      off_ = start;
      return k.status().with_context("key " + std::to_string(i));
    }
    auto v = str(what);
    if (!v) {
      off_ = start;
      return v.status().with_context("value of '" + *k + "'");
    }
    if (m.count(*k) != 0) {
      const size_t at = off_;
      off_ = start;
      return invalid_argument(field_error(what, at, "repeated key '" + *k + "'"));
    }
    m.emplace(std::move(*k), std::move(*v));
  }
  return m;
}

Result<std::vector<std::string>> Reader::string_vector(std::string_view what) {
  const size_t start = off_;
  auto n = count(what, "vector count", 4);
  if (!n) return n.status();
  std::vector<std::string> v;
  v.reserve(*n);
  for (uint32_t i = 0; i < *n; ++i) {
    auto s = str(what);
    if (!s) {
      off_ = start;
      return s.status().with_context("element " + std::to_string(i));
    }
    v.push_back(std::move(*s));
  }
  return v;
}

Status Reader::expect_end(std::string_view what) const {
  if (at_end()) return Status::ok();
  return invalid_argument(
      field_error(what, off_, std::to_string(remaining()) + " trailing bytes"));
}

}  // namespace accrun::wire
