// `accrun --detect` output: the table, and DESIGN.md §9's JSON (written and
// read back: the multi-host head reads daemons' inventories with from_json).
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <variant>

#include "accrun/json.hpp"
#include "internal.hpp"

namespace accrun::detect {
namespace {

void put_string(std::string& out, std::string_view s) { accrun::append_json_string(out, s); }

void put_opt(std::string& out, const std::optional<std::string>& s) {
  if (s) put_string(out, *s);
  else out += "null";
}

void put_opt(std::string& out, const std::optional<int>& v) {
  if (v) out += std::to_string(*v);
  else out += "null";
}

// A small JSON reader: enough for the inventory object.
struct Value;
using Object = std::map<std::string, Value>;
using Array = std::vector<Value>;
struct Value {
  std::variant<std::nullptr_t, bool, double, std::string, std::shared_ptr<Array>, std::shared_ptr<Object>> v;
};

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}
  Result<Value> parse() {
    auto v = value(0);
    if (!v) return v;
    skip();
    if (pos_ != s_.size()) return error("unexpected text after the end");
    return v;
  }

 private:
  Status error(const std::string& what) const {
    return invalid_argument("inventory JSON, offset " + std::to_string(pos_) + ": " + what);
  }
  void skip() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t' || s_[pos_] == '\r')) ++pos_;
  }
  bool eat(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  Result<Value> value(int depth) {
    if (depth > 32) return error("nested too deeply");
    skip();
    if (pos_ >= s_.size()) return error("unexpected end");
    char c = s_[pos_];
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') {
      auto s = string();
      if (!s) return s.status();
      return Value{std::move(*s)};
    }
    if (eat("null")) return Value{nullptr};
    if (eat("true")) return Value{true};
    if (eat("false")) return Value{false};
    size_t start = pos_;
    while (pos_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '-' ||
                                s_[pos_] == '+' || s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E'))
      ++pos_;
    if (start == pos_) return error(std::string("unexpected character '") + c + "'");
    std::string num(s_.substr(start, pos_ - start));
    char* end = nullptr;
    double d = std::strtod(num.c_str(), &end);
    if (end == nullptr || *end != '\0') return error("bad number '" + num + "'");
    return Value{d};
  }
  Result<std::string> string() {
    ++pos_;  // opening quote
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) break;
      char e = s_[pos_++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': {
          if (pos_ + 4 > s_.size()) return error("bad \\u escape");
          auto cp = internal::parse_hex(s_.substr(pos_, 4));
          if (!cp) return error("bad \\u escape");
          pos_ += 4;
          if (*cp < 0x80) out += static_cast<char>(*cp);
          else if (*cp < 0x800) {
            out += static_cast<char>(0xc0 | (*cp >> 6));
            out += static_cast<char>(0x80 | (*cp & 0x3f));
          } else {
            out += static_cast<char>(0xe0 | (*cp >> 12));
            out += static_cast<char>(0x80 | ((*cp >> 6) & 0x3f));
            out += static_cast<char>(0x80 | (*cp & 0x3f));
          }
          break;
        }
        default: out += e;
      }
    }
    if (pos_ >= s_.size()) return error("unterminated string");
    ++pos_;
    return out;
  }
  Result<Value> array(int depth) {
    ++pos_;
    auto arr = std::make_shared<Array>();
    skip();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      return Value{arr};
    }
    while (true) {
      auto v = value(depth + 1);
      if (!v) return v;
      arr->push_back(std::move(*v));
      skip();
      if (pos_ < s_.size() && s_[pos_] == ',') { ++pos_; continue; }
      if (pos_ < s_.size() && s_[pos_] == ']') { ++pos_; return Value{arr}; }
      return error("expected ',' or ']'");
    }
  }
  Result<Value> object(int depth) {
    ++pos_;
    auto obj = std::make_shared<Object>();
    skip();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      return Value{obj};
    }
    while (true) {
      skip();
      if (pos_ >= s_.size() || s_[pos_] != '"') return error("expected a key");
      auto k = string();
      if (!k) return k.status();
      skip();
      if (pos_ >= s_.size() || s_[pos_] != ':') return error("expected ':'");
      ++pos_;
      auto v = value(depth + 1);
      if (!v) return v;
      (*obj)[*k] = std::move(*v);
      skip();
      if (pos_ < s_.size() && s_[pos_] == ',') { ++pos_; continue; }
      if (pos_ < s_.size() && s_[pos_] == '}') { ++pos_; return Value{obj}; }
      return error("expected ',' or '}'");
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
};

