// accrun/status.hpp — error values shared by every accrun module.
//
// Failures that can happen (bad input, a missing device, a dead peer, a
// timeout, a failed syscall) are values, never exceptions: a Status carries a
// code and a message with context, and Result<T> carries either a T or a
// Status.  Codes are the C API's status codes (docs/design.md §9), so a Status
// crosses into accrun.h as its integer value.
#pragma once

#include <cassert>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <variant>

namespace accrun {

enum class Code : int {
  kOk = 0,
  kInvalidArgument = 1,
  kInvalidUsage = 2,
  kNotSupported = 3,
  kNotFound = 4,
  kSystem = 5,
  kRemote = 6,
  kTimeout = 7,
  kNoMemory = 8,
};

// Short, stable name of a code ("invalid argument", "timeout", ...).
const char* code_name(Code code) noexcept;

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }

  bool is_ok() const noexcept { return code_ == Code::kOk; }
  explicit operator bool() const noexcept { return is_ok(); }
  Code code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }

  // Returns a copy whose message is "<context>: <message>".
  Status with_context(const std::string& context) const {
    if (is_ok()) return *this;
    return Status(code_, context + ": " + message_);
  }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
inline Status invalid_usage(std::string m) { return {Code::kInvalidUsage, std::move(m)}; }
inline Status not_supported(std::string m) { return {Code::kNotSupported, std::move(m)}; }
inline Status not_found(std::string m) { return {Code::kNotFound, std::move(m)}; }
inline Status remote_error(std::string m) { return {Code::kRemote, std::move(m)}; }
inline Status timeout_error(std::string m) { return {Code::kTimeout, std::move(m)}; }
inline Status no_memory(std::string m) { return {Code::kNoMemory, std::move(m)}; }
// A failed syscall: "<what>: <strerror(err)>".
inline Status system_error(const std::string& what, int err = errno) {
  return {Code::kSystem, what + ": " + std::strerror(err)};
}

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}                      // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {                // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).is_ok() && "Result built from an ok Status");
  }

  bool is_ok() const noexcept { return std::holds_alternative<T>(v_); }
  explicit operator bool() const noexcept { return is_ok(); }

  const Status& status() const {
    static const Status kOk;
    return is_ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { assert(is_ok()); return std::get<T>(v_); }
  const T& value() const& { assert(is_ok()); return std::get<T>(v_); }
  T&& value() && { assert(is_ok()); return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

inline const char* code_name(Code code) noexcept {
  switch (code) {
    case Code::kOk: return "success";
    case Code::kInvalidArgument: return "invalid argument";
    case Code::kInvalidUsage: return "invalid usage";
    case Code::kNotSupported: return "not supported";
    case Code::kNotFound: return "not found";
    case Code::kSystem: return "system error";
    case Code::kRemote: return "remote error";
    case Code::kTimeout: return "timeout";
    case Code::kNoMemory: return "no memory";
  }
  return "unknown";
}

}  // namespace accrun

// Propagates a failed Status from an expression returning Status.
#define ACCRUN_RETURN_IF_ERROR(expr)        \
  do {                                      \
    ::accrun::Status accrun_status_ = (expr); \
    if (!accrun_status_.is_ok()) return accrun_status_; \
  } while (0)
