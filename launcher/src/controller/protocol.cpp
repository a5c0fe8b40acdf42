// protocol.cpp — the kLaunch payload (protocol.hpp).
#include "controller/protocol.hpp"

#include <charconv>
#include <climits>
#include <csignal>

#include "wire/codec.hpp"

namespace accrun::launcher::msg {

std::string encode_launch(int host, const Plan& plan, const RunConfig& config) {
  wire::Writer w;
  w.u32(static_cast<uint32_t>(host));
  w.u32(static_cast<uint32_t>(plan.hosts.size()));
  for (const auto& h : plan.hosts) w.str(h.inventory.host);
  w.u32(static_cast<uint32_t>(plan.ranks.size()));
  for (const auto& r : plan.ranks) {
    w.u32(static_cast<uint32_t>(r.host));
    w.u32(static_cast<uint32_t>(r.local_rank));
    w.str(r.cpus);
    w.string_map(r.env);
  }
  w.boolean(plan.oversubscribed);
  w.string_vector(config.command);
  w.boolean(config.wdir.has_value());
  w.str(config.wdir.value_or(""));
  w.boolean(config.wdir_soft);
  w.boolean(config.tag_output);
  w.boolean(config.output_dir.has_value());
  w.str(config.output_dir.value_or(""));
  w.u8(static_cast<uint8_t>(config.stdin_mode));
  w.i32(config.stdin_rank);
  w.boolean(config.stdin_pushed);
  w.f64(config.kill_grace_s);
  w.f64(config.timeout_s);
  w.u8(static_cast<uint8_t>(config.on_failure));
  w.boolean(config.report_bindings);
  w.boolean(config.hup_ignored);
  w.boolean(config.bind);
  w.str(config.jobid);
  w.u32(static_cast<uint32_t>(config.exports.size()));
  for (const auto& [name, value] : config.exports) {
    w.str(name);
    w.boolean(value.has_value());
    w.str(value.value_or(""));
  }
  w.u8(static_cast<uint8_t>(config.mpi));
  w.u32(static_cast<uint32_t>(config.universe));
  return w.take();
}

Result<Launch> decode_launch(std::string_view payload) {
  wire::Reader r(payload);
  Launch l;
#define ACCRUN_READ(var, call)          \
  do {                                  \
    auto v_ = (call);                   \
    if (!v_) return v_.status();        \
    var = *v_;                          \
  } while (0)
  uint32_t host = 0, nhosts = 0, nranks = 0;
  ACCRUN_READ(host, r.u32("launch: host"));
  ACCRUN_READ(nhosts, r.u32("launch: hosts"));
  if (nhosts > r.remaining()) return invalid_argument("launch: more hosts than bytes");
  for (uint32_t i = 0; i < nhosts; ++i) {
    HostSlots h;
    ACCRUN_READ(h.inventory.host, r.str("launch: host name"));
    l.plan.hosts.push_back(std::move(h));
  }
  if (host >= nhosts) return invalid_argument("launch: host index out of range");
  l.host = static_cast<int>(host);
  ACCRUN_READ(nranks, r.u32("launch: ranks"));
  if (nranks > r.remaining()) return invalid_argument("launch: more ranks than bytes");
  for (uint32_t i = 0; i < nranks; ++i) {
    RankPlan rp;
    rp.rank = static_cast<int>(i);
    uint32_t rh = 0, lr = 0;
    ACCRUN_READ(rh, r.u32("launch: rank host"));
    if (rh >= nhosts) return invalid_argument("launch: a rank's host is out of range");
    rp.host = static_cast<int>(rh);
    ACCRUN_READ(lr, r.u32("launch: local rank"));
    rp.local_rank = static_cast<int>(lr);
    ACCRUN_READ(rp.cpus, r.str("launch: cpus"));
    ACCRUN_READ(rp.env, r.string_map("launch: env"));
    l.plan.ranks.push_back(std::move(rp));
  }
  ACCRUN_READ(l.plan.oversubscribed, r.boolean("launch: oversubscribed"));
  RunConfig& c = l.config;
  ACCRUN_READ(c.command, r.string_vector("launch: command"));
  bool has = false;
  std::string text;
  ACCRUN_READ(has, r.boolean("launch: wdir"));
  ACCRUN_READ(text, r.str("launch: wdir"));
  if (has) c.wdir = text;
  ACCRUN_READ(c.wdir_soft, r.boolean("launch: wdir soft"));
  ACCRUN_READ(c.tag_output, r.boolean("launch: tag"));
  ACCRUN_READ(has, r.boolean("launch: output dir"));
  ACCRUN_READ(text, r.str("launch: output dir"));
  if (has) c.output_dir = text;
  uint8_t mode = 0;
  ACCRUN_READ(mode, r.u8("launch: stdin"));
  if (mode > static_cast<uint8_t>(StdinMode::kRank)) return invalid_argument("launch: bad stdin mode");
  c.stdin_mode = static_cast<StdinMode>(mode);
  ACCRUN_READ(c.stdin_rank, r.i32("launch: stdin rank"));
  ACCRUN_READ(c.stdin_pushed, r.boolean("launch: stdin pushed"));
  ACCRUN_READ(c.kill_grace_s, r.f64("launch: kill grace"));
  ACCRUN_READ(c.timeout_s, r.f64("launch: timeout"));
  if (!(c.timeout_s >= 0)) return invalid_argument("launch: bad timeout");
  ACCRUN_READ(mode, r.u8("launch: on failure"));
  if (mode > static_cast<uint8_t>(OnFailure::kContinue)) return invalid_argument("launch: bad failure policy");
  c.on_failure = static_cast<OnFailure>(mode);
  ACCRUN_READ(c.report_bindings, r.boolean("launch: report bindings"));
  ACCRUN_READ(c.hup_ignored, r.boolean("launch: hangup ignored"));
  ACCRUN_READ(c.bind, r.boolean("launch: bind"));
  ACCRUN_READ(c.jobid, r.str("launch: job id"));
  if (c.jobid.empty() || c.jobid.size() > 32 || c.jobid.find_first_not_of("0123456789abcdef") != std::string::npos)
    return invalid_argument("launch: bad job id");
  uint32_t nexports = 0;
  ACCRUN_READ(nexports, r.u32("launch: exports"));
  if (nexports > r.remaining()) return invalid_argument("launch: more exports than bytes");
  for (uint32_t i = 0; i < nexports; ++i) {
    std::string name, value;
    ACCRUN_READ(name, r.str("launch: export name"));
    ACCRUN_READ(has, r.boolean("launch: export"));
    ACCRUN_READ(value, r.str("launch: export value"));
    c.exports.emplace_back(name, has ? std::optional<std::string>(value) : std::nullopt);
  }
  ACCRUN_READ(mode, r.u8("launch: mpi"));
  if (mode > static_cast<uint8_t>(MpiMode::kPmi)) return invalid_argument("launch: bad mpi mode");
  c.mpi = static_cast<MpiMode>(mode);
  uint32_t universe = 0;
  ACCRUN_READ(universe, r.u32("launch: universe"));
  if (universe > static_cast<uint32_t>(INT32_MAX)) return invalid_argument("launch: bad universe size");
  c.universe = static_cast<int>(universe);
#undef ACCRUN_READ
  if (Status s = r.expect_end("launch"); !s) return s;
  c.host = l.host;
  return l;
}

namespace {

void write_apps(wire::Writer& w, const std::vector<SpawnApp>& apps) {
  w.u32(static_cast<uint32_t>(apps.size()));
  for (const SpawnApp& a : apps) {
    w.str(a.cmd);
    w.string_vector(a.argv);
    w.string_vector(a.env);
    w.str(a.cwd);
    w.i32(a.maxprocs);
    w.string_map(a.info);
  }
}

Status read_apps(wire::Reader& r, std::vector<SpawnApp>* apps) {
  auto n = r.u32("spawn: apps");
  if (!n) return n.status();
  if (*n > r.remaining()) return invalid_argument("spawn: more apps than bytes");
  for (uint32_t i = 0; i < *n; ++i) {
    SpawnApp a;
    auto cmd = r.str("spawn: cmd");
    auto argv = r.string_vector("spawn: argv");
    auto env = r.string_vector("spawn: env");
    auto cwd = r.str("spawn: cwd");
    auto maxprocs = r.i32("spawn: maxprocs");
    auto info = r.string_map("spawn: app info");
    if (!cmd || !argv || !env || !cwd || !maxprocs || !info) return invalid_argument("spawn: malformed app");
    if (*maxprocs < 0) return invalid_argument("spawn: negative process count");
    a.cmd = std::move(*cmd);
    a.argv = std::move(*argv);
    a.env = std::move(*env);
    a.cwd = std::move(*cwd);
    a.maxprocs = *maxprocs;
    a.info = std::move(*info);
    apps->push_back(std::move(a));
  }
  return Status::ok();
}

}  // namespace

std::optional<FenceMembers> parse_signature(std::string_view signature) {
  if (size_t colon = signature.find(':'); colon != std::string_view::npos) signature.remove_prefix(colon + 1);
  FenceMembers out;
  if (signature == "*") {
    out.all = true;
    return out;
  }
  if (signature.empty()) return std::nullopt;
  for (size_t pos = 0; pos <= signature.size();) {
    size_t comma = std::min(signature.find(',', pos), signature.size());
    int id = 0;
    auto [end, ec] = std::from_chars(signature.data() + pos, signature.data() + comma, id);
    if (ec != std::errc() || end != signature.data() + comma || id < 0) return std::nullopt;
    out.ids.push_back(id);
    pos = comma + 1;
  }
  return out;
}

std::string encode_fence(const std::string& signature, const std::vector<std::pair<int, std::string>>& parts) {
  wire::Writer w;
  w.str(signature);
  w.u32(static_cast<uint32_t>(parts.size()));
  for (const auto& [agent, blob] : parts) {
    w.u32(static_cast<uint32_t>(agent));
    w.bytes(blob.data(), blob.size());
  }
  return w.take();
}

bool whole_job(std::string_view signature) {
  auto members = parse_signature(signature);
  return members && members->all;
}

std::string encode_fence_done(const std::string& signature, bool ok, std::string_view all) {
  wire::Writer w;
  w.str(signature);
  w.boolean(ok);
  w.bytes(all.data(), all.size());
  return w.take();
}

std::optional<FenceDone> decode_fence_done(std::string_view payload) {
  wire::Reader r(payload);
  auto sig = r.str("fence: signature");
  auto ok = r.boolean("fence: ok");
  auto all = r.bytes("fence: data");
  if (!sig || !ok || !all) return std::nullopt;
  return FenceDone{std::move(*sig), *ok, std::move(*all)};
}

Result<FenceParts> decode_fence(std::string_view payload) {
  wire::Reader r(payload);
  FenceParts out;
  auto sig = r.str("fence: signature");
  auto n = r.u32("fence: count");
  if (!sig || !n) return invalid_argument("malformed fence");
  out.signature = std::move(*sig);
  for (uint32_t i = 0; i < *n; ++i) {
    auto agent = r.u32("fence: agent");
    auto blob = r.bytes("fence: data");
    if (!agent || !blob || *agent > INT32_MAX) return invalid_argument("malformed fence");
    out.parts.emplace_back(static_cast<int>(*agent), std::move(*blob));
  }
  if (Status s = r.expect_end("fence"); !s) return s;
  return out;
}

std::string encode_spawn_request(uint64_t id, const SpawnRequest& request) {
  wire::Writer w;
  w.u64(id);
  w.u32(static_cast<uint32_t>(request.requester));
  w.str(request.who);
  w.string_map(request.info);
  write_apps(w, request.apps);
  return w.take();
}

Result<std::pair<uint64_t, SpawnRequest>> decode_spawn_request(std::string_view payload) {
  wire::Reader r(payload);
  SpawnRequest req;
  auto id = r.u64("spawn: id");
  auto requester = r.u32("spawn: requester");
  auto who = r.str("spawn: who");
  auto info = r.string_map("spawn: info");
  if (!id || !requester || !who || !info) return invalid_argument("spawn: malformed request");
  req.requester = static_cast<int>(*requester);
  req.who = std::move(*who);
  req.info = std::move(*info);
  if (Status s = read_apps(r, &req.apps); !s) return s;
  if (Status s = r.expect_end("spawn"); !s) return s;
  return std::make_pair(*id, std::move(req));
}

std::string encode_spawn_launch(const SpawnLaunch& launch) {
  wire::Writer w;
  w.u32(static_cast<uint32_t>(launch.k));
  w.str(launch.nspace);
  w.u32(static_cast<uint32_t>(launch.base));
  w.u32(static_cast<uint32_t>(launch.requester));
  w.u32(static_cast<uint32_t>(launch.spawner));
  w.str(launch.who);
  write_apps(w, launch.apps);
  w.u32(static_cast<uint32_t>(launch.host_of.size()));
  for (size_t i = 0; i < launch.host_of.size(); ++i) {
    w.u32(static_cast<uint32_t>(launch.host_of[i]));
    w.u32(static_cast<uint32_t>(launch.app_of[i]));
  }
  return w.take();
}

Result<SpawnLaunch> decode_spawn_launch(std::string_view payload) {
  wire::Reader r(payload);
  SpawnLaunch l;
  auto k = r.u32("spawn launch: k");
  auto nspace = r.str("spawn launch: nspace");
  auto base = r.u32("spawn launch: base");
  auto requester = r.u32("spawn launch: requester");
  auto spawner = r.u32("spawn launch: spawner");
  auto who = r.str("spawn launch: who");
  if (!k || !nspace || !base || !requester || !spawner || !who) return invalid_argument("spawn launch: malformed");
  l.requester = static_cast<int>(*requester);
  if (!is_spawned_id(static_cast<int>(*base)) || *base > INT32_MAX) return invalid_argument("spawn launch: bad base id");
  l.k = static_cast<int>(*k);
  l.nspace = std::move(*nspace);
  l.base = static_cast<int>(*base);
  l.spawner = static_cast<int>(*spawner);
  l.who = std::move(*who);
  if (Status s = read_apps(r, &l.apps); !s) return s;
  auto n = r.u32("spawn launch: processes");
  if (!n) return n.status();
  if (*n > r.remaining() || *n > static_cast<uint32_t>(INT32_MAX) - *base)
    return invalid_argument("spawn launch: more processes than bytes");
  for (uint32_t i = 0; i < *n; ++i) {
    auto h = r.u32("spawn launch: host");
    auto a = r.u32("spawn launch: app");
    if (!h || !a || *a >= l.apps.size()) return invalid_argument("spawn launch: bad process entry");
    l.host_of.push_back(static_cast<int>(*h));
    l.app_of.push_back(static_cast<int>(*a));
  }
  if (Status s = r.expect_end("spawn launch"); !s) return s;
  return l;
}

std::string encode_signal_procs(int sig, bool stop, const std::vector<int>& ids) {
  wire::Writer w;
  w.i32(sig);
  w.boolean(stop);
  w.u32(static_cast<uint32_t>(ids.size()));
  for (int id : ids) w.u32(static_cast<uint32_t>(id));
  return w.take();
}

Result<SignalProcs> decode_signal_procs(std::string_view payload) {
  wire::Reader r(payload);
  SignalProcs out;
  auto sig = r.i32("signal procs: signal");
  auto stop = r.boolean("signal procs: stop");
  auto n = r.u32("signal procs: count");
  if (!sig || !stop || !n || *n > r.remaining() || *sig <= 0 || *sig >= NSIG)
    return invalid_argument("signal procs: malformed");
  out.sig = *sig;
  out.stop = *stop;
  for (uint32_t i = 0; i < *n; ++i) {
    auto id = r.u32("signal procs: id");
    if (!id || *id > INT32_MAX) return invalid_argument("signal procs: bad id");
    out.ids.push_back(static_cast<int>(*id));
  }
  if (Status s = r.expect_end("signal procs"); !s) return s;
  return out;
}

}  // namespace accrun::launcher::msg
