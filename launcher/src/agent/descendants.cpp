// descendants.cpp — see descendants.hpp.
#include "agent/descendants.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

namespace accrun::launcher {

std::vector<pid_t> children_of_self(const std::vector<pid_t>& except) {
  std::vector<pid_t> out;
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) return out;
  while (dirent* t = readdir(tasks)) {
    if (t->d_name[0] == '.') continue;
    std::ifstream f(std::string("/proc/self/task/") + t->d_name + "/children");
    pid_t c;
    while (f >> c)
      if (std::find(except.begin(), except.end(), c) == except.end() && std::find(out.begin(), out.end(), c) == out.end())
        out.push_back(c);
  }
  closedir(tasks);
  return out;
}

int kill_adopted(const std::vector<pid_t>& except, std::chrono::milliseconds limit) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + limit;
  int killed = 0;
  for (;;) {
    std::vector<pid_t> kids = children_of_self(except);
    if (kids.empty()) return killed;
    for (pid_t c : kids) {
      kill(-c, SIGKILL);  // a session leader leads its own group
      kill(c, SIGKILL);
    }
    for (pid_t c : kids) {
      // A child that is already a zombie, or dies now, is reaped here.
      for (int i = 0; i < 100 && waitpid(c, nullptr, WNOHANG) == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ++killed;
    }
    if (Clock::now() >= deadline) return killed;
  }
}

namespace {

// Whether the NUL-separated environment `env` holds every one of `marks`.
bool holds_all(const std::string& env, const std::vector<std::string>& marks) {
  for (const auto& m : marks) {
    bool found = false;
    for (size_t pos = 0; pos < env.size() && !found;) {
      size_t end = env.find('\0', pos);
      if (end == std::string::npos) end = env.size();
      found = env.compare(pos, end - pos, m) == 0;
      pos = end + 1;
    }
    if (!found) return false;
  }
  return true;
}

}  // namespace

int kill_by_environment(const std::vector<std::string>& marks) {
  if (marks.empty()) return 0;
  int killed = 0;
  const pid_t self = getpid();
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return 0;
  while (dirent* e = readdir(proc)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || pid <= 1 || pid == self) continue;
    int fd = open((std::string("/proc/") + e->d_name + "/environ").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    std::string env;
    char buf[65536];
    ssize_t n;
    while (env.size() < (8u << 20) && (n = read(fd, buf, sizeof buf)) > 0) env.append(buf, static_cast<size_t>(n));
    close(fd);
    if (!holds_all(env, marks)) continue;
    kill(static_cast<pid_t>(pid), SIGKILL);
    ++killed;
  }
  closedir(proc);
  return killed;
}

}  // namespace accrun::launcher
