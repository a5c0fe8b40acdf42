// Job directories and the janitor: see janitor.hpp.
#include "agent/janitor.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <optional>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "accrun/log.hpp"
#include "agent/descendants.hpp"

namespace accrun::launcher {

Status make_private_dir(const std::string& path) {
  if (mkdir(path.c_str(), 0700) != 0) return system_error("cannot create " + path);
  // mkdir applies the umask; the mode must be exactly 0700.
  if (chmod(path.c_str(), 0700) != 0) return system_error("cannot chmod " + path);
  return Status::ok();
}

namespace {
void remove_at(int dirfd, const char* name) {
  if (unlinkat(dirfd, name, 0) == 0) return;
  if (errno != EISDIR && errno != EPERM) return;
  int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  DIR* d = fdopendir(fd);
  if (d == nullptr) {
    close(fd);
    return;
  }
  while (dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    remove_at(fd, e->d_name);
  }
  closedir(d);
  unlinkat(dirfd, name, AT_REMOVEDIR);
}
}  // namespace

void remove_tree(const std::string& path) {
  if (path.empty()) return;
  remove_at(AT_FDCWD, path.c_str());
}

namespace {

// Empties the directory open at `dfd`, every name resolved relative to an
// open descriptor and no link followed.
void remove_entries_at(int dfd) {
  const int scan = dup(dfd);  // fdopendir takes over the descriptor
  if (scan < 0) return;
  DIR* d = fdopendir(scan);
  if (d == nullptr) {
    close(scan);
    return;
  }
  std::vector<std::string> names;
  while (dirent* e = readdir(d))
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
  closedir(d);
  for (const std::string& n : names) remove_at(dfd, n.c_str());
}

// Opens `name` under `base_fd` if it is a directory that is ours to remove:
// not a link, owned by this effective uid, writable by nobody else.
// The checks are made on the opened directory itself.  -1 otherwise, with
// the reason in *why.
int open_own_dir(int base_fd, const char* name, struct stat* st, const char** why) {
  const int fd = openat(base_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    *why = errno == ELOOP || errno == ENOTDIR ? "not a directory" : "cannot be opened";
    return -1;
  }
  if (fstat(fd, st) != 0 || !S_ISDIR(st->st_mode)) {
    *why = "not a directory";
  } else if (st->st_uid != geteuid()) {
    *why = "owned by another user";
  } else if ((st->st_mode & 022) != 0) {
    *why = "writable by other users";
  } else {
    return fd;
  }
  close(fd);
  return -1;
}

// accrun.<uid>.<hex digits>, nothing else (the runtime's lone and pmix
// directories have their own sweep).
bool is_job_dir_name(const char* name, const std::string& prefix) {
  if (std::strncmp(name, prefix.c_str(), prefix.size()) != 0) return false;
  const char* id = name + prefix.size();
  size_t n = 0;
  for (; id[n] != 0; ++n)
    if (!((id[n] >= '0' && id[n] <= '9') || (id[n] >= 'a' && id[n] <= 'f'))) return false;
  return n > 0 && n <= 64;
}

void sweep_one_root(const std::string& root, const std::string& prefix) {
  const int base_fd = open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (base_fd < 0) return;
  std::vector<std::string> names;
  if (const int scan = dup(base_fd); scan >= 0) {
    if (DIR* d = fdopendir(scan)) {
      while (dirent* e = readdir(d))
        if (is_job_dir_name(e->d_name, prefix)) names.emplace_back(e->d_name);
      closedir(d);
    } else {
      close(scan);
    }
  }
  for (const std::string& name : names) {
    struct stat st {};
    const char* why = "";
    const int dfd = open_own_dir(base_fd, name.c_str(), &st, &why);
    if (dfd < 0) {
      log(LogLevel::kDebug, "left %s/%s alone: %s", root.c_str(), name.c_str(), why);
      continue;
    }
    bool stale = false;
    const int lock = openat(dfd, "owner", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (lock >= 0) {
      // Held by a live accrun or its janitor; free once both are gone.  We
      // keep it while removing, so two sweepers do not interleave.
      stale = flock(lock, LOCK_EX | LOCK_NB) == 0;
    } else if (errno == ENOENT) {
      timespec now{};
      clock_gettime(CLOCK_REALTIME, &now);
      stale = now.tv_sec - st.st_mtim.tv_sec > kOwnerlessGraceSeconds;
    }
    if (stale) {
      remove_entries_at(dfd);
      // /tmp and /dev/shm are sticky: only we can rename our entry, so the
      // name still denotes the directory just emptied.
      if (unlinkat(base_fd, name.c_str(), AT_REMOVEDIR) == 0)
        log(LogLevel::kDebug, "removed the stale job directory %s/%s", root.c_str(), name.c_str());
    }
    if (lock >= 0) close(lock);
    close(dfd);
  }
  close(base_fd);
}

}  // namespace

void sweep_stale_job_dirs(const std::string& tmpdir, const std::string& shm_root) {
  const std::string prefix = "accrun." + std::to_string(getuid()) + ".";
  if (!tmpdir.empty()) sweep_one_root(tmpdir, prefix);
  if (!shm_root.empty() && shm_root != tmpdir) sweep_one_root(shm_root, prefix);
}

Result<int> hold_owner_lock(const std::string& dir) {
  const int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) return system_error("cannot open " + dir);
  // Locked under a temporary name, then renamed: a sweeper never sees an
  // unlocked `owner` of a live job.
  const std::string tmp = "owner." + std::to_string(getpid()) + ".tmp";
  const int fd = openat(dfd, tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    Status st = system_error("cannot create " + dir + "/" + tmp);
    close(dfd);
    return st;
  }
  Status st = Status::ok();
  const std::string pid = std::to_string(getpid()) + "\n";
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    st = system_error("cannot lock " + dir + "/" + tmp);
  } else if (write(fd, pid.data(), pid.size()) != static_cast<ssize_t>(pid.size())) {
    st = system_error("cannot write " + dir + "/" + tmp);
  } else if (renameat2(dfd, tmp.c_str(), dfd, "owner", RENAME_NOREPLACE) != 0) {
    st = system_error("cannot create " + dir + "/owner");
  }
  if (!st) {
    unlinkat(dfd, tmp.c_str(), 0);
    close(fd);
    close(dfd);
    return st;
  }
  close(dfd);
  return fd;
}

