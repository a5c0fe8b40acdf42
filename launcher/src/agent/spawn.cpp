// spawn.cpp — see spawn.hpp.
#include "agent/spawn.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace accrun::launcher {

namespace {

// Variables that describe one Slurm step's task (an agent started by srun
// is task 0 of a step of one); a rank that saw them would take itself for
// that task.  The job's own (SLURM_JOB_ID, SLURM_JOB_NODELIST, ...) stay.
bool slurm_task_variable(const std::string& k) {
  if (k.rfind("SLURM_", 0) != 0) return false;
  if (k.rfind("SLURM_STEP_", 0) == 0 || k.rfind("SLURM_SRUN_COMM_", 0) == 0 || k.rfind("SLURM_CPU_BIND", 0) == 0)
    return true;
  static const char* const kTask[] = {"SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_TASK_PID",
                                      "SLURM_GTIDS", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_TASKS_PER_NODE",
                                      "SLURM_STEPID", "SLURM_DISTRIBUTION", "SLURM_LAUNCH_NODE_IPADDR",
                                      "SLURM_PRIO_PROCESS", "SLURM_UMASK", "SLURM_NNODES", "SLURM_NODELIST",
                                      "SLURM_STEP_NUM_TASKS", "SLURM_CPUS_ON_NODE"};
  for (const char* t : kTask)
    if (k == t) return true;
  return false;
}

}  // namespace

Env filter_inherited(const Env& inherited) {
  Env out;
  for (const auto& [k, v] : inherited) {
    if (k.rfind("PMIX_", 0) == 0 || k.rfind("PMI_", 0) == 0 || k.rfind("OMPI_", 0) == 0 || slurm_task_variable(k))
      continue;
    out[k] = v;
  }
  return out;
}

void add_launch_env(Env& env, int rank, const std::string& jobid, const std::string& shm_dir, bool oversubscribed,
                    bool pmix) {
  if (pmix) {
    env["PMIX_NAMESPACE"] = "accrun." + jobid;
    env["PMIX_RANK"] = std::to_string(rank);
  }
  env["OMPI_MCA_schizo"] = "^orte";
  env["OMPI_MCA_btl_vader_backing_directory"] = shm_dir + "/ompi";
  if (oversubscribed) env["OMPI_MCA_mpi_oversubscribe"] = "1";
  env["ACCRUN_JOB_ID"] = jobid;
  env["ACCRUN_SHM_DIR"] = shm_dir;
}

// Parses an hwloc list string ("0-3,8") into a CPU set; false if malformed.
bool parse_cpus(const std::string& list, cpu_set_t* set) {
  CPU_ZERO(set);
  size_t pos = 0;
  while (pos < list.size()) {
    size_t end = list.find(',', pos);
    if (end == std::string::npos) end = list.size();
    std::string part = list.substr(pos, end - pos);
    int a = 0, b = 0;
    if (std::sscanf(part.c_str(), "%d-%d", &a, &b) == 2) {
    } else if (std::sscanf(part.c_str(), "%d", &a) == 1) {
      b = a;
    } else {
      return false;
    }
    if (a < 0 || b < a || b >= CPU_SETSIZE) return false;
    for (int c = a; c <= b; ++c) CPU_SET(c, set);
    pos = end + 1;
  }
  return CPU_COUNT(set) > 0;
}

Resolved resolve_program(const std::string& program, const std::string& path,
                         const std::optional<std::string>& wdir) {
  Resolved r;
  auto check = [&](const std::string& candidate) -> int {
    struct stat st;
    if (stat(candidate.c_str(), &st) != 0) return 127;
    if (S_ISDIR(st.st_mode) || access(candidate.c_str(), X_OK) != 0) return 126;
    return 0;
  };
  // The rank runs in wdir: a relative name (or PATH entry) is taken from
  // there and made absolute, since the child changes into wdir (itself
  // perhaps relative) before its exec.
  auto from_wdir = [&](const std::string& p) {
    if (p[0] == '/' || !wdir) return p;
    std::string base = *wdir;
    if (base.empty() || base[0] != '/') {
      char cwd[4096];
      if (getcwd(cwd, sizeof cwd) == nullptr) return *wdir + "/" + p;
      base = base.empty() ? std::string(cwd) : std::string(cwd) + "/" + base;
    }
    return base + "/" + p;
  };
  if (program.find('/') != std::string::npos) {
    std::string candidate = from_wdir(program);
    r.status = check(candidate);
    r.path = candidate;
    if (r.status == 127) r.message = "'" + program + "': no such file";
    if (r.status == 126) r.message = "'" + program + "' is not an executable file (permission denied)";
    return r;
  }
  int best = 127;
  size_t pos = 0;
  std::string first_denied;
  while (pos <= path.size()) {
    size_t end = path.find(':', pos);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(pos, end - pos);
    if (dir.empty()) dir = ".";
    std::string candidate = from_wdir(dir + "/" + program);
    int s = check(candidate);
    if (s == 0) {
      r.path = candidate;
      return r;
    }
    if (s == 126 && first_denied.empty()) {
      best = 126;
      first_denied = candidate;
    }
    pos = end + 1;
  }
  r.status = best;
  r.message = best == 126 ? "'" + first_denied + "' is not executable (permission denied)"
                          : "'" + program + "': command not found in PATH";
  return r;
}

