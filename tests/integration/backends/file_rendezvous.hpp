// A Rendezvous over a directory that every rank of a test job can see: the
// stand-in for the runtime's PMIx group directory when a test drives a
// backend directly (launched by mpirun or accrun, without libaccrun groups).
// publish() writes a file atomically (write, then link); lookup() waits for
// it, checking every millisecond, up to the timeout.  Test code only.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "accrun/backend.hpp"

namespace accrun::testing {

class FileRendezvous final : public collectives::Rendezvous {
 public:
  FileRendezvous(std::string dir, const std::string& group, std::uint64_t epoch)
      : prefix_(std::move(dir) + "/" + group + "." + std::to_string(epoch) + ".") {}

  Status publish(const std::string& key, const std::string& value) override {
    const std::string path = prefix_ + key;
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out << value;
      if (!out) return system_error("write " + tmp);
    }
    if (::link(tmp.c_str(), path.c_str()) != 0) {
      const int err = errno;
      ::unlink(tmp.c_str());
      if (err == EEXIST) return invalid_usage("key '" + key + "' is already published");
      return system_error("link " + path, err);
    }
    ::unlink(tmp.c_str());
    return Status::ok();
  }

  Result<std::string> lookup(const std::string& key, int timeout_ms) override {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms);
    for (;;) {
      std::ifstream in(prefix_ + key, std::ios::binary);
      if (in) {
        std::stringstream ss;
        ss << in.rdbuf();
        return ss.str();
      }
      if (timeout_ms >= 0 && std::chrono::steady_clock::now() >= deadline) {
        return timeout_error("key '" + key + "' not published within " + std::to_string(timeout_ms) + " ms");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

 private:
  std::string prefix_;
};

}  // namespace accrun::testing
