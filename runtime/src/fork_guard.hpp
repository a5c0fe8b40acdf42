// A child forked from a process that had called accrun_init (libaccrun(3)
// FORK): the job's state it inherited (groups, keys, the PMIx connection,
// the private directory) belongs to its parent, so the child's calls that
// would act on it are refused and its accrun_finalize lets it be.
#pragma once

#include <atomic>
#include <string>

#include "accrun/status.hpp"

namespace accrun::runtime {

// Set in the child by the fork handler that accrun_init installs.
inline std::atomic<bool>& forked_child() {
  static std::atomic<bool> flag{false};
  return flag;
}

inline Status forked_child_error(const char* fn) {
  return invalid_usage(std::string(fn) +
                       ": called in a process forked after accrun_init; the job's groups, keys and connection "
                       "belong to the process that called accrun_init, so a forked child cannot use libaccrun: "
                       "make the call in the parent, or start the child as a program of its own (fork and exec)");
}

}  // namespace accrun::runtime
