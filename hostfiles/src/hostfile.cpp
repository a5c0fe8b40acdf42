// Hostfiles and host lists: the grammar of accrun-hostfile(5).
#include "accrun/hostfile.hpp"
#include "accrun/strings.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

#include "accrun/detect.hpp"

namespace accrun::hostfiles {
namespace {

std::string lower(std::string_view s) { return accrun::ascii_lower(s); }

// The length of the well-formed UTF-8 sequence of two or more bytes that
// starts at text[i] (no overlong forms, surrogates or code points past
// U+10FFFF), or 0 when none starts there.
std::size_t utf8_length_at(std::string_view text, std::size_t i) {
  const auto b = static_cast<unsigned char>(text[i]);
  const std::size_t len = b >= 0xc2 && b <= 0xdf ? 2 : b >= 0xe0 && b <= 0xef ? 3 : b >= 0xf0 && b <= 0xf4 ? 4 : 0;
  if (len == 0 || i + len > text.size()) return 0;
  for (std::size_t k = 1; k < len; ++k) {
    if ((static_cast<unsigned char>(text[i + k]) & 0xc0) != 0x80) return 0;
  }
  const auto b1 = static_cast<unsigned char>(text[i + 1]);
  if ((b == 0xe0 && b1 < 0xa0) || (b == 0xed && b1 >= 0xa0) || (b == 0xf0 && b1 < 0x90) ||
      (b == 0xf4 && b1 >= 0x90)) {
    return 0;
  }
  return len;
}

// The code point of the valid UTF-8 sequence of `len` bytes at text[i].
char32_t utf8_decode(std::string_view text, std::size_t i, std::size_t len) {
  const auto b = static_cast<unsigned char>(text[i]);
  char32_t cp = len == 2 ? b & 0x1f : len == 3 ? b & 0x0f : b & 0x07;
  for (std::size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3f);
  return cp;
}

// Characters that look like a space, or like nothing, where a hostfile (or
// a message quoting one) would show them: named, so that a message can say
// what is there.
const char* invisible_name(char32_t cp) {
  if (cp == 0xa0 || cp == 0x202f) return "a non-breaking space";
  if (cp >= 0x80 && cp <= 0x9f) return "a control character";
  if (cp == 0xad) return "a soft hyphen";
  if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x205f || cp == 0x3000) return "a wide space";
  if ((cp >= 0x200b && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2060 && cp <= 0x2064) ||
      cp == 0xfeff)
    return "an invisible character";
  return nullptr;
}

std::string code_point(char32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(cp));
  return buf;
}

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

std::optional<long long> to_whole(std::string_view s) {
  if (s.empty()) return std::nullopt;
  long long v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

}  // namespace

Result<long long> whole_number(std::string_view text, long long min, const char* example,
                               long long max) {
  const std::string shown = "'" + printable(text) + "'";
  std::string_view digits = text;
  const bool negative = !digits.empty() && digits[0] == '-';
  if (negative) digits.remove_prefix(1);
  const bool all_digits = !digits.empty() && std::all_of(digits.begin(), digits.end(), [](char c) {
    return c >= '0' && c <= '9';
  });
  if (!all_digits) return invalid_argument(shown + " is not a whole number (e.g. " + example + ")");
  if (negative && digits.find_first_not_of('0') != std::string_view::npos)
    return invalid_argument(shown + " must be at least " + std::to_string(min) + " (e.g. " +
                            example + ")");
  long long v = 0;
  auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec == std::errc::result_out_of_range || (ec == std::errc() && v > max))
    return invalid_argument(shown + " is too large (at most " + std::to_string(max) + ")");
  if (ec != std::errc() || p != digits.data() + digits.size())
    return invalid_argument(shown + " is not a whole number (e.g. " + example + ")");
  if (v < min)
    return invalid_argument(shown + " must be at least " + std::to_string(min) + " (e.g. " +
                            example + ")");
  return v;
}

namespace {

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

std::string limit_text(std::size_t n) { return std::to_string(n); }

// A host name as a message shows it: long ones cut (a 4,000-character -H
// argument would drown the message).
std::string shown_name(std::string_view name) {
  constexpr std::size_t kShown = 64;
  if (name.size() <= kShown) return std::string(name);
  return std::string(name.substr(0, kShown)) + "...";
}

bool host_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.';
}