namespace {

// The interpreter a "#!" script names (as the kernel reads it: up to the
// first blank or newline), or "" if `path` is not such a script.
std::string script_interpreter(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  char buf[256];
  ssize_t n = read(fd, buf, sizeof buf);
  close(fd);
  if (n < 2 || buf[0] != '#' || buf[1] != '!') return "";
  auto end = static_cast<size_t>(n);
  size_t i = 2;
  while (i < end && (buf[i] == ' ' || buf[i] == '\t')) ++i;
  size_t j = i;
  while (j < end && buf[j] != ' ' && buf[j] != '\t' && buf[j] != '\n' && buf[j] != '\0') ++j;
  return std::string(buf + i, j - i);
}

}  // namespace

// Whether the "#!" interpreter of `path` (a file that exists) is missing or
// not executable, as execve would find: then the exit status shells give
// (bash: 127 missing, 126 not executable) and a message naming `program`
// and the interpreter.  Status 0 if there is nothing wrong with it.
Resolved check_interpreter(const std::string& program, const std::string& path,
                           const std::optional<std::string>& wdir) {
  Resolved r;
  std::string interp = script_interpreter(path);
  if (interp.empty()) return r;
  // A relative interpreter is taken from the rank's working directory.
  std::string where = interp[0] == '/' || !wdir ? interp : *wdir + "/" + interp;
  struct stat st;
  int err = 0;
  if (stat(where.c_str(), &st) != 0) {
    err = errno;
  } else if (S_ISDIR(st.st_mode)) {
    err = EACCES;
  } else if (access(where.c_str(), X_OK) != 0) {
    err = errno;
  }
  if (err == 0) return r;
  r.status = err == ENOENT || err == ENOTDIR ? 127 : 126;
  r.message = "'" + program + "': bad interpreter '" + interp + "': " + std::strerror(err);
  return r;
}

// Only async-signal-safe calls in the child, which runs on our memory.
__attribute__((noinline)) pid_t spawn_child(const char* path, char* const* argv, const ChildSpec& c,
                                            const char* wdir, pid_t parent, ExecReport* report) {
  pid_t pid = vfork();
  if (pid != 0) return pid;
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  // Default dispositions for what accrun forwards or ignores: a shell that
  // started accrun in the background leaves SIGINT ignored, and an ignored
  // signal stays ignored across execve (ranks would not see Ctrl-C).
  for (int s : {SIGPIPE, SIGINT, SIGTERM, SIGQUIT, SIGHUP, SIGUSR1, SIGUSR2, SIGTSTP}) signal(s, SIG_DFL);
  if (c.hup_ignored) signal(SIGHUP, SIG_IGN);
  // A process group of its own, whose id is its pid, in the agent's
  // session, as mpirun starts ranks; not a session of its own.  Under the
  // kernel's autogroup scheduling a session is one scheduling group, and
  // sched_yield passes the CPU only within the caller's group: with a
  // session per rank, a rank that yields while it waits for a rank on the
  // same CPU (the store's waits and Open MPI's mpi_yield_when_idle, on an
  // oversubscribed host) kept the CPU until its slice ended, and 4 ranks on
  // 2 CPUs broadcast 256 KiB in 86 us instead of 52 (docs/design.md §4).
  // Then it gives up the controlling terminal, for itself only (it leads
  // no session), as a rank of its own session had none: a rank that opens
  // /dev/tty fails at once rather than stop in the background.
  setpgid(0, 0);
  if (int tty = open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC); tty >= 0) {
    ioctl(tty, TIOCNOTTY);
    close(tty);
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);  // accrun died before the line above
  dup2(c.in_fd, 0);
  dup2(c.out_fd, 1);
  dup2(c.err_fd, 2);
  if (c.pmi_fd >= 0) fcntl(c.pmi_fd, F_SETFD, 0);  // this child's table only: it keeps its own socket
  if (c.bind) sched_setaffinity(0, sizeof c.cpus, &c.cpus);
  if (wdir != nullptr && chdir(wdir) != 0) {
    report->err = errno;
    report->stage = 1;
    _exit(126);
  }
  execve(path, argv, c.envp.data());
  report->err = errno;
  report->stage = 2;
  _exit(127);
}

}  // namespace accrun::launcher
