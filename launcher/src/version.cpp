#include "version.hpp"

#include <dlfcn.h>

#include <string>

#include "accrun/config.h"

namespace accrun::launcher {
namespace {

// Whether a shared library can be loaded here; it is unloaded again.
bool loadable(const char* soname) {
  void* h = dlopen(soname, RTLD_LAZY | RTLD_LOCAL);
  if (h == nullptr) return false;
  dlclose(h);
  return true;
}

std::string part(const char* name, bool built, const char* soname) {
  std::string s = std::string("  ") + name + ": " + (built ? "built" : "not built");
  if (soname != nullptr) s += std::string(", ") + soname + (loadable(soname) ? " found" : " not found");
  return s + "\n";
}

}  // namespace

std::string version_text() {
  std::string s = "accrun " ACCRUN_VERSION_STRING "\n";
  s += part("MPI backend", ACCRUN_HAVE_MPI != 0, "libmpi.so.40");
  s += part("NCCL backend", ACCRUN_HAVE_NCCL != 0, "libnccl.so.2");
  s += part("CUDA runtime", ACCRUN_HAVE_NCCL != 0, "libcudart.so.13");
  // The store's transports: what its groups can actually use.
  s += std::string("  store transports: shm (inside a host), tcp (between hosts, the default)") +
       (ACCRUN_HAVE_LIBFABRIC != 0 ? ", libfabric (between hosts: ACCRUN_STORE_TRANSPORT=libfabric)" : "") + "\n";
  if (ACCRUN_HAVE_LIBFABRIC != 0)
    s += part("libfabric transport", true, "libfabric.so.1");
  else
    s += "  libfabric transport: not built (libfabric was not found when accrun was built)\n";
  s += part("NVML (detection)", true, "libnvidia-ml.so.1");
  return s;
}

}  // namespace accrun::launcher
