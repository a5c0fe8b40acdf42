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

#include "accrun/status.hpp"

namespace accrun::runtime {

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
    auto found = [&] { return entries_.count(key) != 0; };
    if (timeout_ms < 0) {
      cv_.wait(lock, found);
    } else if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), found)) {
      if (timeout_ms == 0) return not_found("key '" + key + "' is not published");
      return timeout_error("key '" + key + "' not published within " + std::to_string(timeout_ms) +
                           " ms");
    }
    return entries_.at(key);
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
};

// Escapes a user-chosen name for use as one path component of a directory
// key: '/' and '%' become %2F and %25, so no two names share a key.
std::string escape_key_component(const std::string& s);

}  // namespace accrun::runtime
