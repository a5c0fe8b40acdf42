// directory.hpp — the job's name directory as the runtime sees it: immutable
// string values under string keys, published once, looked up with a wait.
// Under accrun it is the launcher's PMIx publish/lookup (pmix_client.cpp); a
// lone process and the unit tests use MemoryDirectory.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>
#include <algorithm>

#include "accrun/status.hpp"

namespace accrun::runtime {

// What a wait that cancel_waits() ended returns.
inline Status waits_cancelled() { return invalid_usage("accrun_finalize was called while this call waited"); }

class Directory {
 public:
  virtual ~Directory() = default;
  // Publishes key=value.  A key that exists already is kInvalidUsage (an
  // atomic create-if-absent: of several racing publishers exactly one wins).
  // Thread-safe.
  virtual Status publish(const std::string& key, const std::string& value) = 0;
  // Looks the key up.  timeout_ms == 0: no wait, kNotFound when absent;
  // > 0: waits up to that long, then kTimeout; < 0: waits forever.
  // Blocks the calling thread only.  Thread-safe.
  virtual Result<std::string> lookup(const std::string& key, int timeout_ms) = 0;
  // Removes a key; kNotFound when absent.  Thread-safe.
  virtual Status unpublish(const std::string& key) = 0;
  // Ends the waits in progress and those to come with kInvalidUsage
  // (accrun_finalize: a call that waits for a key must not hold it up for
  // ever).  Thread-safe.
  virtual void cancel_waits() = 0;
  // Looks up every key at once: their values in the keys' order once all are
  // published.  timeout_ms as for lookup; when some are still missing,
  // kNotFound (timeout_ms == 0) or kTimeout, and no values.  The default asks
  // for each key in turn; the PMIx directory asks the server once, which
  // holds the request until the last key is published (a group's
  // rendezvous: one request per member instead of one per pair).
  virtual Result<std::vector<std::string>> lookup_all(const std::vector<std::string>& keys, int timeout_ms) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max(timeout_ms, 0));
    std::vector<std::string> out;
    for (const auto& k : keys) {
      int left = timeout_ms;
      if (timeout_ms > 0) {
        left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    end - std::chrono::steady_clock::now()).count());
        if (left <= 0) left = 0;
      }
      auto v = lookup(k, left);
      if (!v) {
        if (v.status().code() == Code::kNotFound && timeout_ms > 0)
          return timeout_error("key '" + k + "' not published within " + std::to_string(timeout_ms) + " ms");
        return v.status();
      }
      out.push_back(std::move(v).value());
    }
    return out;
  }
};

// An in-memory directory: the whole job for a lone process, and the shared
// directory of the in-process tests (several GroupManagers on one instance).
class MemoryDirectory final : public Directory {
 public:
  Status publish(const std::string& key, const std::string& value) override {
    {
      std::lock_guard lock(mu_);
      if (!entries_.emplace(key, value).second) return invalid_usage("key '" + key + "' exists");
    }
    cv_.notify_all();
    return Status::ok();
  }
  Result<std::string> lookup(const std::string& key, int timeout_ms) override {
    std::unique_lock lock(mu_);
    auto found = [&] { return entries_.count(key) != 0 || (cancelled_ && timeout_ms != 0); };
    if (timeout_ms < 0) {
      cv_.wait(lock, found);
    } else if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), found)) {
      if (timeout_ms == 0) return not_found("key '" + key + "' is not published");
      return timeout_error("key '" + key + "' not published within " + std::to_string(timeout_ms) +
                           " ms");
    }
    if (entries_.count(key) == 0) return waits_cancelled();
    return entries_.at(key);
  }
  void cancel_waits() override {
    {
      std::lock_guard lock(mu_);
      cancelled_ = true;
    }
    cv_.notify_all();
  }
  Status unpublish(const std::string& key) override {
    std::lock_guard lock(mu_);
    if (entries_.erase(key) == 0) return not_found("key '" + key + "' is not published");
    return Status::ok();
  }
  std::size_t size() const {
    std::lock_guard lock(mu_);
    return entries_.size();
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> entries_;
  bool cancelled_ = false;
};

// Escapes a user-chosen name for use as one path component of a directory
// key: '/' and '%' become %2F and %25, so no two names share a key.  A name
// whose escaped form passes kMaxEscapedName bytes (a 256-byte name of '/'
// would be 768, past PMIx's 511-byte keys) becomes "%H" and 32 hex digits
// of two 64-bit FNV-1a hashes of it, a form escaping never makes.
constexpr std::size_t kMaxEscapedName = 400;
std::string escape_key_component(const std::string& s);

}  // namespace accrun::runtime
