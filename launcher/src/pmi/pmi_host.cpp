// pmi_host.cpp — the node agent's PMI service (pmi_host.hpp).
#include "pmi/pmi_host.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace accrun::launcher::pmi {

namespace {

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

bool get_u32(const std::string& in, size_t* pos, uint32_t* v) {
  if (in.size() - *pos < 4) return false;
  *v = 0;
  for (int i = 0; i < 4; ++i) *v |= static_cast<uint32_t>(static_cast<unsigned char>(in[*pos + i])) << (8 * i);
  *pos += 4;
  return true;
}

bool get_str(const std::string& in, size_t* pos, std::string* s) {
  uint32_t n = 0;
  if (!get_u32(in, pos, &n) || in.size() - *pos < n) return false;
  s->assign(in, *pos, n);
  *pos += n;
  return true;
}

}  // namespace

std::string PmiJobSpace::encode(const std::map<std::string, std::string>& kv) {
  std::string out;
  for (const auto& [k, v] : kv) {
    put_u32(out, static_cast<uint32_t>(k.size()));
    out += k;
    put_u32(out, static_cast<uint32_t>(v.size()));
    out += v;
  }
  return out;
}

bool PmiJobSpace::decode(const std::string& blob, std::map<std::string, std::string>* out) {
  size_t pos = 0;
  while (pos < blob.size()) {
    std::string k, v;
    if (!get_str(blob, &pos, &k) || !get_str(blob, &pos, &v)) return false;
    (*out)[std::move(k)] = std::move(v);
  }
  return true;
}

std::optional<std::string> PmiJobSpace::put(int rank, const std::string& key, const std::string& value) {
  if (committed_.count(key))
    return "put of key '" + key + "' after a fence committed it (PMI keys are written once)";
  auto it = pending_.find(key);
  if (it != pending_.end() && it->second.first != rank)
    return "put of key '" + key + "', which rank " + std::to_string(it->second.first) + " put before";
  if (auto err = hold(key, it == pending_.end() ? 0 : key.size() + it->second.second.size(),
                      key.size() + value.size()))
    return err;
  pending_[key] = {rank, value};
  return std::nullopt;
}

std::optional<std::string> PmiJobSpace::put_node(const std::string& key, const std::string& value) {
  auto it = node_.find(key);
  if (auto err = hold(key, it == node_.end() ? 0 : key.size() + it->second.size(),
                      key.size() + value.size()))
    return err;
  node_[key] = value;
  return std::nullopt;
}

std::optional<std::string> PmiJobSpace::hold(const std::string& key, std::size_t old_bytes,
                                             std::size_t new_bytes) {
  if (held_ - old_bytes + new_bytes > kMaxHostBytes)
    return "put of key '" + key + "' would take this host's PMI keys and values past " +
           std::to_string(kMaxHostBytes >> 20) + " MiB";
  held_ = held_ - old_bytes + new_bytes;
  return std::nullopt;
}

void PmiJobSpace::fence(int, std::function<void(bool ok, const std::string& why)> done) {
  if (poisoned_) {
    done(false, *poisoned_);
    return;
  }
  waiting_.push_back(std::move(done));
  if (static_cast<int>(waiting_.size()) < local_ranks_ || routed_) return;
  std::map<std::string, std::string> mine;
  for (auto& [k, rv] : pending_) mine[k] = std::move(rv.second);
  pending_.clear();
  std::string blob = encode(mine);
  if (!events_ || !events_->fence_router) {
    // This host is the whole job.
    committed_.merge(mine);
    complete(true, "");
    return;
  }
  routed_ = true;
  // The answer may come after the job's PMI service is gone (an agent of a
  // tree serves its links after its own ranks ended).
  events_->fence_router(kFenceSignature, std::move(blob),
                        [this, alive = std::weak_ptr<bool>(alive_)](bool ok, std::string all) {
                          if (!alive.expired()) answered(ok, all);
                        });
}

void PmiJobSpace::answered(bool ok, const std::string& all) {
  routed_ = false;
  std::map<std::string, std::string> got;
  if (!ok) {
    complete(false, all.empty() ? "the job's PMI fence failed on another host"
                                : "the job's PMI fence failed: " + all);
  } else if (!decode(all, &got)) {
    complete(false, "the job's PMI fence brought back malformed data");
  } else if (auto failed = got.find(""); failed != got.end()) {
    // Another host's rank failed: this round and every later one fail,
    // here as there.
    told_ = true;
    poison_with(failed->second);
    complete(false, failed->second);
  } else {
    for (auto& [k, v] : got) committed_[k] = std::move(v);
    complete(true, "");
  }
  tell_other_hosts();
}

void PmiJobSpace::complete(bool ok, const std::string& why) {
  auto done = std::move(waiting_);
  waiting_.clear();
  for (auto& d : done) d(ok, why);
}

