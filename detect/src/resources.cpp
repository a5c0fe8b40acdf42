// The provider registry, the resource names and per-rank quantity rules.
#include <algorithm>
#include <cctype>

#include "internal.hpp"

namespace accrun::detect {

const std::vector<std::unique_ptr<Provider>>& providers() {
  // Priority order: the first vendor with devices of a resource wins it.
  static const std::vector<std::unique_ptr<Provider>> kProviders = [] {
    std::vector<std::unique_ptr<Provider>> v;
    v.push_back(internal::make_nvidia_provider());
    v.push_back(internal::make_amd_provider());
    v.push_back(internal::make_intel_provider());
    v.push_back(internal::make_tpu_provider());
    v.push_back(internal::make_gaudi_provider());
    v.push_back(internal::make_ascend_provider());
    v.push_back(internal::make_neuron_provider());
    return v;
  }();
  return kProviders;
}

const Provider* provider_for_vendor(std::string_view vendor) {
  for (const auto& p : providers()) {
    if (p->vendor() == vendor) return p.get();
  }
  return nullptr;
}

const std::vector<std::string>& resource_names() {
  static const std::vector<std::string> kNames = {"GPU", "TPU", "HPU", "NPU", "neuron_cores"};
  return kNames;
}

Result<std::string> canonical_resource(std::string_view name) {
  std::string n = internal::trim(name);
  for (const auto& r : resource_names()) {
    if (internal::lower(r) == internal::lower(n)) return r;
  }
  std::string known;
  for (const auto& r : resource_names()) known += (known.empty() ? "" : ", ") + r;
  return invalid_argument("unknown resource '" + n + "' (known resources: " + known + ")");
}

std::string default_vendor(std::string_view resource) {
  if (resource == "GPU") return "nvidia";
  if (resource == "TPU") return "google";
  if (resource == "HPU") return "habana";
  if (resource == "NPU") return "huawei";
  if (resource == "neuron_cores") return "aws";
  return {};
}

Status validate_request(std::string_view resource, Quantity q) {
  auto name = canonical_resource(resource);
  if (!name) return name.status();
  if (q.is_zero()) return Status::ok();
  const std::string& r = *name;
  const std::string shown = r + "=" + q.str();
  if (r == "TPU") {
    if (!q.is_whole() || (q.whole_part() != 1 && q.whole_part() != 2 && q.whole_part() != 4 &&
                          q.whole_part() != 8)) {
      return invalid_argument(shown + ": a rank takes 1, 2, 4 or 8 TPU chips");
    }
    return Status::ok();
  }
  if (r == "HPU" || r == "neuron_cores") {
    if (!q.is_whole()) return invalid_argument(shown + ": " + r + " takes whole quantities only (1, 2, ...)");
    return Status::ok();
  }
  // GPU and NPU: fractions below one share a device; one or more must be whole.
  if (q.units() > Quantity::kScale && !q.is_whole()) {
    return invalid_argument(shown + ": a quantity of 1 or more must be whole (fractions share one device: use a value below 1 such as 0.5)");
  }
  return Status::ok();
}

Result<std::vector<std::pair<std::string, Quantity>>> parse_resource_list(std::string_view text) {
  std::vector<std::pair<std::string, Quantity>> out;
  std::string t = internal::trim(text);
  if (t.empty()) return invalid_argument("empty resource list (expected NAME=Q[,NAME=Q...])");
  for (const std::string& raw : internal::split(t, ',')) {
    std::string item = internal::trim(raw);
    size_t sep = item.find_first_of("=:");
    if (sep == std::string::npos || sep == 0) {
      return invalid_argument("'" + item + "' is not NAME=Q (for example GPU=4)");
    }
    auto name = canonical_resource(item.substr(0, sep));
    if (!name) return name.status();
    auto q = Quantity::parse(internal::trim(item.substr(sep + 1)));
    if (!q) return q.status().with_context("'" + item + "'");
    if (!q->is_whole()) {
      return invalid_argument("'" + item + "': a host has whole devices; give a whole count");
    }
    for (const auto& [n, _] : out) {
      if (n == *name) return invalid_argument("'" + item + "': " + *name + " is given twice");
    }
    out.emplace_back(*name, *q);
  }
  return out;
}

}  // namespace accrun::detect