// The dot-separated parts of an expanded name (RFC 1123, plus '_').
Status check_host_labels(std::string_view name) {
  const std::string shown = "invalid host name '" + shown_name(name) + "': ";
  std::size_t start = 0;
  while (true) {
    std::size_t dot = name.find('.', start);
    std::string_view label = name.substr(start, dot == std::string_view::npos ? name.npos : dot - start);
    if (label.empty()) return invalid_argument(shown + "an empty part before or between dots");
    if (label.size() > kMaxHostLabelLength) {
      return invalid_argument(shown + "a part between dots is longer than " + limit_text(kMaxHostLabelLength) +
                              " characters");
    }
    if (label.front() == '-' || label.back() == '-') {
      return invalid_argument(shown + "a part between dots starts or ends with '-'");
    }
    if (dot == std::string_view::npos) return Status::ok();
    start = dot + 1;
  }
}

// A host expression taken apart: literal text and [..] groups, with the
// size of its expansion computed before anything is expanded.
struct Range {
  long long lo = 0;
  long long hi = 0;
};
struct Group {
  std::vector<Range> ranges;
  std::vector<std::size_t> widths;  // zero padding: the digits of each lower bound
};
struct Segment {
  std::string literal;  // when !group
  std::optional<Group> group;
};
struct Expression {
  std::vector<Segment> segments;
  std::size_t count = 1;       // names it expands to, saturated at kMaxHosts + 1
  std::size_t max_length = 0;  // the longest of them
};

std::size_t digits_of(long long v) { return std::to_string(v).size(); }

