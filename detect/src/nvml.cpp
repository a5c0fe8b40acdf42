// NVML through dlopen: never linked, optional at run time.  Only the calls
// below are used (and the test-built fake library implements exactly these).
// The structures are declared here with nvml.h's layout: nvmlPciInfo_t as
// nvmlDeviceGetPciInfo_v3 fills it (busIdLegacy first, the 32-byte busId
// last), and the unversioned nvmlGpuFabricInfo_t that
// nvmlDeviceGetGpuFabricInfo fills (newer drivers also offer the versioned
// nvmlDeviceGetGpuFabricInfoV, whose struct begins with a version field and
// is not the same layout).  The symbols are the
// versioned ones nvml.h maps its names to (nvmlInit → nvmlInit_v2, …).
#include <dlfcn.h>

#include <cstdio>
#include <cstring>

#include "accrun/log.hpp"
#include "internal.hpp"

namespace accrun::detect::internal {
namespace {

using nvmlReturn_t = int;
using nvmlDevice_t = void*;
constexpr nvmlReturn_t kSuccess = 0;

struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
};

struct nvmlGpuFabricInfo_t {
  unsigned char clusterUuid[16];
  nvmlReturn_t status;
  unsigned int cliqueId;
  unsigned char state;  // nvmlGpuFabricState_t
};
constexpr unsigned char kFabricCompleted = 3;

// dlclose on scope exit.
class Library {
 public:
  explicit Library(const std::string& name) : handle_(::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) {}
  ~Library() {
    if (handle_ != nullptr) ::dlclose(handle_);
  }
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  explicit operator bool() const { return handle_ != nullptr; }
  template <class F>
  F sym(const char* name) const {
    return reinterpret_cast<F>(::dlsym(handle_, name));
  }

 private:
  void* handle_;
};

std::string format_uuid(const unsigned char* b) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return buf;
}

}  // namespace

std::optional<std::vector<NvmlGpu>> query_nvml(const std::string& library) {
  if (library.empty()) return std::nullopt;
  Library lib(library);
  if (!lib) {
    // The driver's library missing is a host without NVIDIA's driver; a
    // path that does not load was chosen (ACCRUN_NVML_LIBRARY) and is said.
    const bool chosen = library.find('/') != std::string::npos;
    log(chosen ? LogLevel::kWarn : LogLevel::kDebug,
        "NVML library %s not loaded (%s); NVIDIA GPUs are found through sysfs alone",
        library.c_str(), ::dlerror());
    return std::nullopt;
  }
  using InitFn = nvmlReturn_t (*)();
  using CountFn = nvmlReturn_t (*)(unsigned int*);
  using HandleFn = nvmlReturn_t (*)(unsigned int, nvmlDevice_t*);
  using StringFn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int);
  using PciFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlPciInfo_t*);
  using FabricFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlGpuFabricInfo_t*);
  auto init = lib.sym<InitFn>("nvmlInit_v2");
  auto shutdown = lib.sym<InitFn>("nvmlShutdown");
  auto count = lib.sym<CountFn>("nvmlDeviceGetCount_v2");
  auto handle = lib.sym<HandleFn>("nvmlDeviceGetHandleByIndex_v2");
  auto name = lib.sym<StringFn>("nvmlDeviceGetName");
  auto uuid = lib.sym<StringFn>("nvmlDeviceGetUUID");
  auto pci = lib.sym<PciFn>("nvmlDeviceGetPciInfo_v3");
  // Older drivers: _v2 fills the older layout, whose 16-byte busId sits where
  // busIdLegacy is now (the numeric fields keep their places).
  const bool legacy_pci = pci == nullptr;
  if (legacy_pci) pci = lib.sym<PciFn>("nvmlDeviceGetPciInfo_v2");
  auto fabric = lib.sym<FabricFn>("nvmlDeviceGetGpuFabricInfo");  // newer drivers only
  if (!init || !shutdown || !count || !handle || !name || !uuid || !pci) {
    log(LogLevel::kWarn, "%s lacks the NVML calls accrun uses; ignoring it", library.c_str());
    return std::nullopt;
  }
  if (init() != kSuccess) {
    log(LogLevel::kDebug, "nvmlInit failed; GPU names come from sysfs only");
    return std::nullopt;
  }
  std::vector<NvmlGpu> out;
  unsigned int n = 0;
  if (count(&n) == kSuccess) {
    for (unsigned int i = 0; i < n; ++i) {
      nvmlDevice_t dev = nullptr;
      if (handle(i, &dev) != kSuccess) continue;
      nvmlPciInfo_t info;
      std::memset(&info, 0, sizeof info);
      if (pci(dev, &info) != kSuccess) continue;
      // busId is "00000000:3B:00.0"; rebuild the sysfs form from the fields
      // and the function digit at its end (sysfs prints the domain with at
      // least four digits, more when it needs them).
      info.busId[sizeof info.busId - 1] = '\0';
      info.busIdLegacy[sizeof info.busIdLegacy - 1] = '\0';
      const char* text = legacy_pci ? info.busIdLegacy : info.busId;
      const char* dot = std::strrchr(text, '.');
      unsigned function = dot != nullptr && dot[1] >= '0' && dot[1] <= '7' ? static_cast<unsigned>(dot[1] - '0') : 0;
      char bdf[40];
      std::snprintf(bdf, sizeof bdf, "%04x:%02x:%02x.%x", info.domain, info.bus & 0xff, info.device & 0x1f,
                    function);
      NvmlGpu g;
      g.pci = bdf;
      char buf[96];
      std::memset(buf, 0, sizeof buf);
      if (name(dev, buf, sizeof buf - 1) == kSuccess) g.name = buf;
      std::memset(buf, 0, sizeof buf);
      if (uuid(dev, buf, sizeof buf - 1) == kSuccess) g.uuid = buf;
      if (fabric != nullptr) {
        nvmlGpuFabricInfo_t f;
        std::memset(&f, 0, sizeof f);
        static constexpr unsigned char kZero[16] = {};
        if (fabric(dev, &f) == kSuccess && f.state == kFabricCompleted && f.status == kSuccess &&
            std::memcmp(f.clusterUuid, kZero, sizeof kZero) != 0) {
          g.clique = format_uuid(f.clusterUuid) + "." + std::to_string(f.cliqueId);
        }
      }
      out.push_back(std::move(g));
    }
  }
  shutdown();
  return out;
}

}  // namespace accrun::detect::internal
