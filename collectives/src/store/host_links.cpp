#include "store/host_links.hpp"

#include <algorithm>
#include <chrono>

#include "accrun/config.h"
#include "store/tcp_transport.hpp"
#if ACCRUN_HAVE_LIBFABRIC
#include "store/fabric_transport.hpp"
#endif

namespace accrun::collectives::store {

Result<std::string> lookup_published(Rendezvous* rv, const std::string& key, const PeerMonitor* peers,
                                     const std::vector<Member>& members, int peer, const Wait& w) {
  // Asked in slices, the job's word on the member between them.
  constexpr long long kSliceMs = 250;
  const auto start = Clock::now();
  for (;;) {
    if (peers != nullptr)
      if (auto f = peers->failure(members[static_cast<std::size_t>(peer)].job_rank))
        return remote_error("the job reports it failed: " + *f);
    long long slice = kSliceMs;
    if (w.deadline != Clock::time_point::max())
      slice = std::clamp<long long>(
          std::chrono::duration_cast<std::chrono::milliseconds>(w.deadline - Clock::now()).count(), 0, kSliceMs);
    Result<std::string> v = rv->lookup(key, static_cast<int>(slice));
    if (v.is_ok() || v.status().code() != Code::kTimeout) return v;
    if (Clock::now() >= w.deadline) {
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
      return timeout_error("key '" + key + "' not published within " + std::to_string(waited) + " ms");
    }
  }
}

Result<std::unique_ptr<HostLinks>> make_host_links(const std::string& transport, const GroupContext& ctx,
                                                   std::vector<bool> needs, std::size_t pair_buffer_max) {
  if (transport.empty() || transport == "tcp") {
    auto t = TcpTransport::create(ctx, std::move(needs), pair_buffer_max);
    if (!t.is_ok()) return t.status();
    return std::unique_ptr<HostLinks>(std::move(t).value());
  }
  if (transport == "libfabric") {
#if ACCRUN_HAVE_LIBFABRIC
    auto t = FabricTransport::create(ctx, std::move(needs), pair_buffer_max);
    if (!t.is_ok()) return t.status();
    return std::unique_ptr<HostLinks>(std::move(t).value());
#else
    return not_supported("group '" + ctx.name +
                         "': ACCRUN_STORE_TRANSPORT=libfabric, but this accrun was built without libfabric "
                         "(ACCRUN_WITH_LIBFABRIC; accrun --version lists the transports)");
#endif
  }
  return invalid_argument("group '" + ctx.name + "': ACCRUN_STORE_TRANSPORT='" + transport +
                          "': expected tcp or libfabric");
}

}  // namespace accrun::collectives::store