Result<Group> parse_group(std::string_view body, std::string_view expr, std::size_t& count,
                          std::size_t& longest) {
  auto malformed = [&](const std::string& why) {
    return invalid_argument("malformed host range '" + std::string(expr) + "': " + why);
  };
  Group g;
  if (body.empty()) return malformed("empty brackets (write e.g. node[01-04])");
  constexpr std::size_t kSaturated = kMaxHosts + 1;
  count = 0;
  longest = 0;
  std::size_t start = 0;
  while (start <= body.size()) {
    std::size_t comma = body.find(',', start);
    std::string_view item = body.substr(start, comma == std::string_view::npos ? body.npos : comma - start);
    if (item.empty()) return malformed("empty item between commas");
    std::size_t dash = item.find('-');
    std::string_view lo_s = item.substr(0, dash);
    std::string_view hi_s = dash == std::string_view::npos ? lo_s : item.substr(dash + 1);
    auto digits = [](std::string_view t) {
      return !t.empty() && std::all_of(t.begin(), t.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
    };
    if (!digits(lo_s) || !digits(hi_s)) {
      return malformed("'" + std::string(item) + "' is not a number or a range A-B of numbers");
    }
    auto lo = to_whole(lo_s);
    auto hi = to_whole(hi_s);
    if (!lo || !hi) return malformed("'" + std::string(item) + "' has a number too large");
    if (*lo > *hi) {
      return malformed(std::string(lo_s) + " is more than " + std::string(hi_s) + " (write the smaller first)");
    }
    // Sizes only: unsigned and saturated, so no range can overflow them.
    const unsigned long long n = static_cast<unsigned long long>(*hi - *lo) + 1;
    count = n >= kSaturated - count ? kSaturated : count + static_cast<std::size_t>(n);
    longest = std::max({longest, lo_s.size(), digits_of(*hi)});
    g.ranges.push_back({*lo, *hi});
    g.widths.push_back(lo_s.size());
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return g;
}

Result<Expression> parse_expression(std::string_view expr) {
  auto malformed = [&](const std::string& why) {
    return invalid_argument("malformed host range '" + shown_name(expr) + "': " + why);
  };
  if (expr.empty()) return invalid_argument("empty host name");
  constexpr std::size_t kSaturated = kMaxHosts + 1;
  Expression e;
  std::size_t i = 0;
  while (i < expr.size()) {
    char c = expr[i];
    if (c == ']') return malformed("']' without '['");
    if (c == '[') {
      std::size_t close = expr.find(']', i);
      if (close == std::string_view::npos) return malformed("'[' without ']'");
      std::string_view body = expr.substr(i + 1, close - i - 1);
      if (body.find('[') != std::string_view::npos) return malformed("nested '['");
      std::size_t n = 0;
      std::size_t longest = 0;
      auto g = parse_group(body, expr, n, longest);
      if (!g) return g.status();
      // Both factors are at most kSaturated, so the product cannot overflow.
      e.count = std::min(e.count * n, kSaturated);
      e.max_length += longest;
      e.segments.push_back({{}, std::move(*g)});
      i = close + 1;
      continue;
    }
    std::size_t j = i;
    while (j < expr.size() && expr[j] != '[' && expr[j] != ']') ++j;
    std::string_view lit = expr.substr(i, j - i);
    for (std::size_t k = 0; k < lit.size(); ++k) {
      if (!host_name_char(lit[k])) {
        // The whole character where the byte starts one (é, a non-breaking space).
        const std::size_t len = static_cast<unsigned char>(lit[k]) >= 0x80 ? utf8_length_at(lit, k) : 0;
        return invalid_argument("invalid host name '" + shown_name(expr) + "': '" +
                                std::string(lit.substr(k, std::max<std::size_t>(len, 1))) +
                                "' is not allowed in a host name (letters, digits, '-', '_' and '.' are)");
      }
    }
    e.max_length += lit.size();
    e.segments.push_back({std::string(lit), std::nullopt});
    i = j;
  }
  if (e.count > kMaxHosts) {
    return malformed("expands to more than " + limit_text(kMaxHosts) + " hosts, the limit of one job");
  }
  if (e.max_length > kMaxHostNameLength) {
    return invalid_argument("invalid host name '" + shown_name(expr) + "': longer than " +
                            limit_text(kMaxHostNameLength) + " characters");
  }
  return e;
}

// Expands a checked expression: the first bracket varies slowest.
Result<std::vector<std::string>> expand(const Expression& e) {
  std::vector<std::string> names = {""};
  names.reserve(e.count);
  for (const auto& seg : e.segments) {
    if (!seg.group) {
      for (auto& n : names) n.append(seg.literal);
      continue;
    }
    std::vector<std::string> next;
    next.reserve(e.count);
    for (const auto& prefix : names) {
      for (std::size_t r = 0; r < seg.group->ranges.size(); ++r) {
        const Range& range = seg.group->ranges[r];
        const std::size_t width = seg.group->widths[r];
        for (long long v = range.lo; v <= range.hi; ++v) {
          std::string n = std::to_string(v);
          if (n.size() < width) n.insert(0, width - n.size(), '0');
          next.push_back(prefix + n);
        }
      }
    }
    names = std::move(next);
  }
  for (const auto& n : names) ACCRUN_RETURN_IF_ERROR(check_host_labels(n));
  return names;
}

const std::vector<std::string>& known_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k = {"slots", "max_slots", "gpus", "resources", "accelerator_type",
                                  "instance_type", "pod", "zone", "region", "worker"};
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

// What instance_type= declares, under what the line says itself: gpus=,
// resources= and accelerator_type= on the same line win over the table.
void apply_instance_type(HostEntry& e) {
  if (!e.instance_type) return;
  const detect::InstanceType* t = detect::find_instance_type(*e.instance_type);
  if (t == nullptr) return;  // refused by apply_field
  const bool has = std::any_of(e.resources.begin(), e.resources.end(),
                               [&](const auto& r) { return r.first == t->resource; });
  // Not a claim, as gpus=, resources= and NAME= are (checked against what
  // detection finds): the table only stands in until detection has looked.
  if (!has) {
    e.resources.emplace_back(t->resource, detect::Quantity::whole(t->count));
    e.instance_resource = t->resource;
  }
  if (!e.accelerator_type) e.accelerator_type = t->type;
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
  static const std::set<std::string> kPlainKeys = {"slots",         "max_slots", "gpus", "resources",
                                                   "accelerator_type", "instance_type", "pod", "zone",
                                                   "region",         "worker"};
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
      else
        msg += " (keys: slots, max_slots, gpus, resources, accelerator_type, instance_type, pod, zone, region, "
               "worker, or a resource's name such as TPU=4)";
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
    if (q.whole_part() > kMaxDevicesPerResource) {
      return invalid_argument(name + "=" + q.str() + ": more than " + std::to_string(kMaxDevicesPerResource) +
                              " devices of one resource on a host (the limit)");
    }
    for (const auto& [n, _] : e.resources) {
      if (n == name) return invalid_argument(name + " is declared twice on one line");
    }
    e.resources.emplace_back(name, q);
    return Status::ok();
  };
  auto whole = [&](long long min, const char* example) -> Result<int> {
    auto v = whole_number(value, min, example);
    if (!v) return invalid_argument(key + ": " + v.status().message());
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
    if (*v > kMaxDevicesPerResource) {
      return invalid_argument("gpus: '" + value + "' is more than " + std::to_string(kMaxDevicesPerResource) +
                              " devices of one resource on a host (the limit)");
    }
    e.gpus = *v;
    return add_resource("GPU", detect::Quantity::whole(*v));
  } else if (key == "resources") {
    auto list = parse_resource_list(value);
    if (!list) return invalid_argument("resources: " + list.status().message());
    for (const auto& [n, q] : *list) {
      if (Status st = add_resource(n, q); !st) return invalid_argument("resources: " + st.message());
    }
  } else if (key == "accelerator_type") {
    e.accelerator_type = detect::canonical_type(value);
  } else if (key == "instance_type") {
    if (detect::find_instance_type(value) == nullptr) {
      std::vector<std::string> names;
      for (const auto& t : detect::instance_types()) names.push_back(t.name);
      std::string msg = "unknown instance type '" + value + "'";
      if (auto near = closest_match(value, names)) msg += " (did you mean '" + *near + "'?)";
      return invalid_argument(msg + "; accrun-hostfile(5) lists the known ones, or declare the devices with "
                                    "gpus=/resources= and accelerator_type=");
    }
    e.instance_type = value;
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
  auto e = parse_expression(expr);
  auto names = e ? expand(*e) : Result<std::vector<std::string>>(e.status());
  if (!names) return Status(names.status().code(), printable(names.status().message()));
  return names;
}

Result<std::vector<std::string>> expand_node_list(std::string_view list) {
  std::vector<std::string> out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    char c = i < list.size() ? list[i] : ',';
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c != ',' || depth > 0) continue;
    std::string_view part = list.substr(start, i - start);
    start = i + 1;
    if (part.empty()) return invalid_argument("node list '" + printable(list) + "': an empty entry");
    auto names = expand_hostnames(part);
    if (!names) return names.status().with_context("node list '" + printable(list) + "'");
    if (out.size() + names->size() > kMaxHosts)
      return invalid_argument("node list '" + printable(list) + "': more than " + std::to_string(kMaxHosts) + " hosts");
    out.insert(out.end(), names->begin(), names->end());
  }
  if (depth != 0) return invalid_argument("node list '" + printable(list) + "': unbalanced brackets");
  return out;
}

