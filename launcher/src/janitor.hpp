// janitor.hpp — job directories and the janitor process that cleans up
// after accrun if accrun dies, even by SIGKILL (DESIGN.md §4, §6).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "accrun/status.hpp"

namespace accrun::launcher {

// Creates `path` with mode 0700; fails if it exists (a job directory is
// never shared or reused).
Status make_private_dir(const std::string& path);
// Removes `path` and everything below it; best effort, never follows links
// out of the tree.
void remove_tree(const std::string& path);

// A watchdog process forked before anything else of the job exists.  It
// reads process-group ids from a pipe; if the pipe reaches end of file
// without a dismissal (accrun died), it SIGKILLs every group it was told
// about and removes `dirs`.  Move-only; the destructor dismisses it.
class Janitor {
 public:
  // Forks the janitor.  Must be called while the process has one thread.
  static Result<Janitor> start(std::vector<std::string> dirs);
  Janitor() = default;
  Janitor(Janitor&& o) noexcept : pid_(o.pid_), fd_(o.fd_) { o.pid_ = -1; o.fd_ = -1; }
  Janitor& operator=(Janitor&& o) noexcept;
  ~Janitor() { dismiss(); }

  pid_t pid() const { return pid_; }
  // Records a rank's process group (async-signal-safe; called right after fork).
  void watch_group(pid_t pgid);
  // The job is cleaned up: the janitor exits without doing anything.  Reaps
  // it unless `reaped` says the caller's waitpid(-1) already did.
  void dismiss(bool reaped = false);

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
};

}  // namespace accrun::launcher