namespace {

// How long the janitor gives an agent whose job controller went away to end
// by itself before it takes it for hung, kills it and cleans up.
constexpr auto kAgentGrace = std::chrono::seconds(10);

// Whether a process that is not a zombie is left in one of `groups`.
// Zombies count as gone: they cannot write, and whoever adopted them (init,
// a subreaper) reaps them in its own time.
bool groups_alive(const std::vector<pid_t>& groups) {
  DIR* d = opendir("/proc");
  if (d == nullptr) return false;
  bool alive = false;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char path[300];  // d_name is at most 255 bytes
    std::snprintf(path, sizeof path, "/proc/%.255s/stat", e->d_name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    char buf[512];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) continue;
    buf[n] = 0;
    // "pid (comm) S ppid pgrp ...": comm may hold spaces; parse after the last ')'.
    const char* rp = std::strrchr(buf, ')');
    if (rp == nullptr) continue;
    char state = 0;
    int ppid = 0, pgrp = 0;
    if (std::sscanf(rp + 1, " %c %d %d", &state, &ppid, &pgrp) != 3) continue;
    if (state == 'Z' || state == 'X') continue;
    for (pid_t g : groups)
      if (g == pgrp) alive = true;
    if (alive) break;
  }
  closedir(d);
  return alive;
}

// recv() that keeps any descriptors passed along (SCM_RIGHTS) in `fds`:
// reading without a control buffer would make the kernel drop them.
ssize_t recv_with_fds(int fd, void* buf, size_t len, std::vector<int>& fds) {
  iovec iov{buf, len};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  if (n <= 0) return n;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int got = -1;
      std::memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof got);
      fds.push_back(got);
    }
  }
  return n;
}

