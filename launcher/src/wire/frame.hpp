// wire/frame.hpp — framing of the controller <-> agent protocol.
//
// After the handshake (auth.hpp) a connection carries frames, each
//
//   u32 payload length | u16 message type | u16 reserved (0) | payload
//
// all little-endian.  The payload is encoded with codec.hpp; what a message
// type means is up to the layer above.  A frame whose header announces more
// than kMaxFrame bytes, or has a non-zero reserved field, is a protocol
// error: the connection is unusable and must be closed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "accrun/status.hpp"

namespace accrun::wire {

// Largest payload of one frame: 64 MiB.  The largest messages are a fence's
// gathered modex blobs and a host's slice of the Plan, which fit with room to
// spare even for large jobs; anything larger is refused by the sender
// (Connection::send) and by the receiver (FrameDecoder), so a corrupt or
// hostile length can never make a peer buffer more than this per connection.
inline constexpr size_t kMaxFrame = size_t{64} << 20;
// Bytes of a frame header.
inline constexpr size_t kFrameHeaderSize = 8;

// One complete frame: its message type and its payload (owned).
struct Frame {
  uint16_t type = 0;
  std::string payload;
};

// Encodes one frame: header followed by `payload`.  Precondition (asserts):
// payload.size() <= kMaxFrame — check the size first where it comes from
// input (Connection::send does).  Never blocks, never fails otherwise.
std::string encode_frame(uint16_t type, std::string_view payload);

// Reassembles frames from a byte stream delivered in arbitrary chunks (as a
// non-blocking socket returns them).  Holds at most one partial frame; a
// payload buffer grows as bytes arrive, never to more than kMaxFrame.  Not
// thread-safe; one decoder per connection.
class FrameDecoder {
 public:
  FrameDecoder() = default;

  // Consumes `n` bytes and appends every frame they complete to `out`, in
  // order.  Errors (Code::kInvalidArgument): a header announcing more than
  // kMaxFrame bytes, or a non-zero reserved field.  An error is sticky: the
  // frames completed before the bad header are still appended to `out`, and
  // every later feed() returns the same error without consuming anything.
  Status feed(const char* data, size_t n, std::vector<Frame>& out);

  // The sticky error, or ok.
  const Status& status() const { return error_; }
  // Bytes held in the current partial frame (header and payload).
  size_t buffered() const { return in_payload_ ? kFrameHeaderSize + payload_.size() : header_len_; }

 private:
  Status fail(Status s);

  char header_[kFrameHeaderSize] = {};
  size_t header_len_ = 0;     // bytes of header_ filled
  bool in_payload_ = false;   // header complete, payload_ being filled
  uint16_t type_ = 0;
  size_t want_ = 0;           // payload bytes announced by the header
  std::string payload_;
  Status error_;
};

}  // namespace accrun::wire