Result<std::vector<int>> parse_counts_per_node(std::string_view text) {
  std::vector<int> out;
  auto bad = [&](const std::string& why) {
    return invalid_argument("'" + printable(text) + "': " + why + " (Slurm's form is COUNT or COUNT(xREPEAT), comma-separated, e.g. 2(x3),1)");
  };
  auto whole = [](std::string_view s, long* v) {
    if (s.empty() || s.size() > 7 || s.find_first_not_of("0123456789") != std::string_view::npos) return false;
    *v = std::stol(std::string(s));
    return *v >= 1;
  };
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view item = text.substr(pos, comma - pos);
    long count = 0, repeat = 1;
    size_t paren = item.find('(');
    if (paren == std::string_view::npos) {
      if (!whole(item, &count)) return bad("'" + std::string(item) + "' is not a count of at least 1");
    } else {
      if (!whole(item.substr(0, paren), &count)) return bad("'" + std::string(item) + "' has no count of at least 1");
      std::string_view rest = item.substr(paren);
      if (rest.size() < 4 || rest.substr(0, 2) != "(x" || rest.back() != ')' ||
          !whole(rest.substr(2, rest.size() - 3), &repeat))
        return bad("'" + std::string(item) + "' is not COUNT(xREPEAT)");
    }
    if (out.size() + static_cast<size_t>(repeat) > kMaxHosts)
      return bad("more than " + std::to_string(kMaxHosts) + " nodes");
    out.insert(out.end(), static_cast<size_t>(repeat), static_cast<int>(count));
    pos = comma + 1;
    if (comma == text.size()) break;
  }
  return out;
}

std::string printable(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  auto escape = [&](unsigned char b) {
    out += "\\x";
    out += kHex[b >> 4];
    out += kHex[b & 0xf];
  };
  std::size_t i = 0;
  while (i < text.size()) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (b == '\\') {
      out += "\\\\";
      ++i;
    } else if (b < 0x20 || b == 0x7f) {
      escape(b);
      ++i;
    } else if (b < 0x80) {
      out += static_cast<char>(b);
      ++i;
    } else if (std::size_t len = utf8_length_at(text, i); len != 0) {
      const char32_t cp = utf8_decode(text, i, len);
      if (invisible_name(cp) != nullptr) {
        char buf[16];
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
        out += buf;
      } else {
        out.append(text.substr(i, len));
      }
      i += len;
    } else {
      escape(b);
      ++i;
    }
  }
  return out;
}

