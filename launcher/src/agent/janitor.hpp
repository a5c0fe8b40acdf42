// janitor.hpp — job directories and the janitor process that cleans up
// after accrun if accrun dies, even by SIGKILL (docs/design.md §4, §6).
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

// ---- Liveness of a job directory ----
//
// A job's directories, <tmpdir>/accrun.<uid>.<jobid> and
// <shm_root>/accrun.<uid>.<jobid>, are removed by accrun at the end of the
// job, or by the janitor if accrun dies.  When both die together (a cgroup
// kill, the OOM killer) nobody is left to remove them; the next accrun of the
// same user sweeps them (sweep_stale_job_dirs).  To tell a stale directory
// from a live job's, each holds a file `owner` (the pid of accrun, as text)
// on which an flock(LOCK_EX) is held for the job's whole life:
//
//   1. accrun starts the janitor (Janitor::start), creates the directories,
//      and calls hold_owner_lock(dir) for each; it keeps the descriptors
//      open until after it has removed the directories.
//   2. It hands each descriptor to the janitor (Janitor::hold): the
//      janitor receives a duplicate over its socket (SCM_RIGHTS), which
//      shares the open file description and so the lock, and keeps it
//      until it exits.  The lock is therefore held while accrun or the
//      janitor lives, and released by the kernel when both are gone, however
//      they died.
//
// The lock is taken before the file gets its name `owner` (a temporary name
// is locked, then renamed), so a sweeper never sees an unlocked `owner` of a
// live job.  A directory without `owner` is taken for stale only when it is
// older than kOwnerlessGrace (a job that died between mkdir and the lock).

// How long a job directory without an owner file is given to get one.
inline constexpr int kOwnerlessGraceSeconds = 60;

// Creates `<dir>/owner` holding this process's pid, takes an exclusive flock
// on it and returns its descriptor (O_CLOEXEC), which the caller keeps open
// for the job's life and closes after removing `dir`.  `dir` must be a
// directory of this user's (not a link).  Does not block.  Errors: kSystem
// (with the syscall and errno) when the directory cannot be opened, the file
// exists already or cannot be created, or the lock is held elsewhere;
// nothing is left behind then.
Result<int> hold_owner_lock(const std::string& dir);

// Removes this user's stale job directories directly under `tmpdir` and
// `shm_root`: names accrun.<uid>.<jobid> (jobid: hex digits), owned by this
// effective uid, real directories (not links) writable by nobody else,
// whose `owner` lock nobody holds — or that have no `owner` and were last
// modified more than kOwnerlessGraceSeconds ago.  Anything else (other users'
// directories, links, lone/pmix directories of the runtime, live jobs) is
// left alone.  The checks are made on the opened directory and the removal
// is done relative to its descriptor, so no name swapped meanwhile can
// redirect it.  Best effort: errors are logged at debug level and skipped.
// Blocks only on the file system; safe to call from any thread.
void sweep_stale_job_dirs(const std::string& tmpdir, const std::string& shm_root);

// A watchdog process forked before anything else of the job exists.  It
// reads process-group ids and owner-lock descriptors from a socket; if the
// socket reaches end of file without a dismissal (accrun died), it SIGKILLs
// every group it was told about and removes `dirs`, then exits, which
// releases the owner locks it held.  Move-only; the destructor dismisses it.
class Janitor {
 public:
  // Forks the janitor.  Must be called while the process has one thread.
  // After accrun died it kills the groups it was told of, then every
  // process whose environment holds all of `marks` (the ranks' descendants
  // that left their groups; descendants.hpp), then removes `dirs`.
  static Result<Janitor> start(std::vector<std::string> dirs, std::vector<std::string> marks = {});
  Janitor() = default;
  Janitor(Janitor&& o) noexcept : pid_(o.pid_), fd_(o.fd_) { o.pid_ = -1; o.fd_ = -1; }
  Janitor& operator=(Janitor&& o) noexcept;
  ~Janitor() { dismiss(); }

  pid_t pid() const { return pid_; }
  // Records a rank's process group (async-signal-safe; called right after fork).
  void watch_group(pid_t pgid);
  // Gives the janitor a duplicate of `fd` (an owner lock, hold_owner_lock)
  // to keep open until it exits, so the lock outlives accrun while the
  // janitor cleans up.  The caller keeps its own descriptor.  Blocks only
  // on the socket's buffer.  Errors: kInvalidUsage when no janitor runs,
  // kSystem when sending fails (the janitor died).
  Status hold(int fd);
  // Gives the janitor a duplicate of the agent's connection to its job
  // controller to watch (never read): if the controller goes away and the
  // agent has not ended 10 s later, the agent hangs; the janitor kills it
  // and cleans up as if it had died.
  Status watch_upstream(int fd);
  // The job is cleaned up: the janitor exits without doing anything.  Reaps
  // it unless `reaped` says the caller's waitpid(-1) already did.
  void dismiss(bool reaped = false);

 private:
  Status pass(int fd, char tag);
  pid_t pid_ = -1;
  int fd_ = -1;
};

}  // namespace accrun::launcher
