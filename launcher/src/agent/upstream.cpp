// upstream.cpp — see upstream.hpp.
#include "agent/upstream.hpp"

#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cerrno>
#include <optional>

#include "accrun/log.hpp"
#include "agent/tree_links.hpp"
#include "controller/protocol.hpp"
#include "iof.hpp"
#include "wire/codec.hpp"

namespace accrun::launcher {

bool send_frame(int fd, uint16_t type, std::string_view payload) {
  std::string f = wire::encode_frame(type, payload);
  return write_all(fd, f.data(), f.size());
}

void AgentUpstream::publish(int rank, std::vector<std::pair<std::string, std::string>> packed,
             std::function<void(int)> done) {
  uint64_t id = ++next_id_;
  status_waiters_[id] = std::move(done);
  wire::Writer w;
  w.u64(id);
  w.u32(static_cast<uint32_t>(rank));
  w.u32(static_cast<uint32_t>(packed.size()));
  for (const auto& [key, value] : packed) {
    w.str(key);
    w.bytes(value.data(), value.size());
  }
  post(msg::kPublish, w.data());
}

void AgentUpstream::lookup(int rank, std::vector<std::string> keys, bool wait, size_t wait_count, double timeout_s,
            std::function<void(int, std::vector<DirectoryEntry>)> done) {
  uint64_t id = ++next_id_;
  lookup_waiters_[id] = std::move(done);
  wire::Writer w;
  w.u64(id);
  w.u32(static_cast<uint32_t>(rank));
  w.string_vector(keys);
  w.boolean(wait);
  w.u32(static_cast<uint32_t>(wait_count));
  w.f64(timeout_s);
  post(msg::kLookup, w.data());
}

void AgentUpstream::unpublish(int rank, std::vector<std::string> keys, std::function<void(int)> done) {
  uint64_t id = ++next_id_;
  status_waiters_[id] = std::move(done);
  wire::Writer w;
  w.u64(id);
  w.u32(static_cast<uint32_t>(rank));
  w.string_vector(keys);
  post(msg::kUnpublish, w.data());
}

bool AgentUpstream::on_readable(DaemonControl& daemon) {
  if (!catch_up(daemon)) return false;
  char buf[65536];
  ssize_t got = recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
  if (got < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (got <= 0) return false;
  std::vector<wire::Frame> frames;
  if (Status s = decoder_.feed(buf, static_cast<size_t>(got), frames); !s) return false;
  heard();
  return dispatch(frames, daemon);
}

bool AgentUpstream::catch_up(DaemonControl& daemon) {
  if (deferred_.empty()) return true;
  std::vector<wire::Frame> frames = take_deferred();
  return dispatch(frames, daemon);
}

bool AgentUpstream::dispatch(std::vector<wire::Frame>& frames, DaemonControl& daemon) {
  for (auto& f : frames) {
    wire::Reader r(f.payload);
    if (f.type == msg::kSignal) {
      auto sig = r.i32("signal");
      if (sig) daemon.terminate(*sig);
    } else if (f.type == msg::kModexRequest) {
      auto id = r.u64("modex request: id");
      auto rank = r.u32("modex request: rank");
      if (!id || !rank) return false;
      uint64_t rid = *id;
      daemon.modex_request(static_cast<int>(*rank), [this, rid](int status, std::string blob) {
        wire::Writer w;
        w.u64(rid);
        w.i32(status);
        w.bytes(blob.data(), blob.size());
        post(msg::kModexData, w.data());
      });
    } else if (f.type == msg::kModexData) {
      auto id = r.u64("modex data: id");
      auto st = r.i32("modex data: status");
      auto blob = r.bytes("modex data: blob");
      if (!id || !st || !blob) return false;
      auto it = modex_waiters_.find(*id);
      if (it == modex_waiters_.end()) return false;
      auto done = std::move(it->second);
      modex_waiters_.erase(it);
      done(*st, std::move(*blob));
    } else if (f.type == msg::kSpawnLaunch) {
      auto launch = msg::decode_spawn_launch(f.payload);
      if (!launch) return false;
      uint32_t k = static_cast<uint32_t>(launch->k);
      daemon.spawn_launch(*launch, [this, k](int status, std::string why) {
        wire::Writer w;
        w.u32(k);
        w.i32(status);
        w.str(why);
        post(msg::kSpawnStarted, w.data());
      });
    } else if (f.type == msg::kSignalProcs) {
      auto sp = msg::decode_signal_procs(f.payload);
      if (!sp) return false;
      daemon.signal_procs(sp->sig, sp->stop, sp->ids);
    } else if (f.type == msg::kSpawnDone) {
      auto id = r.u64("spawn done: id");
      auto st = r.i32("spawn done: status");
      auto nspace = r.str("spawn done: nspace");
      if (!id || !st || !nspace) return false;
      auto it = spawn_waiters_.find(*id);
      if (it == spawn_waiters_.end()) return false;
      auto done = std::move(it->second);
      spawn_waiters_.erase(it);
      done(*st, std::move(*nspace));
    } else if (f.type == msg::kOutputFlow) {
      auto pause = r.boolean("output flow: pause");
      if (!pause) return false;
      daemon.pause_output(*pause);
    } else if (f.type == msg::kStdin) {
      auto end = r.boolean("stdin: end");
      auto data = r.bytes("stdin: data");
      if (!end || !data) return false;
      if (!data->empty()) daemon.stdin_data(std::move(*data));
      if (*end) daemon.stdin_end();
    } else if (f.type == msg::kOutputClosed) {
      auto stream = r.u8("output closed: stream");
      auto err = r.i32("output closed: errno");
      if (!stream || !err) return false;
      daemon.output_closed(*stream, *err);
    } else if (f.type == msg::kFenceDone) {
      if (!fence_done(f.payload)) return false;
    } else if (f.type == msg::kFencesFail) {
      if (!fences_fail(f.payload)) return false;
    } else if (f.type == msg::kPublishDone || f.type == msg::kUnpublishDone) {
      auto id = r.u64("directory: id");
      auto st = r.i32("directory: status");
      if (!id || !st) return false;
      auto it = status_waiters_.find(*id);
      if (it == status_waiters_.end()) return false;
      auto done = std::move(it->second);
      status_waiters_.erase(it);
      done(*st);
    } else if (f.type == msg::kLookupDone) {
      auto id = r.u64("lookup: id");
      auto st = r.i32("lookup: status");
      auto n = r.u32("lookup: count");
      if (!id || !st || !n || *n > f.payload.size()) return false;
      std::vector<DirectoryEntry> found;
      for (uint32_t i = 0; i < *n; ++i) {
        auto key = r.str("lookup: key");
        auto rank = r.u32("lookup: rank");
        auto value = r.bytes("lookup: value");
        if (!key || !rank || !value) return false;
        found.push_back({*key, static_cast<int>(*rank), std::move(*value)});
      }
      auto it = lookup_waiters_.find(*id);
      if (it == lookup_waiters_.end()) return false;
      auto done = std::move(it->second);
      lookup_waiters_.erase(it);
      done(*st, std::move(found));
    } else if (f.type == msg::kPeerFailed) {
      auto rank = r.u32("peer failed: rank");
      auto status = r.i32("peer failed: status");
      auto kind = r.str("peer failed: kind");
      auto host = r.str("peer failed: host");
      auto text = r.str("peer failed: text");
      if (!rank || !status || !kind || !host || !text) return false;
      daemon.peer_failed(static_cast<int>(*rank), *status, *kind, *host, *text);
    } else if (f.type == msg::kShutdown) {
      return false;
    }
  }
  return true;
}

void AgentUpstream::spawn(const SpawnRequest& request, std::function<void(int, std::string)> done) {
  uint64_t id = ++next_id_;
  spawn_waiters_[id] = std::move(done);
  post(msg::kSpawn, msg::encode_spawn_request(id, request));
}

void AgentUpstream::spawned_ended(int id) {
  wire::Writer w;
  w.u32(static_cast<uint32_t>(id));
  post(msg::kSpawnedEnded, w.data());
}

void AgentUpstream::signal_procs(int sig, bool stop, const std::vector<int>& ids) {
  post(msg::kSignalProcs, msg::encode_signal_procs(sig, stop, ids));
}

void AgentUpstream::output(int stream, const char* data, size_t n) {
  wire::Writer w;
  w.u8(static_cast<uint8_t>(stream));
  w.bytes(data, n);
  post(msg::kOutput, w.data());
}

void AgentUpstream::rank_failed(int rank, int status, const std::string& kind, const std::string& text) {
  wire::Writer w;
  w.u32(static_cast<uint32_t>(rank));
  w.i32(status);
  w.str(text);
  w.str(kind);
  post(msg::kRankFailed, w.data());
}

void AgentUpstream::initialised(int rank) { post_rank(msg::kInitialised, rank); }

void AgentUpstream::ended_uninitialised(int rank) { post_rank(msg::kEndedUninitialised, rank); }

void AgentUpstream::post_rank(uint16_t type, int rank) {
  wire::Writer w;
  w.u32(static_cast<uint32_t>(rank));
  post(type, w.data());
}

void AgentUpstream::fence(const std::string& signature, std::string blob,
           std::function<void(bool, std::string)> done) {
  if (whole_fences_fail_ && msg::whole_job(signature)) return done(false, fences_fail_why_);
  fences_[signature].push_back(std::move(done));
  if (tree_ && tree_->carries(signature)) return tree_->contribute(signature, std::move(blob));
  post(msg::kFence, msg::encode_fence(signature, {{self_, std::move(blob)}}));
}

bool AgentUpstream::fence_done(std::string_view payload) {
  auto answer = msg::decode_fence_done(payload);
  if (!answer) return false;
  // The children's hosts hear it first: they wait as this one did.
  if (tree_ && tree_->carries(answer->signature)) tree_->pass_down(payload);
  auto& q = fences_[answer->signature];
  if (q.empty()) return false;
  auto done = std::move(q.front());
  q.pop_front();
  ++answered_[answer->signature];
  done(answer->ok, std::move(answer->all));
  return true;
}

void AgentUpstream::forget_waiters() {
  for (auto& [sig, q] : fences_)
    for (auto& done : q) done = [](bool, std::string) {};
  for (auto& [id, done] : status_waiters_) done = [](int) {};
  for (auto& [id, done] : lookup_waiters_) done = [](int, std::vector<DirectoryEntry>) {};
  for (auto& [id, done] : modex_waiters_) done = [](int, std::string) {};
  for (auto& [id, done] : spawn_waiters_) done = [](int, std::string) {};
}

bool AgentUpstream::fences_fail(std::string_view payload) {
  wire::Reader r(payload);
  auto n = r.u32("fences fail: count");
  if (!n || *n > r.remaining() / 16) return false;
  std::map<std::string, std::pair<uint64_t, std::string>> completed;
  for (uint32_t i = 0; i < *n; ++i) {
    auto sig = r.str("fences fail: signature");
    auto rounds = r.u64("fences fail: rounds");
    auto answer = r.bytes("fences fail: answer");
    if (!sig || !rounds || !answer) return false;
    completed[*sig] = {*rounds, std::move(*answer)};
  }
  auto why = r.str("fences fail: why");
  if (!why) return false;
  whole_fences_fail_ = true;
  fences_fail_why_ = std::move(*why);
  if (tree_) tree_->stop_carrying();
  // Answered after the walk: an answer may start the next fence.
  std::vector<std::pair<std::function<void(bool, std::string)>, std::optional<std::string>>> answers;
  for (auto& [sig, q] : fences_) {
    if (!msg::whole_job(sig)) continue;
    auto it = completed.find(sig);
    for (; !q.empty(); q.pop_front()) {
      uint64_t round = answered_[sig]++;
      std::optional<std::string> data;
      if (it != completed.end() && round + 1 == it->second.first) {
        auto last = msg::decode_fence_done(it->second.second);
        if (last && last->ok) data = std::move(last->all);
      }
      answers.emplace_back(std::move(q.front()), std::move(data));
    }
  }
  log(LogLevel::kDebug, "whole-job fences fail from now on (%zu round(s) waiting here): %s",
      answers.size(), fences_fail_why_.c_str());
  for (auto& [done, data] : answers)
    done(data.has_value(), data ? std::move(*data) : fences_fail_why_);
  return true;
}

bool AgentUpstream::carry_fences(std::string_view payload) {
  wire::Reader r(payload);
  auto n = r.u32("fence tree: count");
  if (!n || !tree_ || *n > r.remaining() / 4) return false;
  std::vector<int> children;
  for (uint32_t i = 0; i < *n; ++i) {
    auto id = r.u32("fence tree: agent");
    if (!id) return false;
    children.push_back(static_cast<int>(*id));
  }
  tree_->carry_fences(
      std::move(children), [this](std::string up) { post(msg::kFence, up); },
      [this](std::string_view down) { fence_done(down); });
  return true;
}

int AgentUpstream::links_fd() const { return tree_ ? tree_->fd() : -1; }

bool AgentUpstream::on_links() {
  if (tree_) tree_->on_readable();
  return true;
}

bool AgentUpstream::tick() {
  auto now = std::chrono::steady_clock::now();
  if (now - last_beat_ >= std::chrono::seconds(1)) {
    last_beat_ = now;
    unreachable_ = unacked_.lost(fd_, kControllerUnacked);
    post(msg::kHeartbeat, "");
  }
  // The controller beats every second too, but its silence alone is no
  // lost controller: one that is stopped (Ctrl-Z, kill -STOP, a debugger,
  // Slurm suspending the job) or busy is silent while its host still
  // acknowledges what this agent sends, and one that died closed the
  // connection (on_readable).  Lost: silent while its host acknowledges
  // nothing (its host or the network between us is gone).  Words not read
  // yet (this agent was busy, a slow start on a loaded host) are not
  // silence.
  if (now - last_heard_ >= kControllerSilence) {
    int unread = 0;
    if (ioctl(fd_, FIONREAD, &unread) == 0 && unread > 0) heard();
  }
  return !unreachable_ || std::chrono::steady_clock::now() - last_heard_ < kControllerSilence;
}

void AgentUpstream::post(uint16_t type, std::string_view payload) {
  auto t = std::chrono::steady_clock::now();
  send_frame(fd_, type, payload);
  if (std::chrono::steady_clock::now() - t > std::chrono::milliseconds(200)) heard();
}

void AgentUpstream::beat_now() {
  last_beat_ = std::chrono::steady_clock::now();
  post(msg::kHeartbeat, "");
}

void AgentUpstream::modex(int rank, std::function<void(int, std::string)> done) {
  uint64_t id = ++next_id_;
  modex_waiters_[id] = std::move(done);
  wire::Writer w;
  w.u64(id);
  w.u32(static_cast<uint32_t>(rank));
  post(msg::kModexRequest, w.data());
}

void AgentUpstream::phase(int p) {
  wire::Writer w;
  w.u8(static_cast<uint8_t>(p));
  post(msg::kPhase, w.data());
}

void AgentUpstream::stdin_consumed(size_t n) {
  wire::Writer w;
  w.u64(n);
  post(msg::kStdinTaken, w.data());
}

}  // namespace accrun::launcher
