// spawn.hpp — how a node agent starts a rank: the program found as execvp
// would (with the exit status a shell gives when it is not), the
// environment a rank inherits, and the vfork+execve of one rank with its
// standard fds, CPU binding and process group (accrun(1), EXIT STATUS).
#pragma once

#include <sched.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "accrun/plan.hpp"

namespace accrun::launcher {

// The environment a rank inherits from accrun: `inherited` without the
// variables of an enclosing launcher (PMIX_*, PMI_*, OMPI_*, a Slurm step's task
// variables).
Env filter_inherited(const Env& inherited);

// What the node agent adds to a rank's planned environment when it starts
// it (accrun(7), "Environment added at spawn"): the job's id and
// shared-memory directory, the PMIx namespace and rank, and what Open MPI
// needs to wire up through the agent.  The dry run shows the same, with
// "(at launch)" for the values only a launch knows.
// `pmix`: the rank is a PMIx client (not under --mpi pmi).
void add_launch_env(Env& env, int rank, const std::string& jobid, const std::string& shm_dir, bool oversubscribed,
                    bool pmix = true);

// Parses an hwloc list string ("0-3,8") into a CPU set; false if malformed.
bool parse_cpus(const std::string& list, cpu_set_t* set);

// Finds `program` the way execvp would, in `path` (relative names with a
// slash, and relative PATH entries, are taken relative to `wdir`, and the
// path returned is then absolute).  Returns the path to exec, or the
// exit status (127 not found, 126 not executable) and a message.
struct Resolved {
  std::string path;
  int status = 0;
  std::string message;
};
Resolved resolve_program(const std::string& program, const std::string& path,
                         const std::optional<std::string>& wdir);

// Whether the "#!" interpreter of `path` (a file that exists) is missing or
// not executable, as execve would find: then the exit status shells give
// (bash: 127 missing, 126 not executable) and a message naming `program`
// and the interpreter.  Status 0 if there is nothing wrong with it.
Resolved check_interpreter(const std::string& program, const std::string& path,
                           const std::optional<std::string>& wdir);

// Everything a child needs, prepared before fork so that the child calls
// only async-signal-safe functions.
struct ChildSpec {
  std::vector<std::string> env_storage;
  std::vector<char*> envp;
  int in_fd = -1;
  int out_fd = -1;
  int err_fd = -1;
  int pmi_fd = -1;  // the rank's PMI socket (close-on-exec until the child clears it)
  bool bind = false;
  bool hup_ignored = false;  // SIGHUP stays ignored in the child (accrun under nohup)
  cpu_set_t cpus;
};

// What a child that failed before execve left behind (it shares our memory).
struct ExecReport {
  volatile int stage = 0;  // 0 exec'd, 1 chdir failed, 2 execve failed
  volatile int err = 0;
};

// Starts one rank and returns its pid once it has exec'd (or failed to):
// `report` says which.  The child runs on our memory and calls only
// async-signal-safe functions; it unblocks signals, restores the default
// dispositions of those accrun forwards, leads its own process group in
// our session, gives up the controlling terminal, dies with its parent,
// and binds itself where `c` says.
pid_t spawn_child(const char* path, char* const* argv, const ChildSpec& c, const char* wdir, pid_t parent,
                  ExecReport* report);

}  // namespace accrun::launcher
