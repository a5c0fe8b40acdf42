// pmi_server.cpp — the PMI-1 and PMI-2 wire protocols (pmi_server.hpp).
#include "pmi/pmi_server.hpp"

#include <cstdio>
#include <cstdlib>
#include <utility>

namespace accrun::launcher::pmi {

namespace {

using Fields = std::vector<std::pair<std::string, std::string>>;

const std::string* find(const Fields& f, std::string_view key) {
  for (const auto& [k, v] : f)
    if (k == key) return &v;
  return nullptr;
}

std::optional<long> to_int(const std::string& s) {
  if (s.empty() || s.size() > 18) return std::nullopt;
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  if (end == nullptr || *end != '\0') return std::nullopt;
  return v;
}

// A PMI-1 value holds no spaces or newlines: a message says the same with
// underscores (as Hydra's "key_X_not_found").
std::string v1_text(std::string s) {
  for (char& c : s)
    if (c == ' ' || c == '\n' || c == '\t' || c == '=') c = '_';
  return s;
}

// Control bytes of a rank's text, shown escaped when accrun prints them.
std::string shown(std::string_view s, size_t max = 200) {
  std::string out;
  for (unsigned char c : s.substr(0, max)) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    }
  }
  if (s.size() > max) out += "...";
  return out;
}

bool key_ok(const std::string& key) {
  return !key.empty() && key.size() <= PmiConnection::kKeyMax;
}

}  // namespace

std::optional<Fields> parse_v1(std::string_view line) {
  Fields out;
  size_t pos = 0;
  while (pos < line.size()) {
    if (line[pos] == ' ') {
      ++pos;
      continue;
    }
    size_t end = line.find(' ', pos);
    if (end == std::string_view::npos) end = line.size();
    std::string_view token = line.substr(pos, end - pos);
    size_t eq = token.find('=');
    if (eq == std::string_view::npos || eq == 0) return std::nullopt;
    out.emplace_back(std::string(token.substr(0, eq)), std::string(token.substr(eq + 1)));
    pos = end;
  }
  if (out.empty()) return std::nullopt;
  return out;
}

std::optional<Fields> parse_v2(std::string_view message) {
  Fields out;
  size_t pos = 0;
  while (pos < message.size()) {
    size_t eq = message.find('=', pos);
    if (eq == std::string_view::npos || eq == pos) return std::nullopt;
    std::string key(message.substr(pos, eq - pos));
    if (key.find(';') != std::string::npos) return std::nullopt;
    std::string value;
    size_t i = eq + 1;
    bool terminated = false;
    while (i < message.size()) {
      if (message[i] == ';') {
        if (i + 1 < message.size() && message[i + 1] == ';') {
          value += ';';
          i += 2;
          continue;
        }
        terminated = true;
        ++i;
        break;
      }
      value += message[i++];
    }
    if (!terminated) return std::nullopt;
    out.emplace_back(std::move(key), std::move(value));
    pos = i;
  }
  if (out.empty()) return std::nullopt;
  return out;
}

std::string process_mapping(const std::vector<int>& node_of_rank) {
  // Runs of consecutive ranks on one node, then runs of equal length on
  // consecutive nodes merged into one (start node, nodes, ranks per node).
  struct Block {
    int start, count, per;
  };
  std::vector<Block> blocks;
  size_t i = 0;
  while (i < node_of_rank.size()) {
    size_t j = i;
    while (j < node_of_rank.size() && node_of_rank[j] == node_of_rank[i]) ++j;
    int node = node_of_rank[i], per = static_cast<int>(j - i);
    if (!blocks.empty() && blocks.back().per == per && blocks.back().start + blocks.back().count == node) {
      ++blocks.back().count;
    } else {
      blocks.push_back({node, 1, per});
    }
    i = j;
  }
  std::string out = "(vector";
  for (const Block& b : blocks)
    out += ",(" + std::to_string(b.start) + "," + std::to_string(b.count) + "," + std::to_string(b.per) + ")";
  return out + ")";
}

PmiConnection::PmiConnection(int rank, const PmiJobInfo* job, PmiHost* host, Send send)
    : rank_(rank), job_(job), host_(host), send_(std::move(send)) {}

