#include "store/host_links.hpp"

#include "accrun/config.h"
#include "store/tcp_transport.hpp"
#if ACCRUN_HAVE_LIBFABRIC
#include "store/fabric_transport.hpp"
#endif

namespace accrun::collectives::store {

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