namespace {

// The column of byte `i` as an editor counts it: characters, not bytes.
std::size_t column_of(std::string_view line, std::size_t i) {
  std::size_t col = 1;
  for (std::size_t k = 0; k < i && k < line.size(); ++k) col += (static_cast<unsigned char>(line[k]) & 0xc0) != 0x80;
  return col;
}

// The first byte of `line` that has no place in a hostfile's text: a control
// byte other than TAB anywhere (CR only as the line's last byte, a CRLF
// file), and, before any comment, a byte that is not part of valid UTF-8.
// Its message names the column.
Status check_line_bytes(std::string_view line) {
  const std::size_t hash = line.find('#');
  for (std::size_t i = 0; i < line.size(); ++i) {
    const auto b = static_cast<unsigned char>(line[i]);
    if ((b < 0x20 && b != '\t' && !(b == '\r' && i + 1 == line.size())) || b == 0x7f) {
      const std::string what = b == 0 ? "a NUL byte" : "the control byte " + printable(line.substr(i, 1));
      return invalid_argument(what + " in column " + std::to_string(column_of(line, i)) +
                              " (a hostfile is text; remove it)");
    }
  }
  const std::string_view text = line.substr(0, hash);
  for (std::size_t i = 0; i < text.size();) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
    } else if (std::size_t len = utf8_length_at(text, i); len != 0) {
      if (const char32_t cp = utf8_decode(text, i, len); const char* name = invisible_name(cp)) {
        return invalid_argument(std::string(name) + " (" + code_point(cp) + ") in column " + std::to_string(column_of(line, i)) +
                                " (separate words with plain spaces or tabs, and remove it from names)");
      }
      i += len;
    } else {
      return invalid_argument("a byte that is not UTF-8 (" + printable(text.substr(i, 1)) + ") in column " +
                              std::to_string(column_of(line, i)) + " (save the hostfile as UTF-8 text)");
    }
  }
  return Status::ok();
}

}  // namespace

Result<std::vector<HostEntry>> parse_hostfile(std::string_view text, const std::string& filename) {
  std::vector<HostEntry> out;
  std::unordered_map<std::string, std::pair<std::string, std::string>> first_seen;  // lower-case host → (as given, origin)
  // (pod, worker id) → the host that has it and its origin.
  std::map<std::pair<std::string, int>, std::pair<std::string, std::string>> workers;
  const std::string shown_file = printable(filename);
  // A byte-order mark some editors write: not part of the first host name.
  constexpr std::string_view kBom = "\xEF\xBB\xBF";
  if (text.substr(0, kBom.size()) == kBom) text.remove_prefix(kBom.size());
  std::size_t line_no = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    ++line_no;
    std::size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? text.npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    const std::string origin = shown_file + ":" + std::to_string(line_no);
    auto fail = [&](const Status& s) { return Status(s.code(), origin + ": " + printable(s.message())); };

    if (Status st = check_line_bytes(line); !st) return Status(st.code(), origin + ": " + st.message());
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
    apply_instance_type(proto);
    auto expr = parse_expression(words[0]);
    if (!expr) return fail(expr.status());
    // Checked before expanding, so the limit bounds the memory too.
    if (out.size() + expr->count > kMaxHosts) {
      return fail(invalid_argument("the hostfile declares more than " + limit_text(kMaxHosts) +
                                   " hosts, the limit of one job"));
    }
    auto names = expand(*expr);
    if (!names) return fail(names.status());
    int worker_offset = 0;
    for (auto& name : *names) {
      auto [it, inserted] = first_seen.emplace(lower(name), std::pair(name, origin));  // host names ignore case
      if (!inserted) {
        const auto& [first, where] = it->second;
        return fail(invalid_argument("duplicate host '" + name + "' (" +
                                     (first == name ? "" : "the same host as '" + first + "': host names ignore case; ") +
                                     "first declared at " + where + "; give each host once)"));
      }
      HostEntry e = proto;
      e.name = std::move(name);
      if (e.pod_order) e.pod_order = *e.pod_order + worker_offset++;
      if (e.pod_order && e.labels.pod) {
        auto [w, fresh] = workers.try_emplace({*e.labels.pod, *e.pod_order}, e.name, origin);
        if (!fresh) {
          return fail(invalid_argument("host '" + e.name + "' is worker " + std::to_string(*e.pod_order) +
                                       " of pod '" + *e.labels.pod + "', and so is host '" + w->second.first +
                                       "' at " + w->second.second +
                                       " (give each host of a pod its own worker id)"));
        }
      }
      out.push_back(std::move(e));
    }
  }
  return out;
}

