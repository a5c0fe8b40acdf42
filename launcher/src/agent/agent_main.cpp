// agent_main.cpp — `accrun --daemon`: the node agent on another host
// (DESIGN.md §4, accrun(1) "LAUNCHING ON SEVERAL HOSTS").  It reads the job's
// secret and its launch description on standard input, starts its part of
// the launch tree, connects back to the controller proving the secret,
// detects its host and says hello with its inventory; then it serves the
// controller until told to end or until the controller's connection closes.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "accrun/commands.hpp"
#include "accrun/detect.hpp"
#include "accrun/hostfile.hpp"
#include "controller/launch_agent.hpp"
#include "controller/protocol.hpp"
#include "wire/auth.hpp"
#include "wire/codec.hpp"
#include "wire/connection.hpp"
#include "wire/frame.hpp"

namespace accrun::launcher {

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxDescription = 64 << 20;  // 100,000 hosts' names fit
constexpr auto kReadTimeout = std::chrono::seconds(30);

void say(const std::string& host, const std::string& line) {
  std::string s = "accrun: agent on " + host + ": " + line + "\n";
  [[maybe_unused]] ssize_t w = write(2, s.data(), s.size());
}

// Standard input up to the "end" line, bounded in size and time.
Result<std::string> read_description() {
  std::string text;
  auto deadline = Clock::now() + kReadTimeout;
  for (;;) {
    if (text.size() >= 4 && (text.compare(text.size() - 4, 4, "end\n") == 0)) return text;
    if (text.size() > kMaxDescription) return invalid_argument("launch description over 64 MiB");
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return timeout_error("no launch description on standard input within 30 s (accrun --daemon is started by accrun, not by users)");
    pollfd p{0, POLLIN, 0};
    int rc = poll(&p, 1, static_cast<int>(left));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) continue;
    char buf[65536];
    ssize_t n = read(0, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return text;  // decode says what is missing
    text.append(buf, static_cast<size_t>(n));
  }
}

// Connects to the first controller address that answers and proves the
// secret; the addresses are tried at once, the first to connect wins.
Result<int> connect_controller(const AgentLaunch& launch, const wire::Secret& secret) {
  std::string errors;
  for (const std::string& addr : launch.controller) {
    size_t colon = addr.rfind(':');
    if (colon == std::string::npos) continue;
    std::string host = addr.substr(0, colon);
    if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    int port = std::atoi(addr.c_str() + colon + 1);
    auto fd = wire::connect_tcp(host, static_cast<uint16_t>(port), std::chrono::milliseconds(3000));
    if (!fd) {
      errors += (errors.empty() ? "" : "; ") + addr + ": " + fd.status().message();
      continue;
    }
    if (Status s = wire::handshake_blocking(*fd, wire::Role::kChild, secret, std::chrono::seconds(10)); !s) {
      close(*fd);
      errors += (errors.empty() ? "" : "; ") + addr + ": " + s.message();
      continue;
    }
    return *fd;
  }
  return remote_error("cannot reach the controller: " + errors);
}

bool send_frame(int fd, uint16_t type, const std::string& payload) {
  std::string f = wire::encode_frame(type, payload);
  size_t off = 0;
  while (off < f.size()) {
    ssize_t w = send(fd, f.data() + off, f.size() - off, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    off += static_cast<size_t>(w);
  }
  return true;
}

// This host's inventory under the job's overrides, as one-host JSON; or the
// detection error.
std::pair<bool, std::string> detect_here(const AgentLaunch& launch, char** envp) {
  detect::DetectConfig config = detect::DetectConfig::from_environment(envp);
  if (auto it = launch.options.find("num-gpus"); it != launch.options.end()) config.num_gpus = std::atoi(it->second.c_str());
  if (auto it = launch.options.find("host-accelerator-type"); it != launch.options.end())
    config.host_accelerator_type = it->second;
  if (auto it = launch.options.find("resources"); it != launch.options.end()) {
    auto r = hostfiles::parse_resource_list(it->second);
    if (!r) return {false, "--resources: " + r.status().message()};
    config.resources = *r;
  }
  auto inv = detect::detect_host(config);
  if (!inv) return {false, inv.status().message()};
  return {true, detect::to_json({*inv})};
}

}  // namespace

int daemon_main(const Options&, char** envp) {
  signal(SIGPIPE, SIG_IGN);
  char self[256] = {};
  gethostname(self, sizeof self - 1);
  auto text = read_description();
  if (!text) {
    say(self, text.status().message());
    return 2;
  }
  auto launch = AgentLaunch::decode(*text);
  if (!launch) {
    say(self, launch.status().message());
    return 2;
  }
  const std::string& me = launch->hosts[launch->index];
  auto secret = wire::Secret::from_hex(launch->secret_hex);
  if (!secret) {
    say(me, secret.status().message());
    return 2;
  }

  // Our part of the launch tree first: the children come up while we detect.
  std::vector<LaunchProcess> children;
  int n = static_cast<int>(launch->hosts.size());
  for (int child : tree_children(launch->index + 1, n, launch->fanout)) {
    AgentLaunch c = *launch;
    c.index = child;
    std::string cmd = launch_command(launch->launch_agent, launch->hosts[child],
                                     shell_quote(launch->daemon_path) + " --daemon");
    auto p = start_launch_agent(cmd, c.encode());
    if (!p) {
      say(me, p.status().message());
      LaunchProcess failed;
      failed.index = child;
      failed.exited = true;
      failed.status = 127 << 8;
      children.push_back(failed);
      continue;
    }
    p->index = child;
    p->host = launch->hosts[child];
    children.push_back(std::move(*p));
  }

  auto fd = connect_controller(*launch, *secret);
  if (!fd) {
    say(me, fd.status().message());
    return 1;
  }
  auto [detected, inventory] = detect_here(*launch, envp);
  wire::Writer hello;
  hello.u32(static_cast<uint32_t>(launch->index));
  hello.str(self);
  hello.boolean(detected);
  hello.str(inventory);
  if (!send_frame(*fd, msg::kHello, hello.data())) {
    say(me, "lost the controller's connection");
    return 1;
  }
  for (auto& c : children) {
    if (!c.exited) continue;
    wire::Writer w;
    w.u32(static_cast<uint32_t>(c.index));
    w.i32(c.status);
    send_frame(*fd, msg::kLaunchExited, w.data());
  }

  // Serve the controller until it says to end or goes away.
  wire::FrameDecoder decoder;
  int status = 0;
  for (bool running = true; running;) {
    for (auto& c : children) {
      int st = 0;
      if (c.exited || waitpid(c.pid, &st, WNOHANG) != c.pid) continue;
      c.exited = true;
      c.status = st;
      wire::Writer w;
      w.u32(static_cast<uint32_t>(c.index));
      w.i32(st);
      send_frame(*fd, msg::kLaunchExited, w.data());
    }
    pollfd p{*fd, POLLIN, 0};
    int rc = poll(&p, 1, 100);
    if (rc <= 0) continue;
    char buf[65536];
    ssize_t got = recv(*fd, buf, sizeof buf, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;  // the controller is gone: nothing of ours may outlive it
    std::vector<wire::Frame> frames;
    if (Status s = decoder.feed(buf, static_cast<size_t>(got), frames); !s) {
      say(me, "the controller's connection broke the protocol: " + s.message());
      status = 1;
      break;
    }
    for (auto& f : frames)
      if (f.type == msg::kShutdown) running = false;
  }
  close(*fd);
  // The children's agents hear the controller themselves; give their launch
  // agents a moment to end, then leave them to init.
  auto deadline = Clock::now() + std::chrono::seconds(2);
  for (auto& c : children)
    while (!c.exited && Clock::now() < deadline) {
      if (waitpid(c.pid, nullptr, WNOHANG) == c.pid) c.exited = true;
      else usleep(5000);
    }
  return status;
}

}  // namespace accrun::launcher