// The janitor's life: wait for the socket, clean up if accrun died.
[[noreturn]] void janitor_main(int fd, const std::vector<std::string>& dirs, const std::vector<std::string>& marks) {
  const pid_t agent = getppid();
  prctl(PR_SET_NAME, "accrun-janitor");
  // Out of accrun's session: a Ctrl-C or hang-up aimed at accrun's
  // terminal must not take the janitor down before accrun.
  setsid();
  for (int s : {SIGINT, SIGQUIT, SIGHUP, SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU}) signal(s, SIG_IGN);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  int devnull = open("/dev/null", O_RDWR);
  if (devnull >= 0) {
    dup2(devnull, 0);
    dup2(devnull, 1);
    dup2(devnull, 2);
  }
  // Hold nothing of accrun's open: its pipes' readers must see EOF when
  // accrun and the ranks are gone.  (Owner locks arrive later, on the
  // socket, and are kept.)
  if (fd != 3) {
    dup2(fd, 3);
    fd = 3;
  }
  syscall(SYS_close_range, 4U, ~0U, 0U);

  std::vector<pid_t> groups;
  std::vector<int> held;  // owner locks, kept open until we exit
  int upstream = -1;      // the agent's connection to its job controller, watched for its end
  std::optional<std::chrono::steady_clock::time_point> give_up;
  for (;;) {
    pollfd p[2] = {{fd, POLLIN, 0}, {upstream, POLLRDHUP, 0}};
    int wait_ms = -1;
    if (give_up) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*give_up - std::chrono::steady_clock::now());
      wait_ms = static_cast<int>(std::max<int64_t>(0, left.count()));
    }
    int rc = poll(p, upstream >= 0 && !give_up ? 2 : 1, wait_ms);
    if (rc < 0 && errno == EINTR) continue;
    if (rc == 0 && give_up) {
      // The controller has been gone for a while and the agent has not
      // ended: it hangs.  It goes, and we clean up after it.
      kill(agent, SIGKILL);
      break;
    }
    if (!give_up && upstream >= 0 && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR)))
      give_up = std::chrono::steady_clock::now() + kAgentGrace;
    if (!(p[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    char tag = 0;
    ssize_t n = recv_with_fds(fd, &tag, 1, held);
    if (n < 0 && errno == EINTR) continue;
    if (n == 1 && tag == 'D') _exit(0);
    if (n == 1 && tag == 'L') continue;  // its descriptor is in `held` now
    if (n == 1 && tag == 'U') {
      if (!held.empty()) upstream = held.back();
      continue;
    }
    if (n == 1 && tag == 'G') {
      int32_t pg = 0;
      size_t got = 0;
      while (got < sizeof pg) {
        ssize_t m = recv_with_fds(fd, reinterpret_cast<char*>(&pg) + got, sizeof pg - got, held);
        if (m < 0 && errno == EINTR) continue;
        if (m <= 0) break;
        got += static_cast<size_t>(m);
      }
      if (got == sizeof pg && pg > 1) groups.push_back(pg);
      continue;
    }
    break;  // end of file: accrun is gone
  }
  for (pid_t g : groups) kill(-g, SIGKILL);
  // Give the groups a bounded moment to disappear before removing the
  // directories their members may still write into.
  for (int i = 0; i < 200; ++i) {
    if (!groups_alive(groups)) break;
    timespec ts{0, 10 * 1000 * 1000};
    nanosleep(&ts, nullptr);
    for (pid_t g : groups) kill(-g, SIGKILL);
  }
  kill_by_environment(marks);
  for (const auto& d : dirs) remove_tree(d);
  _exit(0);
}

}  // namespace

Result<Janitor> Janitor::start(std::vector<std::string> dirs, std::vector<std::string> marks) {
  // A socket rather than a pipe: owner-lock descriptors travel on it too.
  int p[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p) != 0) return system_error("socketpair");
  // Only accrun writes and only the janitor reads.
  shutdown(p[0], SHUT_WR);
  shutdown(p[1], SHUT_RD);
  pid_t pid = fork();
  if (pid < 0) {
    int err = errno;
    close(p[0]);
    close(p[1]);
    return system_error("fork (janitor)", err);
  }
  if (pid == 0) {
    close(p[1]);
    janitor_main(p[0], dirs, marks);
  }
  close(p[0]);
  Janitor j;
  j.pid_ = pid;
  j.fd_ = p[1];
  return j;
}

Janitor& Janitor::operator=(Janitor&& o) noexcept {
  if (this != &o) {
    dismiss();
    pid_ = o.pid_;
    fd_ = o.fd_;
    o.pid_ = -1;
    o.fd_ = -1;
  }
  return *this;
}

void Janitor::watch_group(pid_t pgid) {
  if (fd_ < 0) return;
  char rec[1 + sizeof(int32_t)];
  rec[0] = 'G';
  int32_t pg = pgid;
  std::memcpy(rec + 1, &pg, sizeof pg);
  // One writer (accrun's event loop); MSG_NOSIGNAL: a dead janitor is no
  // reason for a SIGPIPE.
  ssize_t n = send(fd_, rec, sizeof rec, MSG_NOSIGNAL);
  (void)n;
}

Status Janitor::hold(int fd) { return pass(fd, 'L'); }

Status Janitor::watch_upstream(int fd) { return pass(fd, 'U'); }

Status Janitor::pass(int fd, char tag) {
  if (fd_ < 0) return invalid_usage("Janitor: no janitor runs");
  iovec iov{&tag, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  ssize_t n;
  do {
    n = sendmsg(fd_, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n != 1) return system_error("passing a descriptor to the janitor");
  return Status::ok();
}

void Janitor::dismiss(bool reaped) {
  if (fd_ >= 0) {
    char d = 'D';
    ssize_t n = send(fd_, &d, 1, MSG_NOSIGNAL);
    (void)n;
    close(fd_);
    fd_ = -1;
  }
  if (pid_ > 0 && !reaped) {
    while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  pid_ = -1;
}

}  // namespace accrun::launcher
