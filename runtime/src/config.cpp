#include "config.hpp"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "accrun/tcp_congestion.hpp"

extern char** environ;  // NOLINT: the process environment, read once at init

namespace accrun::runtime {
namespace {

Result<long> parse_long(const std::string& name, const std::string& v) {
  errno = 0;
  char* end = nullptr;
  long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || errno != 0 || *end != '\0')
    return invalid_argument(name + "='" + v + "': expected an integer");
  return n;
}

}  // namespace

std::vector<std::string> process_environment() {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) out.emplace_back(*e);
  return out;
}

Result<std::vector<int>> parse_id_list(const std::string& s) {
  std::vector<int> ids;
  std::size_t pos = 0;
  while (pos < s.size()) {
    std::size_t comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    std::string item = s.substr(pos, comma - pos);
    auto n = parse_long("id", item);
    if (!n || *n < 0 || *n > 1 << 20) return invalid_argument("'" + s + "': expected ids like 0,1,3");
    ids.push_back(static_cast<int>(*n));
    pos = comma + 1;
  }
  return ids;
}

Result<std::uint64_t> parse_store_size(const std::string& s, std::uint64_t fs_bytes) {
  std::string v = s.empty() ? "50%" : s;
  std::size_t i = 0;
  while (i < v.size() && (std::isdigit(static_cast<unsigned char>(v[i])) || v[i] == '.')) ++i;
  if (i == 0) return invalid_argument("ACCRUN_STORE_SIZE='" + s + "': expected e.g. 512M, 2G or 25%");
  const std::string number = v.substr(0, i);
  char* number_end = nullptr;
  double n = std::strtod(number.c_str(), &number_end);
  if (number_end != number.c_str() + number.size())  // "1.2.3", "."
    return invalid_argument("ACCRUN_STORE_SIZE='" + s + "': '" + number + "' is not a number (e.g. 512M, 2G or 25%)");
  std::string unit = v.substr(i);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double mult = 0;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "K" || unit == "KB" || unit == "KIB") mult = 1024.0;
  else if (unit == "M" || unit == "MB" || unit == "MIB") mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "GB" || unit == "GIB") mult = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "TB" || unit == "TIB") mult = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "%") {
    if (n < 0 || n > 100) return invalid_argument("ACCRUN_STORE_SIZE='" + s + "': a percentage is 0-100");
    return static_cast<std::uint64_t>(static_cast<double>(fs_bytes) * n / 100.0);
  } else {
    return invalid_argument("ACCRUN_STORE_SIZE='" + s + "': unknown unit '" + v.substr(i) +
                            "' (use K, M, G, T or %)");
  }
  // 2^63 bytes and more cannot be counted (nor held by any host).
  if (n * mult >= 9223372036854775808.0)
    return invalid_argument("ACCRUN_STORE_SIZE='" + s + "': too large (less than 8388608T, 2^63 bytes; e.g. 2G)");
  return static_cast<std::uint64_t>(std::llround(n * mult));
}

