// Job directories and the janitor: see janitor.hpp.
#include "janitor.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdint>
#include <cstring>

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

// The janitor's life: wait for the pipe, clean up if accrun died.
[[noreturn]] void janitor_main(int fd, const std::vector<std::string>& dirs) {
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
  // accrun and the ranks are gone.
  if (fd != 3) {
    dup2(fd, 3);
    fd = 3;
  }
  syscall(SYS_close_range, 4U, ~0U, 0U);

  std::vector<pid_t> groups;
  for (;;) {
    char tag = 0;
    ssize_t n = read(fd, &tag, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n == 1 && tag == 'D') _exit(0);
    if (n == 1 && tag == 'G') {
      int32_t pg = 0;
      size_t got = 0;
      while (got < sizeof pg) {
        ssize_t m = read(fd, reinterpret_cast<char*>(&pg) + got, sizeof pg - got);
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
  for (const auto& d : dirs) remove_tree(d);
  _exit(0);
}

}  // namespace

Result<Janitor> Janitor::start(std::vector<std::string> dirs) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return system_error("pipe");
  pid_t pid = fork();
  if (pid < 0) {
    int err = errno;
    close(p[0]);
    close(p[1]);
    return system_error("fork (janitor)", err);
  }
  if (pid == 0) {
    close(p[1]);
    janitor_main(p[0], dirs);
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
  ssize_t n = write(fd_, rec, sizeof rec);  // 5 bytes < PIPE_BUF: atomic
  (void)n;
}

void Janitor::dismiss(bool reaped) {
  if (fd_ >= 0) {
    char d = 'D';
    ssize_t n = write(fd_, &d, 1);
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