const Object* as_object(const Value& v) {
  auto p = std::get_if<std::shared_ptr<Object>>(&v.v);
  return p ? p->get() : nullptr;
}
const Array* as_array(const Value& v) {
  auto p = std::get_if<std::shared_ptr<Array>>(&v.v);
  return p ? p->get() : nullptr;
}

Status field_error(const std::string& where, const std::string& key, const char* want) {
  return invalid_argument("inventory JSON: " + where + "." + key + " must be " + want);
}

Result<std::string> get_string(const Object& o, const std::string& where, const std::string& key) {
  auto it = o.find(key);
  if (it == o.end() || !std::holds_alternative<std::string>(it->second.v)) return field_error(where, key, "a string");
  return std::get<std::string>(it->second.v);
}
Result<std::optional<std::string>> get_opt_string(const Object& o, const std::string& where, const std::string& key) {
  auto it = o.find(key);
  if (it == o.end() || std::holds_alternative<std::nullptr_t>(it->second.v)) return std::optional<std::string>();
  if (!std::holds_alternative<std::string>(it->second.v)) return field_error(where, key, "a string or null");
  return std::optional<std::string>(std::get<std::string>(it->second.v));
}
Result<std::optional<int>> get_opt_int(const Object& o, const std::string& where, const std::string& key) {
  auto it = o.find(key);
  if (it == o.end() || std::holds_alternative<std::nullptr_t>(it->second.v)) return std::optional<int>();
  const double* d = std::get_if<double>(&it->second.v);
  if (d == nullptr || *d != std::floor(*d) || *d < -1e9 || *d > 1e9) return field_error(where, key, "an integer or null");
  return std::optional<int>(static_cast<int>(*d));
}
Result<int> get_int(const Object& o, const std::string& where, const std::string& key) {
  auto v = get_opt_int(o, where, key);
  if (!v) return v.status();
  if (!*v) return field_error(where, key, "an integer");
  return **v;
}

std::string cell(const std::optional<std::string>& s) { return s ? *s : "-"; }
std::string cell(const std::optional<int>& v) { return v ? std::to_string(*v) : "-"; }

}  // namespace

std::string to_json(const std::vector<Inventory>& hosts) {
  std::string out = "{\"hosts\": [";
  for (size_t h = 0; h < hosts.size(); ++h) {
    const Inventory& inv = hosts[h];
    if (h) out += ", ";
    out += "{\"host\": ";
    put_string(out, inv.host);
    out += ", \"cpus\": " + std::to_string(inv.cpus);
    out += ", \"numa_nodes\": " + std::to_string(inv.numa_nodes);
    out += ", \"labels\": {\"pod\": ";
    put_opt(out, inv.labels.pod);
    out += ", \"zone\": ";
    put_opt(out, inv.labels.zone);
    out += ", \"region\": ";
    put_opt(out, inv.labels.region);
    out += "}, \"accelerators\": [";
    for (size_t i = 0; i < inv.accelerators.size(); ++i) {
      const Accelerator& a = inv.accelerators[i];
      if (i) out += ", ";
      out += "{\"resource\": ";
      put_string(out, a.resource);
      out += ", \"id\": " + std::to_string(a.id) + ", \"type\": ";
      put_string(out, a.type);
      out += ", \"pci\": ";
      put_opt(out, a.pci);
      out += ", \"numa\": ";
      put_opt(out, a.numa);
      out += ", \"cpus\": ";
      put_opt(out, a.cpus);
      out += ", \"uuid\": ";
      put_opt(out, a.uuid);
      out += std::string(", \"logical\": ") + (a.logical ? "true" : "false") + "}";
    }
    out += "]}";
  }
  out += "]}\n";
  return out;
}

