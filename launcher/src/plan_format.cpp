// The plan as `accrun --dry-run` prints it: a readable table, and the JSON
// object of docs/design.md §9.  Both are built by appending to one string, so
// 80,000 ranks print in milliseconds.
#include <algorithm>
#include <cstdio>

#include "accrun/json.hpp"
#include "accrun/plan.hpp"

namespace accrun::launcher {
namespace {

using accrun::append_json_string;

// "GPU 0 (0.5)", "GPU 0,1", "TPU 0-3; HPU 2".
std::string devices_text(const RankPlan& r) {
  std::string out;
  std::size_t i = 0;
  while (i < r.devices.size()) {
    const std::string& res = r.devices[i].resource;
    std::string ids;
    std::string fraction;
    for (; i < r.devices.size() && r.devices[i].resource == res; ++i) {
      if (!ids.empty()) ids += ',';
      ids += std::to_string(r.devices[i].id);
      if (!r.devices[i].fraction.is_whole()) fraction = r.devices[i].fraction.str();
    }
    if (!out.empty()) out += "; ";
    out += res + " " + ids;
    if (!fraction.empty()) out += " (" + fraction + ")";
  }
  return out.empty() ? "-" : out;
}

void pad(std::string& out, const std::string& cell, std::size_t width) {
  out += cell;
  if (cell.size() < width) out.append(width - cell.size(), ' ');
}

}  // namespace

std::string format_plan_table(const Plan& plan) {
  struct Row {
    std::string rank, host, local, devices, cpus, pod;
  };
  std::vector<Row> rows;
  rows.reserve(plan.ranks.size());
  Row head{"RANK", "HOST", "LOCAL", "DEVICES", "CPUS", "POD"};
  std::size_t w[5] = {head.rank.size(), head.host.size(), head.local.size(), head.devices.size(),
                      head.cpus.size()};
  for (const auto& r : plan.ranks) {
    const auto& inv = plan.hosts[static_cast<std::size_t>(r.host)].inventory;
    Row row{std::to_string(r.rank), inv.host, std::to_string(r.local_rank), devices_text(r),
            r.cpus.empty() ? "-" : r.cpus, inv.labels.pod ? *inv.labels.pod : "-"};
    w[0] = std::max(w[0], row.rank.size());
    w[1] = std::max(w[1], row.host.size());
    w[2] = std::max(w[2], row.local.size());
    w[3] = std::max(w[3], row.devices.size());
    w[4] = std::max(w[4], row.cpus.size());
    rows.push_back(std::move(row));
  }
  std::string out;
  out.reserve((rows.size() + 2) * (w[0] + w[1] + w[2] + w[3] + w[4] + 16));
  auto line = [&](const Row& row) {
    pad(out, row.rank, w[0] + 2);
    pad(out, row.host, w[1] + 2);
    pad(out, row.local, w[2] + 2);
    pad(out, row.devices, w[3] + 2);
    pad(out, row.cpus, w[4] + 2);
    out += row.pod;
    out += '\n';
  };
  line(head);
  for (const auto& row : rows) line(row);
  out += std::to_string(plan.ranks.size()) + " rank" + (plan.ranks.size() == 1 ? "" : "s") + " on " +
         std::to_string(plan.hosts.size()) + " host" + (plan.hosts.size() == 1 ? "" : "s");
  if (plan.oversubscribed) out += " (oversubscribed)";
  out += '\n';
  return out;
}

std::string plan_to_json(const Plan& plan) {
  std::string out;
  out.reserve(plan.ranks.size() * 900 + 64);
  out += "{\"ranks\": [";
  bool first_rank = true;
  for (const auto& r : plan.ranks) {
    out += first_rank ? "\n  " : ",\n  ";
    first_rank = false;
    out += "{\"rank\": ";
    out += std::to_string(r.rank);
    out += ", \"host\": ";
    append_json_string(out, plan.hosts[static_cast<std::size_t>(r.host)].inventory.host);
    out += ", \"cpus\": ";
    append_json_string(out, r.cpus);
    out += ", \"accelerators\": [";
    bool first = true;
    for (const auto& d : r.devices) {
      if (!first) out += ", ";
      first = false;
      out += "{\"resource\": ";
      append_json_string(out, d.resource);
      out += ", \"id\": ";
      out += std::to_string(d.id);
      out += ", \"fraction\": ";
      // Quantity::str() is the exact decimal ("0.5", "1"): a valid JSON number.
      out += d.fraction.str();
      out += '}';
    }
    out += "], \"env\": {";
    first = true;
    for (const auto& [k, v] : r.env) {
      if (!first) out += ", ";
      first = false;
      append_json_string(out, k);
      out += ": ";
      append_json_string(out, v);
    }
    out += "}}";
  }
  out += plan.ranks.empty() ? "]}\n" : "\n]}\n";
  return out;
}

}  // namespace accrun::launcher