bool PmiConnection::feed(const char* data, size_t n) {
  if (state_ == State::kDead) return false;
  if (state_ == State::kAborted) return true;  // whatever follows an abort is ignored
  in_.append(data, n);
  for (;;) {
    if (state_ == State::kDead) return false;
    if (state_ == State::kAborted) return true;
    if (version_ != 2) {
      size_t nl = in_.find('\n');
      if (nl == std::string::npos) {
        if (in_.size() > kLineMax) return fail("error", "a PMI-1 line longer than " + std::to_string(kLineMax) + " bytes");
        return true;
      }
      std::string line = in_.substr(0, nl);
      in_.erase(0, nl + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (!handle_v1(line)) return false;
    } else {
      if (in_.size() < 6) return true;
      std::string head = in_.substr(0, 6);
      size_t a = head.find_first_not_of(' ');
      size_t b = head.find_last_not_of(' ');
      std::optional<long> len;
      if (a != std::string::npos) len = to_int(head.substr(a, b - a + 1));
      if (!len || *len <= 0)
        return fail("error", "a PMI-2 message must start with its length in 6 characters, not '" + shown(head) + "'");
      if (static_cast<size_t>(*len) > kMessageMax)
        return fail("error", "a PMI-2 message of " + std::to_string(*len) + " bytes (at most " +
                                 std::to_string(kMessageMax) + ")");
      if (in_.size() < 6 + static_cast<size_t>(*len)) return true;
      std::string message = in_.substr(6, static_cast<size_t>(*len));
      in_.erase(0, 6 + static_cast<size_t>(*len));
      if (!handle_v2(message)) return false;
    }
  }
}

void PmiConnection::reply_v1(const std::string& text) { send_(text + "\n"); }

void PmiConnection::reply_found(const std::string& response, const std::optional<std::string>& value) {
  if (value) {
    reply_v2({{"cmd", response}, {"found", "TRUE"}, {"value", *value}, {"rc", "0"}});
  } else {
    reply_v2({{"cmd", response}, {"found", "FALSE"}, {"rc", "0"}});
  }
}

void PmiConnection::reply_v2(const Fields& f) {
  std::string body;
  for (size_t i = 0; i < f.size(); ++i) {
    body += f[i].first + "=";
    for (char c : f[i].second) body += c == ';' ? std::string(";;") : std::string(1, c);
    body += ";";
    if (i == 0 && !thrid_.empty()) body += "thrid=" + thrid_ + ";";
  }
  char head[16];
  std::snprintf(head, sizeof head, "%6zu", body.size());
  send_(std::string(head, 6) + body);
}

bool PmiConnection::fail(const std::string& reply_cmd, const std::string& why) {
  if (version_ == 2) {
    reply_v2({{"cmd", reply_cmd}, {"rc", "-1"}, {"errmsg", why}});
  } else {
    reply_v1("cmd=" + reply_cmd + " rc=-1 msg=" + v1_text(why));
  }
  state_ = State::kDead;
  host_->misuse(rank_, why);
  return false;
}

std::optional<std::string> PmiConnection::put(const std::string& key, const std::string& value) {
  if (!key_ok(key)) return "a key of 1 to " + std::to_string(kKeyMax) + " bytes is required, got '" + shown(key) + "'";
  if (value.size() > kValueMax)
    return "the value of key '" + shown(key) + "' has " + std::to_string(value.size()) + " bytes (at most " +
           std::to_string(kValueMax) + ")";
  if (state_ == State::kInFence) return "put of key '" + shown(key) + "' while the rank is in a fence";
  return host_->put(rank_, key, value);
}

bool PmiConnection::start_fence(const std::string& reply_cmd) {
  if (state_ == State::kInFence)
    return fail(reply_cmd, "the rank entered a fence (" + std::string(version_ == 2 ? "kvs-fence" : "barrier_in") +
                               ") twice without waiting for the first");
  state_ = State::kInFence;
  std::weak_ptr<bool> alive = alive_;
  std::string thrid = thrid_;
  host_->fence(rank_, [this, alive, reply_cmd, thrid](bool ok, const std::string& why) {
    auto live = alive.lock();
    if (!live || !*live || state_ != State::kInFence) return;
    state_ = State::kReady;
    if (version_ == 2) {
      std::string saved = std::exchange(thrid_, thrid);
      if (ok) {
        reply_v2({{"cmd", reply_cmd}, {"rc", "0"}});
      } else {
        reply_v2({{"cmd", reply_cmd}, {"rc", "-1"}, {"errmsg", why}});
      }
      thrid_ = saved;
    } else {
      reply_v1(ok ? "cmd=" + reply_cmd : "cmd=" + reply_cmd + " rc=-1 msg=" + v1_text(why));
    }
  });
  return true;
}

std::optional<std::string> PmiConnection::job_attr(const std::string& key) const {
  if (key == "PMI_process_mapping") return job_->process_mapping;
  if (key == "universeSize") return std::to_string(job_->universe_size);
  return std::nullopt;
}

bool PmiConnection::handle_init(const Fields& f) {
  const std::string* v = find(f, "pmi_version");
  const std::string* sub = find(f, "pmi_subversion");
  std::optional<long> ver = v ? to_int(*v) : std::nullopt;
  if (!ver || !sub || (*ver != 1 && *ver != 2)) {
    version_ = 1;
    reply_v1("cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=-1 msg=" +
             v1_text("accrun serves PMI versions 1 and 2"));
    state_ = State::kDead;
    host_->misuse(rank_, "init asked for PMI version '" + (v ? shown(*v) : std::string("?")) +
                             "' (accrun serves versions 1 and 2)");
    return false;
  }
  version_ = static_cast<int>(*ver);
  state_ = State::kReady;
  reply_v1(version_ == 2 ? "cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0"
                         : "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0");
  return true;
}

bool PmiConnection::handle_v1(const std::string& line) {
  auto parsed = parse_v1(line);
  if (!parsed || parsed->front().first != "cmd")
    return fail("error", "malformed PMI-1 line '" + shown(line) + "' (expected cmd=NAME key=value ...)");
  const Fields& f = *parsed;
  const std::string& cmd = f.front().second;
  if (state_ == State::kNew) {
    if (cmd != "init") return fail("error", "the first PMI command must be init, not '" + shown(cmd) + "'");
    return handle_init(f);
  }
  if (state_ == State::kFinalized) return fail("error", "command '" + shown(cmd) + "' after finalize");
  if (cmd == "init") return fail("response_to_init", "init sent twice");
  if (cmd == "get_maxes") {
    reply_v1("cmd=maxes kvsname_max=" + std::to_string(kKvsnameMax) + " keylen_max=" + std::to_string(kKeyMax) +
             " vallen_max=" + std::to_string(kValueMax) + " rc=0");
  } else if (cmd == "get_appnum") {
    reply_v1("cmd=appnum appnum=" + std::to_string(job_->appnum) + " rc=0");
  } else if (cmd == "get_my_kvsname") {
    reply_v1("cmd=my_kvsname kvsname=" + job_->kvsname + " rc=0");
  } else if (cmd == "get_universe_size") {
    reply_v1("cmd=universe_size size=" + std::to_string(job_->universe_size) + " rc=0");
  } else if (cmd == "put") {
    const std::string* kvs = find(f, "kvsname");
    const std::string* key = find(f, "key");
    const std::string* value = find(f, "value");
    if (!kvs || !key || !value) return fail("put_result", "put needs kvsname, key and value");
    if (*kvs != job_->kvsname)
      return fail("put_result", "put into kvs '" + shown(*kvs) + "', not this job's '" + job_->kvsname + "'");
    if (auto err = put(*key, *value)) return fail("put_result", *err);
    reply_v1("cmd=put_result rc=0 msg=success");
  } else if (cmd == "get") {
    const std::string* kvs = find(f, "kvsname");
    const std::string* key = find(f, "key");
    if (!kvs || !key) return fail("get_result", "get needs kvsname and key");
    if (*kvs != job_->kvsname) {
      reply_v1("cmd=get_result rc=-1 msg=" + v1_text("no kvs " + shown(*kvs)));
      return true;
    }
    std::optional<std::string> value = job_attr(*key);
    if (!value) value = host_->get(*key);
    if (value) {
      reply_v1("cmd=get_result rc=0 msg=success value=" + *value);
    } else {
      reply_v1("cmd=get_result rc=-1 msg=key_" + v1_text(shown(*key)) + "_not_found");
    }
  } else if (cmd == "barrier_in") {
    return start_fence("barrier_out");
  } else if (cmd == "finalize") {
    if (state_ == State::kInFence) return fail("finalize_ack", "finalize while in a barrier");
    state_ = State::kFinalized;
    reply_v1("cmd=finalize_ack rc=0");
    host_->finalized(rank_);
  } else if (cmd == "abort") {
    const std::string* code = find(f, "exitcode");
    std::optional<long> c = code ? to_int(*code) : std::nullopt;
    // The socket stays open: the client may wait on it until it is
    // killed, and a closed one only adds a "readline failed" to its output.
    state_ = State::kAborted;
    host_->abort(rank_, c ? static_cast<int>(*c) : 1, "");
    return true;
  } else if (cmd == "publish_name" || cmd == "unpublish_name" || cmd == "lookup_name") {
    std::string reply = cmd == "publish_name" ? "publish_result" : cmd == "unpublish_name" ? "unpublish_result"
                                                                                           : "lookup_result";
    reply_v1("cmd=" + reply + " rc=-1 msg=" + v1_text("accrun serves name publishing through PMIx only"));
  } else {
    return fail("error", "unknown PMI-1 command '" + shown(cmd) + "'");
  }
  return true;
}

bool PmiConnection::handle_v2(const std::string& message) {
  auto parsed = parse_v2(message);
  if (!parsed || parsed->front().first != "cmd")
    return fail("error", "malformed PMI-2 message '" + shown(message) + "' (expected cmd=NAME;key=value;...;)");
  const Fields& f = *parsed;
  const std::string& cmd = f.front().second;
  const std::string* thrid = find(f, "thrid");
  thrid_ = thrid ? *thrid : std::string();
  std::string response = cmd + "-response";
  if (state_ == State::kFinalized) return fail(response, "command '" + shown(cmd) + "' after finalize");
  if (cmd == "fullinit") {
    const std::string* r = find(f, "pmirank");
    std::optional<long> claimed = r ? to_int(*r) : std::nullopt;
    if (r && (!claimed || (*claimed != rank_ && *claimed != -1)))
      return fail(response, "fullinit names rank '" + shown(*r) + "', but this socket is rank " + std::to_string(rank_));
    reply_v2({{"cmd", response},
              {"pmi-version", "2"},
              {"pmi-subversion", "0"},
              {"rank", std::to_string(rank_)},
              {"size", std::to_string(job_->size)},
              {"appnum", std::to_string(job_->appnum)},
              {"debugged", "FALSE"},
              {"pmiverbose", "FALSE"},
              {"rc", "0"}});
  } else if (cmd == "job-getid") {
    reply_v2({{"cmd", response}, {"jobid", job_->kvsname}, {"rc", "0"}});
  } else if (cmd == "info-getjobattr") {
    const std::string* key = find(f, "key");
    if (!key) return fail(response, "info-getjobattr needs a key");
    std::optional<std::string> value = job_attr(*key);
    reply_found(response, value);
  } else if (cmd == "info-putnodeattr") {
    const std::string* key = find(f, "key");
    const std::string* value = find(f, "value");
    if (!key || !value || !key_ok(*key) || value->size() > kValueMax)
      return fail(response, "info-putnodeattr needs a key of 1 to " + std::to_string(kKeyMax) +
                                " bytes and a value of at most " + std::to_string(kValueMax));
    if (auto err = host_->put_node(*key, *value)) return fail(response, *err);
    reply_v2({{"cmd", response}, {"rc", "0"}});
  } else if (cmd == "info-getnodeattr") {
    const std::string* key = find(f, "key");
    if (!key) return fail(response, "info-getnodeattr needs a key");
    std::optional<std::string> value = host_->get_node(*key);
    // A waiting get is answered at once too: node attributes are put
    // before the fence that readers wait behind, or never.
    reply_found(response, value);
  } else if (cmd == "kvs-put") {
    const std::string* key = find(f, "key");
    const std::string* value = find(f, "value");
    if (!key || !value) return fail(response, "kvs-put needs a key and a value");
    if (auto err = put(*key, *value)) return fail(response, *err);
    reply_v2({{"cmd", response}, {"rc", "0"}});
  } else if (cmd == "kvs-get") {
    const std::string* key = find(f, "key");
    const std::string* jobid = find(f, "jobid");
    if (!key) return fail(response, "kvs-get needs a key");
    if (jobid && !jobid->empty() && *jobid != job_->kvsname) {
      reply_v2({{"cmd", response}, {"found", "FALSE"}, {"rc", "-1"}, {"errmsg", "no job " + shown(*jobid)}});
      return true;
    }
    std::optional<std::string> value = host_->get(*key);
    reply_found(response, value);
  } else if (cmd == "kvs-fence") {
    return start_fence(response);
  } else if (cmd == "finalize") {
    if (state_ == State::kInFence) return fail(response, "finalize while in a fence");
    state_ = State::kFinalized;
    reply_v2({{"cmd", response}, {"rc", "0"}});
    host_->finalized(rank_);
  } else if (cmd == "abort") {
    const std::string* msg = find(f, "msg");
    state_ = State::kAborted;
    host_->abort(rank_, 1, msg ? shown(*msg, 1024) : std::string());
    return true;
  } else if (cmd == "name-publish" || cmd == "name-unpublish" || cmd == "name-lookup" || cmd == "spawn" ||
             cmd == "job-connect" || cmd == "job-disconnect") {
    reply_v2({{"cmd", response}, {"rc", "-1"}, {"errmsg", "accrun does not serve " + cmd + " over PMI-2"}});
  } else if (cmd == "init") {
    return fail(response, "init sent twice");
  } else {
    return fail(response, "unknown PMI-2 command '" + shown(cmd) + "'");
  }
  return true;
}

}  // namespace accrun::launcher::pmi