Result<std::vector<Inventory>> from_json(std::string_view json) {
  auto root = Parser(json).parse();
  if (!root) return root.status();
  const Object* top = as_object(*root);
  if (top == nullptr || !top->count("hosts") || !as_array(top->at("hosts"))) {
    return invalid_argument("inventory JSON: expected an object with a \"hosts\" array");
  }
  std::vector<Inventory> out;
  const Array& hosts = *as_array(top->at("hosts"));
  for (size_t h = 0; h < hosts.size(); ++h) {
    const std::string where = "hosts[" + std::to_string(h) + "]";
    const Object* o = as_object(hosts[h]);
    if (o == nullptr) return invalid_argument("inventory JSON: " + where + " must be an object");
    Inventory inv;
    auto host = get_string(*o, where, "host");
    if (!host) return host.status();
    inv.host = *host;
    auto cpus = get_int(*o, where, "cpus");
    if (!cpus) return cpus.status();
    inv.cpus = *cpus;
    auto numa = get_int(*o, where, "numa_nodes");
    if (!numa) return numa.status();
    inv.numa_nodes = *numa;
    if (auto it = o->find("labels"); it != o->end() && !std::holds_alternative<std::nullptr_t>(it->second.v)) {
      const Object* l = as_object(it->second);
      if (l == nullptr) return field_error(where, "labels", "an object");
      auto pod = get_opt_string(*l, where + ".labels", "pod");
      auto zone = get_opt_string(*l, where + ".labels", "zone");
      auto region = get_opt_string(*l, where + ".labels", "region");
      if (!pod) return pod.status();
      if (!zone) return zone.status();
      if (!region) return region.status();
      inv.labels = Labels{*pod, *zone, *region};
    }
    if (auto it = o->find("accelerators"); it != o->end()) {
      const Array* accs = as_array(it->second);
      if (accs == nullptr) return field_error(where, "accelerators", "an array");
      for (size_t i = 0; i < accs->size(); ++i) {
        const std::string w = where + ".accelerators[" + std::to_string(i) + "]";
        const Object* ao = as_object((*accs)[i]);
        if (ao == nullptr) return invalid_argument("inventory JSON: " + w + " must be an object");
        Accelerator a;
        auto res = get_string(*ao, w, "resource");
        if (!res) return res.status();
        auto canon = canonical_resource(*res);
        if (!canon) return canon.status().with_context("inventory JSON: " + w);
        a.resource = *canon;
        auto id = get_int(*ao, w, "id");
        if (!id) return id.status();
        if (*id < 0) return field_error(w, "id", "0 or more");
        a.id = *id;
        auto type = get_opt_string(*ao, w, "type");
        if (!type) return type.status();
        a.type = type->value_or("");
        auto pci = get_opt_string(*ao, w, "pci");
        auto an = get_opt_int(*ao, w, "numa");
        auto ac = get_opt_string(*ao, w, "cpus");
        auto uuid = get_opt_string(*ao, w, "uuid");
        if (!pci) return pci.status();
        if (!an) return an.status();
        if (!ac) return ac.status();
        if (!uuid) return uuid.status();
        a.pci = *pci;
        a.numa = *an;
        a.cpus = *ac;
        a.uuid = *uuid;
        if (auto lit = ao->find("logical"); lit != ao->end()) {
          const bool* b = std::get_if<bool>(&lit->second.v);
          if (b == nullptr) return field_error(w, "logical", "true or false");
          a.logical = *b;
        }
        // The vendor is not in the JSON: the type's maker, else the resource's default.
        a.vendor = vendor_of_type(a.type);
        if (a.vendor.empty() || resource_of_type(a.type) != a.resource) a.vendor = default_vendor(a.resource);
        inv.accelerators.push_back(std::move(a));
      }
    }
    out.push_back(std::move(inv));
  }
  return out;
}

std::string format_table(const std::vector<Inventory>& hosts) {
  std::string out;
  for (const Inventory& inv : hosts) {
    out += inv.host + ": " + std::to_string(inv.cpus) + " CPUs, " + std::to_string(inv.numa_nodes) +
           (inv.numa_nodes == 1 ? " NUMA node" : " NUMA nodes");
    std::string labels;
    if (inv.labels.pod) labels += " pod=" + *inv.labels.pod;
    if (inv.labels.zone) labels += " zone=" + *inv.labels.zone;
    if (inv.labels.region) labels += " region=" + *inv.labels.region;
    if (!labels.empty()) out += ", labels:" + labels;
    if (inv.topology_from_xml) out += " (topology from an XML file)";
    out += "\n";
    if (inv.accelerators.empty()) {
      out += "  no accelerators detected\n";
      continue;
    }
    std::vector<std::vector<std::string>> rows = {{"RESOURCE", "ID", "TYPE", "PCI", "NUMA", "CPUS", "UUID", ""}};
    for (const Accelerator& a : inv.accelerators) {
      rows.push_back({a.resource, std::to_string(a.id), a.type.empty() ? "-" : a.type, cell(a.pci), cell(a.numa),
                      cell(a.cpus), cell(a.uuid), a.logical ? "logical" : ""});
    }
    std::vector<size_t> width(rows[0].size(), 0);
    for (const auto& r : rows)
      for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
    for (const auto& r : rows) {
      std::string line = " ";
      for (size_t c = 0; c < r.size(); ++c) {
        line += ' ' + r[c];
        if (c + 1 < r.size()) line += std::string(width[c] - r[c].size() + 1, ' ');
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line + "\n";
    }
  }
  return out;
}

}  // namespace accrun::detect