Result<RuntimeConfig> read_config(const std::vector<std::string>& environment) {
  RuntimeConfig c;
  std::map<std::string, std::string> env;
  for (const auto& kv : environment) {
    auto eq = kv.find('=');
    if (eq != std::string::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  auto get = [&](const char* n) -> const std::string* {
    auto it = env.find(n);
    return it == env.end() ? nullptr : &it->second;
  };
  c.pmix_server = get("PMIX_NAMESPACE") != nullptr;
  struct IntVar { const char* name; int* out; };
  for (IntVar v : {IntVar{"ACCRUN_RANK", &c.rank}, IntVar{"ACCRUN_SIZE", &c.size},
                   IntVar{"ACCRUN_LOCAL_RANK", &c.local_rank}, IntVar{"ACCRUN_LOCAL_SIZE", &c.local_size},
                   IntVar{"ACCRUN_NODE_RANK", &c.node_rank}}) {
    if (const auto* s = get(v.name)) {
      auto n = parse_long(v.name, *s);
      if (!n) return n.status();
      *v.out = static_cast<int>(*n);
    }
  }
  if (const auto* s = get("ACCRUN_HOST")) c.host = *s;
  if (const auto* s = get("ACCRUN_ACCELERATOR_TYPE")) c.accelerator_type = *s;
  if (const auto* s = get("ACCRUN_POD"); s != nullptr && !s->empty()) c.pod = *s;
  if (const auto* s = get("ACCRUN_ZONE"); s != nullptr && !s->empty()) c.zone = *s;
  if (const auto* s = get("ACCRUN_REGION"); s != nullptr && !s->empty()) c.region = *s;
  if (const auto* s = get("ACCRUN_OVERSUBSCRIBED")) c.oversubscribed = *s == "1";
  if (const auto* s = get("ACCRUN_STORE_TRANSPORT"); s != nullptr && !s->empty()) {
    if (*s != "tcp" && *s != "libfabric")
      return invalid_argument("ACCRUN_STORE_TRANSPORT='" + *s + "': expected tcp or libfabric");
    c.store_transport = *s;
  }
  if (const auto* s = get("ACCRUN_STORE_TCP_CONGESTION"); s != nullptr && !s->empty()) {
    if (!valid_tcp_congestion(*s)) {
      return invalid_argument("ACCRUN_STORE_TCP_CONGESTION='" + *s +
                              "': expected a congestion control's name (reno, cubic, bbr, ...) or system");
    }
    c.store_tcp_congestion = *s;
  }
  if (const auto* s = get("ACCRUN_SHM_DIR")) c.shm_dir = *s;
  if (const auto* s = get("ACCRUN_OBJECT_SERVER")) c.object_server = *s;
  if (const auto* s = get("ACCRUN_JOB_ID")) c.job_id = *s;
  if (const auto* s = get("ACCRUN_STORE_SIZE")) {
    c.store_size = *s;
    auto check = parse_store_size(*s, 1);
    if (!check) return check.status();
  }
  if (const auto* s = get("ACCRUN_GROUP_INIT_TIMEOUT")) {
    char* end = nullptr;
    double secs = std::strtod(s->c_str(), &end);
    // !(secs > 0): NaN too, which would make the timeout never end.
    if (s->empty() || *end != '\0' || !(secs > 0) || secs > 86400)
      return invalid_argument("ACCRUN_GROUP_INIT_TIMEOUT='" + *s +
                              "': expected seconds above 0, at most 86400 (a day), e.g. 30");
    c.group_init_timeout_ms = static_cast<int>(std::ceil(secs * 1000));  // 0.0001 s: 1 ms, not none
  }
  if (const auto* s = get("ACCRUN_GROUP_TIMEOUT")) {
    auto t = collectives::parse_group_timeout(*s);
    if (!t) return t.status();
    c.group_timeout_ms = *t;
  }
  // ACCRUN_<RESOURCE>_IDS / _TYPE / _FRACTION for every resource the launcher named.
  const std::string prefix = "ACCRUN_";
  for (const auto& entry : env) {
    const std::string& name = entry.first;  // (a plain reference: lambdas below use it)
    const std::string& value = entry.second;
    if (name.rfind(prefix, 0) != 0) continue;
    auto suffix_is = [&](const std::string& suf) {
      return name.size() > prefix.size() + suf.size() &&
             name.compare(name.size() - suf.size(), suf.size(), suf) == 0;
    };
    auto resource = [&](const std::string& suf) {
      return name.substr(prefix.size(), name.size() - prefix.size() - suf.size());
    };
    if (suffix_is("_IDS")) {
      auto ids = parse_id_list(value);
      if (!ids) return invalid_argument(name + "='" + value + "': expected ids like 0,1,3");
      c.accelerator_ids[resource("_IDS")] = *ids;
    } else if (suffix_is("_FRACTION")) {
      c.fractions[resource("_FRACTION")] = value;
    } else if (suffix_is("_TYPE") && name != "ACCRUN_ACCELERATOR_TYPE") {
      c.accelerator_types[resource("_TYPE")] = value;
    }
  }
  return c;
}

}  // namespace accrun::runtime
