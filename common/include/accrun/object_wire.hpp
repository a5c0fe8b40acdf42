// accrun/object_wire.hpp — how a rank reads or deletes an object that lives
// on another host (accrun(7) THE OBJECT STORE).  Each host's node agent
// serves its job's object files over TCP (launcher/src/agent/object_server);
// libaccrun's object store is the client (runtime/src/object_fetch).
//
// An object file is "obj.<rank>.<pid>.<n>.<32 hex>": the 128 random bits
// make its name a capability, known only from the job's name directory.
//
//   request  "ACOB" op:u8 0:u8 name_len:u16le name
//   reply    code:u8 0:u8[7] len:u64le, then len bytes (kGet and kOk only)
//
// One request per connection; the server closes after its reply.
#pragma once

#include <cstdint>
#include <string_view>

namespace accrun::objects {

inline constexpr std::string_view kMagic = "ACOB";
inline constexpr std::size_t kRequestHeader = 8;  // magic, op, 0, name_len
inline constexpr std::size_t kReplyHeader = 16;   // code, 7 zeros, len
inline constexpr std::size_t kMaxName = 128;
inline constexpr std::size_t kTokenHex = 32;
// The host's "store.accounting" in the job's directory, which libaccrun
// keeps (runtime/src/object_store.hpp) and the agent updates when it
// deletes an object for another host: the bytes in use, a uint64 at offset
// 0, changed only under the host's lock, an open-file-description write
// lock (F_OFD_SETLKW) on the byte at kAccountingLockAt.
inline constexpr std::size_t kAccountingLockAt = 64;
// A uint64 the agent sets to 1 when it deleted without the lock (a rank
// held it past kAccountingLockWait): the next put counts the host's bytes
// again.
inline constexpr std::size_t kAccountingRecountAt = 8;
// The bytes of the file the agent maps: the two words above (the file is
// larger: libaccrun's journal follows, which the agent never touches).
inline constexpr std::size_t kAccountingAgentBytes = kAccountingRecountAt + sizeof(std::uint64_t);
inline constexpr int kAccountingLockWaitMs = 200;
// The environment variable in which a rank's agent says where it serves:
// "address:port[,address:port...]".
inline constexpr const char* kServerEnv = "ACCRUN_OBJECT_SERVER";

enum class Op : std::uint8_t { kGet = 1, kDelete = 2 };
enum class Reply : std::uint8_t { kOk = 0, kNotFound = 1, kBadRequest = 2, kFailed = 3 };

// Whether `name` is an object file's name: "obj.", then digits and dots,
// then 32 lower-case hex digits.  Nothing else is ever served.
inline bool is_object_file(std::string_view name) {
  if (name.size() > kMaxName || name.rfind("obj.", 0) != 0 || name.size() < 4 + 1 + kTokenHex + 1) return false;
  std::string_view token = name.substr(name.size() - kTokenHex);
  std::string_view middle = name.substr(4, name.size() - 4 - kTokenHex);
  for (char c : token)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  if (middle.empty() || middle.back() != '.') return false;
  for (char c : middle)
    if (!((c >= '0' && c <= '9') || c == '.')) return false;
  return true;
}

inline void put_u16(unsigned char* p, std::uint16_t v) {
  p[0] = static_cast<unsigned char>(v);
  p[1] = static_cast<unsigned char>(v >> 8);
}
inline std::uint16_t get_u16(const unsigned char* p) {
  return static_cast<std::uint16_t>(p[0] | (p[1] << 8));
}
inline void put_u64(unsigned char* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline std::uint64_t get_u64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace accrun::objects
