// descendants.hpp — what a job leaves outside its ranks' process groups.
// A rank's descendant that starts a new session (setsid, Python's
// start_new_session=True, a daemon's double fork) is in no process group
// the agent signals.  While the agent lives it is the ranks' subreaper, so
// such a process becomes the agent's child once its parent dies, and the
// agent kills what it adopted when the job ends.  If the agent itself dies,
// its janitor finds them by the job's marks in their environment
// (accrun(7), PROCESS CLEAN-UP).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace accrun::launcher {

// This process's children (those of every thread), without `except`.
std::vector<pid_t> children_of_self(const std::vector<pid_t>& except = {});

// Kills (SIGKILL) every child of this process not in `except`, with its
// process group, and reaps it; repeats while new ones arrive (a killed
// process's own orphans are adopted next), for at most `limit`.  Returns
// how many were killed.
int kill_adopted(const std::vector<pid_t>& except, std::chrono::milliseconds limit);

// Kills (SIGKILL) every process, other than this one, whose environment
// holds each of `marks` ("NAME=value", exactly).  Processes this user may
// not read are skipped.  Returns how many were signalled.
int kill_by_environment(const std::vector<std::string>& marks);

}  // namespace accrun::launcher
