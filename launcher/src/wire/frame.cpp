// wire/frame.cpp — frame encoding and incremental decoding.
#include "wire/frame.hpp"

#include <algorithm>
#include <cassert>

namespace accrun::wire {
namespace {

uint32_t le32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

uint16_t le16(const char* p) {
  return static_cast<uint16_t>(static_cast<unsigned char>(p[0]) |
                               (static_cast<unsigned char>(p[1]) << 8));
}

// Payload bytes reserved up front: a header alone (which costs a peer 8
// bytes) must not make us allocate a 64 MiB buffer.
constexpr size_t kInitialReserve = size_t{1} << 20;

}  // namespace

std::string encode_frame(uint16_t type, std::string_view payload) {
  assert(payload.size() <= kMaxFrame && "encode_frame: payload larger than kMaxFrame");
  std::string out;
  out.reserve(kFrameHeaderSize + payload.size());
  const auto len = static_cast<uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((len >> (8 * i)) & 0xff));
  out.push_back(static_cast<char>(type & 0xff));
  out.push_back(static_cast<char>(type >> 8));
  out.push_back('\0');
  out.push_back('\0');
  out.append(payload.data(), payload.size());
  return out;
}

Status FrameDecoder::fail(Status s) {
  error_ = std::move(s);
  header_len_ = 0;
  in_payload_ = false;
  payload_ = std::string();
  return error_;
}

Status FrameDecoder::feed(const char* data, size_t n, std::vector<Frame>& out) {
  if (!error_.is_ok()) return error_;
  size_t i = 0;
  while (i < n) {
    if (!in_payload_) {
      const size_t take = std::min(kFrameHeaderSize - header_len_, n - i);
      std::copy_n(data + i, take, header_ + header_len_);
      header_len_ += take;
      i += take;
      if (header_len_ < kFrameHeaderSize) break;
      const uint32_t len = le32(header_);
      const uint16_t type = le16(header_ + 4);
      const uint16_t reserved = le16(header_ + 6);
      if (reserved != 0) {
        return fail(invalid_argument("wire: frame header has reserved field " +
                                     std::to_string(reserved) + " (must be 0); type " +
                                     std::to_string(type)));
      }
      if (len > kMaxFrame) {
        return fail(invalid_argument("wire: frame of type " + std::to_string(type) +
                                     " announces " + std::to_string(len) +
                                     " bytes, more than the limit of " +
                                     std::to_string(kMaxFrame)));
      }
      header_len_ = 0;
      type_ = type;
      want_ = len;
      payload_.clear();
      payload_.reserve(std::min(want_, kInitialReserve));
      in_payload_ = true;
    }
    const size_t take = std::min(want_ - payload_.size(), n - i);
    payload_.append(data + i, take);
    i += take;
    if (payload_.size() == want_) {
      out.push_back(Frame{type_, std::move(payload_)});
      payload_ = std::string();
      in_payload_ = false;
    }
  }
  return Status::ok();
}

}  // namespace accrun::wire
