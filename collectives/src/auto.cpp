// AUTO backend selection (docs/design.md §5, accrun(7) BACKENDS).
//
// A pure function of facts the runtime gathered from every member during
// group init: every member evaluates the same facts in the same order and so
// picks the same backend, without another exchange.
#include <map>
#include <string>
#include <utility>

#include "accrun/backend.hpp"

namespace accrun::collectives {
namespace {

std::string member_text(std::size_t g, const MemberFacts& f) {
  return "group rank " + std::to_string(g) + (f.host.empty() ? std::string() : " on " + f.host);
}

// Empty when NCCL fits the group, else why not.
std::string nccl_misfit(const std::vector<MemberFacts>& facts) {
  for (std::size_t g = 0; g < facts.size(); ++g) {
    const MemberFacts& f = facts[g];
    if (f.gpu_ids.empty()) return member_text(g, f) + " holds no GPU";
    if (!f.gpus_whole) return member_text(g, f) + " holds a fraction of a GPU";
    if (f.gpu_ids.size() != 1) {
      return member_text(g, f) + " holds " + std::to_string(f.gpu_ids.size()) + " GPUs (NCCL needs exactly one)";
    }
    if (!f.nccl_loadable) return "NCCL does not load on " + member_text(g, f);
  }
  return gpu_sharing(facts);
}

}  // namespace

std::string gpu_sharing(const std::vector<MemberFacts>& facts) {
  std::map<std::pair<std::string, int>, std::size_t> holder;  // (host, GPU id) -> first member holding it
  for (std::size_t g = 0; g < facts.size(); ++g) {
    for (int id : facts[g].gpu_ids) {
      auto [it, fresh] = holder.emplace(std::make_pair(facts[g].host, id), g);
      if (!fresh) {
        return member_text(it->second, facts[it->second]) + " and group rank " + std::to_string(g) +
               " share GPU " + std::to_string(id);
      }
    }
  }
  return {};
}

BackendKind resolve_auto(const std::vector<MemberFacts>& facts, std::string* why) {
  std::string reason;
  BackendKind kind = BackendKind::kStore;
  if (facts.empty()) {
    reason = "store: no member facts";
  } else if (std::string misfit = nccl_misfit(facts); misfit.empty()) {
    kind = BackendKind::kNccl;
    reason = "nccl: every member holds one whole, distinct GPU and NCCL loads";
  } else {
    std::string no_mpi;
    for (std::size_t g = 0; g < facts.size() && no_mpi.empty(); ++g) {
      if (!facts[g].mpi_initialized) no_mpi = member_text(g, facts[g]) + " has not initialised MPI";
    }
    if (no_mpi.empty()) {
      kind = BackendKind::kMpi;
      reason = "mpi: not nccl (" + misfit + "); every member has initialised MPI";
    } else {
      reason = "store: not nccl (" + misfit + "); not mpi (" + no_mpi + ")";
    }
  }
  if (why != nullptr) *why = std::move(reason);
  return kind;
}

}  // namespace accrun::collectives
