// Hostfiles and host lists: the grammar of accrun-hostfile(5).
#include "accrun/hostfile.hpp"
#include "accrun/strings.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

#include "accrun/detect.hpp"

namespace accrun::hostfiles {
namespace {

// A range line may not expand to more hosts than this: a typo such as
// node[1-100000000] is refused instead of eating memory.
constexpr std::size_t kMaxExpansion = 1'000'000;

std::string lower(std::string_view s) { return accrun::ascii_lower(s); }

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

std::optional<long long> to_whole(std::string_view s) {
  if (s.empty()) return std::nullopt;
  long long v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// One [..] group of a host expression: the numbers it stands for, as text.
Result<std::vector<std::string>> expand_group(std::string_view body, std::string_view expr) {
  auto malformed = [&](const std::string& why) {
    return invalid_argument("malformed host range '" + std::string(expr) + "': " + why);
  };
  std::vector<std::string> out;
  if (body.empty()) return malformed("empty brackets (write e.g. node[01-04])");
  std::size_t start = 0;
  while (start <= body.size()) {
    std::size_t comma = body.find(',', start);
    std::string_view item = body.substr(start, comma == std::string_view::npos ? body.npos : comma - start);
    if (item.empty()) return malformed("empty item between commas");
    std::size_t dash = item.find('-');
    std::string_view lo_s = item.substr(0, dash);
    std::string_view hi_s = dash == std::string_view::npos ? lo_s : item.substr(dash + 1);
    auto lo = to_whole(lo_s);
    auto hi = to_whole(hi_s);
    auto digits = [](std::string_view t) {
      return std::all_of(t.begin(), t.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
    };
    if (!lo || !hi || !digits(lo_s) || !digits(hi_s)) {
      return malformed("'" + std::string(item) + "' is not a number or a range A-B of numbers");
    }
    if (*lo > *hi) {
      return malformed(std::string(lo_s) + " is more than " + std::string(hi_s) + " (write the smaller first)");
    }
    if (static_cast<std::size_t>(*hi - *lo) + out.size() >= kMaxExpansion) {
      return malformed("expands to more than " + std::to_string(kMaxExpansion) + " hosts");
    }
    // Zero padding: as many digits as the lower bound was written with.
    const std::size_t width = lo_s.size();
    for (long long v = *lo; v <= *hi; ++v) {
      std::string n = std::to_string(v);
      if (n.size() < width) n.insert(0, width - n.size(), '0');
      out.push_back(std::move(n));
    }
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

const std::vector<std::string>& known_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k = {"slots", "max_slots", "gpus", "resources", "accelerator_type",
                                  "pod", "zone", "region", "worker"};
    for (const auto& r : detect::resource_names()) k.push_back(r);
    return k;
  }();
  return keys;
}

// Splits a -H list at the commas that are not inside brackets.
std::vector<std::string_view> split_top_level(std::string_view s) {
  std::vector<std::string_view> out;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '[') ++depth;
    if (s[i] == ']') --depth;
    if (s[i] == ',' && depth == 0) {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  out.push_back(s.substr(start));
  return out;
}

// Applies one key=value field to `e`; `seen` catches repeated keys.
Status apply_field(std::string_view field, HostEntry& e, std::set<std::string>& seen) {
  std::size_t eq = field.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    return invalid_argument("'" + std::string(field) +
                            "' is not key=value (e.g. slots=8; a host name has no blanks)");
  }
  std::string key(field.substr(0, eq));
  std::string value(field.substr(eq + 1));
  if (value.empty()) return invalid_argument("key '" + key + "' has no value");

  // A resource name used as a key: TPU=4.
  static const std::set<std::string> kPlainKeys = {"slots", "max_slots", "gpus", "resources",
                                                   "accelerator_type", "pod", "zone", "region", "worker"};
  std::optional<std::string> resource;
  if (kPlainKeys.count(key) == 0) {
    // Resource names as keys are written exactly (TPU=4); "gpu=8" is far
    // more likely a misspelt "gpus=8" than a GPU count.
    auto r = detect::canonical_resource(key);
    if (!r || *r != key) {
      std::string msg = "unknown key '" + key + "'";
      std::optional<std::string> near;
      if (lower(key) == "gpu") near = "gpus";
      else if (r) near = *r;
      else near = closest_match(key, known_keys());
      if (near) msg += " (did you mean '" + *near + "'?)";
      else msg += " (keys: slots, gpus, resources, accelerator_type, pod, zone, region, worker)";
      return invalid_argument(msg);
    }
    resource = *r;
  }
  const std::string seen_key = resource ? "resource " + *resource : key;
  if (key != "resources" && !seen.insert(seen_key).second) {
    return invalid_argument("key '" + key + "' given twice on one line");
  }
  auto add_resource = [&](const std::string& name, detect::Quantity q) -> Status {
    if (!q.is_whole()) {
      return invalid_argument(name + "=" + q.str() + ": a host has whole devices (write a whole number)");
    }
    for (const auto& [n, _] : e.resources) {
      if (n == name) return invalid_argument(name + " is declared twice on one line");
    }
    e.resources.emplace_back(name, q);
    return Status::ok();
  };
  auto whole = [&](long long min, const char* example) -> Result<int> {
    auto v = to_whole(value);
    if (!v) return invalid_argument(key + ": '" + value + "' is not a whole number (e.g. " + example + ")");
    if (*v < min) {
      return invalid_argument(key + ": '" + value + "' must be at least " + std::to_string(min) +
                              " (e.g. " + example + ")");
    }
    if (*v > 100'000'000) return invalid_argument(key + ": '" + value + "' is too large");
    return static_cast<int>(*v);
  };

  if (resource) {
    auto q = detect::Quantity::parse(value);
    if (!q) return invalid_argument(key + ": " + q.status().message());
    return add_resource(*resource, *q);
  }
  if (key == "slots") {
    auto v = whole(1, "slots=8");
    if (!v) return v.status();
    e.slots = *v;
  } else if (key == "max_slots") {
    auto v = whole(0, "max_slots=8");
    if (!v) return v.status();
  } else if (key == "gpus") {
    auto v = whole(0, "gpus=8");
    if (!v) return v.status();
    e.gpus = *v;
    return add_resource("GPU", detect::Quantity::whole(*v));
  } else if (key == "resources") {
    auto list = parse_resource_list(value);
    if (!list) return invalid_argument("resources: " + list.status().message());
    for (const auto& [n, q] : *list) ACCRUN_RETURN_IF_ERROR(add_resource(n, q));
  } else if (key == "accelerator_type") {
    e.accelerator_type = detect::canonical_type(value);
  } else if (key == "pod") {
    e.labels.pod = value;
  } else if (key == "zone") {
    e.labels.zone = value;
  } else if (key == "region") {
    e.labels.region = value;
  } else if (key == "worker") {
    auto v = whole(0, "worker=0");
    if (!v) return v.status();
    e.pod_order = *v;
  }
  return Status::ok();
}

}  // namespace

std::optional<std::string> closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  const std::string w = lower(word);
  if (w.empty()) return std::nullopt;
  std::optional<std::string> best;
  std::size_t best_d = 0;
  for (const auto& c : candidates) {
    std::size_t d = edit_distance(w, lower(c));
    if (!best || d < best_d) {
      best = c;
      best_d = d;
    }
  }
  // Close enough to be a typo: a couple of edits, more for longer words.
  const std::size_t limit = w.size() <= 4 ? 1 : w.size() <= 8 ? 2 : 3;
  if (best && best_d <= limit) return best;
  // Or the start of exactly one candidate ("--gpus" for "--gpus-per-rank").
  const std::string stem = w.substr(0, w.find_first_not_of('-'));
  if (w.size() - stem.size() >= 3) {
    std::optional<std::string> only;
    for (const auto& c : candidates) {
      if (lower(c).rfind(w, 0) == 0) {
        if (only) return std::nullopt;
        only = c;
      }
    }
    return only;
  }
  return std::nullopt;
}

Result<std::vector<std::pair<std::string, detect::Quantity>>> parse_resource_list(std::string_view text) {
  std::vector<std::pair<std::string, detect::Quantity>> out;
  if (text.empty()) return invalid_argument("empty resource list (write NAME=Q[,NAME=Q...], e.g. TPU=4)");
  std::size_t start = 0;
  while (true) {
    std::size_t comma = text.find(',', start);
    std::string_view item = text.substr(start, comma == std::string_view::npos ? text.npos : comma - start);
    std::size_t sep = item.find_first_of("=:");
    if (item.empty() || sep == std::string_view::npos || sep == 0) {
      return invalid_argument("'" + std::string(item) + "' is not NAME=Q or NAME:Q (e.g. TPU=4)");
    }
    auto name = detect::canonical_resource(item.substr(0, sep));
    if (!name) return name.status();
    auto q = detect::Quantity::parse(item.substr(sep + 1));
    if (!q) return invalid_argument(*name + ": " + q.status().message());
    for (const auto& [n, _] : out) {
      if (n == *name) return invalid_argument(*name + " is given twice");
    }
    out.emplace_back(*name, *q);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

Result<std::vector<std::string>> expand_hostnames(std::string_view expr) {
  auto malformed = [&](const std::string& why) {
    return invalid_argument("malformed host range '" + std::string(expr) + "': " + why);
  };
  if (expr.empty()) return invalid_argument("empty host name");
  std::vector<std::string> names = {""};
  std::size_t i = 0;
  while (i < expr.size()) {
    char c = expr[i];
    if (c == ']') return malformed("']' without '['");
    if (c == '[') {
      std::size_t close = expr.find(']', i);
      if (close == std::string_view::npos) return malformed("'[' without ']'");
      std::string_view body = expr.substr(i + 1, close - i - 1);
      if (body.find('[') != std::string_view::npos) return malformed("nested '['");
      auto nums = expand_group(body, expr);
      if (!nums) return nums.status();
      if (names.size() * nums->size() > kMaxExpansion) {
        return malformed("expands to more than " + std::to_string(kMaxExpansion) + " hosts");
      }
      std::vector<std::string> next;
      next.reserve(names.size() * nums->size());
      for (const auto& prefix : names) {
        for (const auto& n : *nums) next.push_back(prefix + n);
      }
      names = std::move(next);
      i = close + 1;
      continue;
    }
    if (is_blank(c) || c == ',' || c == '#' || c == '=') {
      return malformed(std::string("'") + c + "' is not allowed in a host name");
    }
    std::size_t j = i;
    while (j < expr.size() && expr[j] != '[' && expr[j] != ']') ++j;
    std::string_view lit = expr.substr(i, j - i);
    for (char ch : lit) {
      if (is_blank(ch) || ch == ',' || ch == '#' || ch == '=') {
        return malformed(std::string("'") + ch + "' is not allowed in a host name");
      }
    }
    for (auto& n : names) n.append(lit);
    i = j;
  }
  return names;
}

Result<std::vector<HostEntry>> parse_hostfile(std::string_view text, const std::string& filename) {
  std::vector<HostEntry> out;
  std::unordered_map<std::string, std::string> first_seen;  // host → origin
  std::size_t line_no = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    ++line_no;
    std::size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? text.npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    const std::string origin = filename + ":" + std::to_string(line_no);
    auto fail = [&](const Status& s) { return Status(s.code(), origin + ": " + s.message()); };

    if (std::size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    std::vector<std::string_view> words;
    for (std::size_t i = 0; i < line.size();) {
      while (i < line.size() && is_blank(line[i])) ++i;
      std::size_t j = i;
      while (j < line.size() && !is_blank(line[j])) ++j;
      if (j > i) words.push_back(line.substr(i, j - i));
      i = j;
    }
    if (words.empty()) continue;
    if (words[0].find('=') != std::string_view::npos) {
      return fail(invalid_argument("a line starts with the host name, not '" + std::string(words[0]) +
                                   "'"));
    }
    HostEntry proto;
    proto.origin = origin;
    std::set<std::string> seen;
    for (std::size_t w = 1; w < words.size(); ++w) {
      Status st = apply_field(words[w], proto, seen);
      if (!st) return fail(st);
    }
    auto names = expand_hostnames(words[0]);
    if (!names) return fail(names.status());
    if (out.size() + names->size() > kMaxExpansion) {
      return fail(invalid_argument("more than " + std::to_string(kMaxExpansion) + " hosts"));
    }
    int worker_offset = 0;
    for (auto& name : *names) {
      auto [it, inserted] = first_seen.emplace(name, origin);
      if (!inserted) {
        return fail(invalid_argument("duplicate host '" + name + "' (first declared at " + it->second +
                                     "; give each host once)"));
      }
      HostEntry e = proto;
      e.name = std::move(name);
      if (e.pod_order) e.pod_order = *e.pod_order + worker_offset++;
      out.push_back(std::move(e));
    }
  }
  return out;
}

Result<std::vector<HostEntry>> read_hostfile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot read hostfile '" + path + "': " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_hostfile(ss.str(), path);
}

Result<std::vector<HostEntry>> parse_host_list(std::string_view list) {
  std::vector<HostEntry> out;
  std::unordered_map<std::string, bool> seen;
  auto fail = [](const std::string& m) { return invalid_argument("-H: " + m); };
  if (list.empty()) return fail("empty host list (e.g. -H node1:4,node2:4)");
  for (std::string_view item : split_top_level(list)) {
    if (item.empty()) return fail("empty host between commas");
    std::optional<int> slots;
    std::size_t colon = item.rfind(':');
    if (colon != std::string_view::npos && item.find(']', colon) == std::string_view::npos) {
      std::string_view n = item.substr(colon + 1);
      auto v = to_whole(n);
      if (!v || *v < 1 || *v > 100'000'000) {
        return fail("'" + std::string(item) + "': slots '" + std::string(n) +
                    "' is not a whole number of at least 1 (e.g. node1:4)");
      }
      slots = static_cast<int>(*v);
      item = item.substr(0, colon);
    }
    auto names = expand_hostnames(item);
    if (!names) return fail(names.status().message());
    for (auto& name : *names) {
      if (!seen.emplace(name, true).second) {
        return fail("duplicate host '" + name + "' (give each host once)");
      }
      HostEntry e;
      e.name = std::move(name);
      e.slots = slots;
      e.origin = "-H";
      out.push_back(std::move(e));
    }
  }
  return out;
}

detect::Inventory declared_inventory(const HostEntry& entry) {
  detect::Inventory inv;
  inv.host = entry.name;
  inv.labels = entry.labels;
  inv.pod_order = entry.pod_order;
  // The declared type decides the vendor of the resource it belongs to
  // (MI300X → amd for GPU); other resources get their default vendor.
  std::string type_vendor;
  std::string type_resource;
  if (entry.accelerator_type) {
    type_vendor = detect::vendor_of_type(*entry.accelerator_type);
    type_resource = detect::resource_of_type(*entry.accelerator_type);
  }
  for (const auto& [resource, q] : entry.resources) {
    std::string vendor;
    std::string type;
    if (entry.accelerator_type && (type_resource.empty() || type_resource == resource)) {
      type = *entry.accelerator_type;
      if (!type_resource.empty()) vendor = type_vendor;
    }
    if (vendor.empty()) vendor = detect::default_vendor(resource);
    const auto n = q.whole_part();
    for (std::int64_t i = 0; i < n; ++i) {
      detect::Accelerator a;
      a.resource = resource;
      a.vendor = vendor;
      a.id = static_cast<int>(i);
      a.type = type;
      a.logical = true;
      inv.accelerators.push_back(std::move(a));
    }
  }
  return inv;
}

}  // namespace accrun::hostfiles