void PmiJobSpace::poison(int rank, const std::string& what) {
  poison_with("rank " + std::to_string(rank) + (host_.empty() ? "" : " on host " + host_) + " " +
              what);
  tell_other_hosts();
}

void PmiJobSpace::poison_with(const std::string& why) {
  if (poisoned_) return;
  poisoned_ = why;
  // A round already with the router completes through it (the other hosts
  // wait for this host's part); one still gathering here ends now.
  if (!routed_) complete(false, why);
}

void PmiJobSpace::tell_other_hosts() {
  // (Also while this host's part of a round is with the router: the
  // reason is the host's part of the next round, and the host's ranks may
  // all be gone, with nobody here to send it, before that round's answer.)
  if (!poisoned_ || told_ || !events_ || !events_->fence_router) return;
  told_ = true;
  pending_.clear();
  events_->fence_router(kFenceSignature, encode({{"", *poisoned_}}), [](bool, std::string) {});
}

std::optional<std::string> PmiJobSpace::get(const std::string& key) const {
  auto it = committed_.find(key);
  if (it == committed_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> PmiJobSpace::get_node(const std::string& key) const {
  auto it = node_.find(key);
  if (it == node_.end()) return std::nullopt;
  return it->second;
}

void PmiJobSpace::abort(int rank, int code, const std::string& message) {
  poison(rank, "aborted");
  if (events_ && events_->aborted) events_->aborted(rank, code, message);
}

void PmiJobSpace::misuse(int rank, const std::string& message) {
  poison(rank, "used PMI wrongly");
  if (events_ && events_->misused) events_->misused(rank, "used PMI wrongly: " + message);
}

void PmiJobSpace::finalized(int rank) {
  // A fence is the whole job's: none can complete once a rank has left.
  poison(rank, "finalized");
  if (events_ && events_->finalized) events_->finalized(rank);
}

PmiService::PmiService(PmiJobInfo job, int local_ranks, PmiEvents events)
    : job_(std::move(job)), events_(std::move(events)), space_(local_ranks, &events_, job_.host) {}

PmiService::~PmiService() {
  for (auto& s : sockets_) close_socket(*s);
}

Result<int> PmiService::prepare(int rank, Env& env) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return system_error("socketpair for the PMI server");
  fcntl(sv[0], F_SETFL, O_NONBLOCK);
  auto s = std::make_unique<Socket>();
  s->rank = rank;
  s->fd = sv[0];
  Socket* raw = s.get();
  s->conn = std::make_unique<PmiConnection>(rank, &job_, &space_, [raw](std::string_view bytes) {
    if (raw->fd < 0) return;
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = send(raw->fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n > 0) {
        off += static_cast<size_t>(n);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else {
        // The rank does not read its replies (or is gone): its socket is
        // full of them.  A reply cut short would run into the next one, so
        // the connection ends here.
        ::shutdown(raw->fd, SHUT_RDWR);
        raw->unread = true;
        break;
      }
    }
  });
  sockets_.push_back(std::move(s));
  // (An enclosing launcher's PMI variables never reach here:
  // filter_inherited drops them; a -x one is the user's.)
  env["PMI_FD"] = std::to_string(sv[1]);
  env["PMI_RANK"] = std::to_string(rank);
  env["PMI_SIZE"] = std::to_string(job_.size);
  env["PMI_JOBID"] = job_.kvsname;
  return sv[1];
}

std::vector<std::pair<size_t, int>> PmiService::fds() const {
  std::vector<std::pair<size_t, int>> out;
  for (size_t i = 0; i < sockets_.size(); ++i)
    if (sockets_[i]->fd >= 0) out.emplace_back(i, sockets_[i]->fd);
  return out;
}

void PmiService::on_readable(size_t index) {
  if (index >= sockets_.size()) return;
  Socket& s = *sockets_[index];
  char buf[8192];
  // A bounded number of reads a turn: a rank that writes without pause
  // does not hold up the agent's loop (the socket stays readable).
  for (int reads = 0; reads < 16 && s.fd >= 0; ++reads) {
    ssize_t n = read(s.fd, buf, sizeof buf);
    if (n > 0) {
      bool was_new = s.conn->version() == 0;
      bool go_on = s.conn->feed(buf, static_cast<size_t>(n));
      if (was_new && s.conn->version() != 0 && events_.connected) events_.connected(s.rank);
      if (!go_on) {
        close_socket(s);
        return;
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    // EOF (or an error): the rank closed it, usually by exiting.
    if (s.unread)
      space_.poison(s.rank, "left its PMI replies unread until its socket was full");
    else if (!s.conn->closed_cleanly())
      space_.poison(s.rank, "closed its PMI connection without finalize");
    close_socket(s);
    return;
  }
}

void PmiService::close_socket(Socket& s) {
  if (s.fd >= 0) close(s.fd);
  s.fd = -1;
}

}  // namespace accrun::launcher::pmi
