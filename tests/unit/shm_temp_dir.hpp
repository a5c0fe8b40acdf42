// shm_temp_dir.hpp — a private directory for a test's object files: in
// /dev/shm (tmpfs, as ACCRUN_SHM_DIR is) when it can be made there, else in
// /tmp; removed with everything in it.
#pragma once

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace accrun::testing {

class ShmTempDir {
 public:
  explicit ShmTempDir(const std::string& tag = "store") {
    std::string t = "/dev/shm/accrun-test-" + tag + ".XXXXXX";
    if (::mkdtemp(t.data()) == nullptr) {
      t = "/tmp/accrun-test-" + tag + ".XXXXXX";
      if (::mkdtemp(t.data()) == nullptr) std::abort();
    }
    path_ = t;
  }
  ~ShmTempDir() { std::filesystem::remove_all(path_); }
  ShmTempDir(const ShmTempDir&) = delete;
  ShmTempDir& operator=(const ShmTempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace accrun::testing