namespace {

// What a hostfile that can be read once (a pipe, a FIFO, /dev/stdin) gave:
// accrun reads its hostfile in more than one place, and a second open of a
// FIFO would wait for a writer that never comes.
struct OnceRead {
  std::mutex mu;
  std::map<std::string, std::string> text;  // by path
};
OnceRead& once_read() {
  static auto* r = new OnceRead;
  return *r;
}

}  // namespace

Result<std::vector<HostEntry>> read_hostfile(const std::string& path) {
  const std::string shown = printable(path);
  struct stat pre {};
  const bool once = ::stat(path.c_str(), &pre) == 0 && !S_ISREG(pre.st_mode) && !S_ISDIR(pre.st_mode);
  if (once) {
    std::lock_guard<std::mutex> lock(once_read().mu);
    if (auto it = once_read().text.find(path); it != once_read().text.end()) return parse_hostfile(it->second, path);
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return not_found("cannot read hostfile '" + shown + "': " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return not_found("cannot read hostfile '" + shown + "': " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) {
    return invalid_argument("hostfile '" + shown + "' is a directory (give the file that lists the hosts)");
  }
  const bool regular = S_ISREG(st.st_mode);
  const std::string too_big = "hostfile '" + shown + "' " +
                              (regular ? std::string("is larger than ")
                                       : std::string("is not a regular file and gave more than ")) +
                              std::to_string(kMaxHostfileBytes >> 20) + " MiB, the limit for a hostfile";
  if (regular && static_cast<unsigned long long>(st.st_size) > kMaxHostfileBytes) {
    return invalid_argument(too_big);
  }
  // Bounded whatever stat said: /proc files claim size 0, and a device such
  // as /dev/zero never ends.  One byte past the limit tells "too large".
  std::string text;
  text.resize(kMaxHostfileBytes + 1);
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return not_found("cannot read hostfile '" + shown + "': " + std::strerror(errno));
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  if (got > kMaxHostfileBytes) return invalid_argument(too_big);
  text.resize(got);
  if (once) {
    std::lock_guard<std::mutex> lock(once_read().mu);
    once_read().text[path] = text;
  }
  return parse_hostfile(text, path);
}

Result<std::vector<HostEntry>> parse_host_list(std::string_view list) {
  std::vector<HostEntry> out;
  std::unordered_map<std::string, std::string> seen;  // lower-case name -> as given
  auto fail = [](const std::string& m) { return invalid_argument("-H: " + printable(m)); };
  if (list.empty()) return fail("empty host list (e.g. -H node1:4,node2:4)");
  for (std::string_view item : split_top_level(list)) {
    if (item.empty()) return fail("empty host between commas");
    std::optional<int> slots;
    std::size_t colon = item.rfind(':');
    if (colon != std::string_view::npos && item.find(']', colon) == std::string_view::npos) {
      std::string_view n = item.substr(colon + 1);
      auto v = whole_number(n, 1, "node1:4");
      if (!v) return fail("'" + shown_name(item) + "': slots " + v.status().message());
      slots = static_cast<int>(*v);
      item = item.substr(0, colon);
    }
    auto expr = parse_expression(item);
    if (!expr) return fail(expr.status().message());
    // Checked before expanding, so the limit bounds the memory too.
    if (out.size() + expr->count > kMaxHosts) {
      return fail("more than " + limit_text(kMaxHosts) + " hosts, the limit of one job");
    }
    auto names = expand(*expr);
    if (!names) return fail(names.status().message());
    for (auto& name : *names) {
      if (auto [it, fresh] = seen.emplace(lower(name), name); !fresh) {  // host names ignore case
        return fail("duplicate host '" + name + "' (" +
                    (it->second == name ? "" : "the same host as '" + it->second + "': host names ignore case; ") +
                    "give each host once)");
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

detect::Inventory detected_inventory(const HostEntry& entry, detect::Inventory detected) {
  detected.host = entry.name;
  // Labels written in the hostfile win over detected ones.
  if (entry.labels.pod) detected.labels.pod = entry.labels.pod;
  if (entry.labels.zone) detected.labels.zone = entry.labels.zone;
  if (entry.labels.region) detected.labels.region = entry.labels.region;
  if (entry.pod_order) detected.pod_order = entry.pod_order;
  return detected;
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
