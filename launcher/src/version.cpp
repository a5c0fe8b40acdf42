#include "version.hpp"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "accrun/config.h"

namespace accrun::launcher {
namespace {

// Whether `path` is a shared object this process's loader could take: an ELF
// file of its class and machine.
bool same_machine_elf(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ElfW(Ehdr) eh{};
  bool ok = read(fd, &eh, sizeof eh) == static_cast<ssize_t>(sizeof eh);
  close(fd);
#if defined(__x86_64__)
  constexpr int kMachine = EM_X86_64;
#elif defined(__aarch64__)
  constexpr int kMachine = EM_AARCH64;
#else
  constexpr int kMachine = -1;
#endif
  return ok && std::memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0 &&
         eh.e_ident[EI_CLASS] == (sizeof(void*) == 8 ? ELFCLASS64 : ELFCLASS32) &&
         (kMachine < 0 || eh.e_machine == kMachine);
}

// The paths /etc/ld.so.cache gives for `soname` ("glibc-ld.so.cache1.1":
// a 48-byte header, then 24-byte entries whose key and value are offsets of
// strings from the header's start).  The file is read once.
std::vector<std::string> cached_paths(const std::string& soname) {
  static const std::string d = [] {
    std::ifstream f("/etc/ld.so.cache", std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  }();
  std::vector<std::string> out;
  constexpr char kMagic[] = "glibc-ld.so.cache1.1";
  constexpr size_t kHeader = 48, kEntry = 24;
  if (d.size() < kHeader || d.compare(0, sizeof kMagic - 1, kMagic) != 0) return out;
  auto u32 = [&](size_t at) {
    uint32_t v;
    std::memcpy(&v, d.data() + at, sizeof v);
    return v;
  };
  auto str = [&](uint32_t at) { return at < d.size() ? std::string(d.c_str() + at) : std::string(); };
  const uint32_t n = u32(20);
  for (uint32_t i = 0; i < n && kHeader + (i + 1) * kEntry <= d.size(); ++i) {
    const size_t e = kHeader + i * kEntry;
    if (str(u32(e + 4)) == soname) out.push_back(str(u32(e + 8)));
  }
  return out;
}

// Whether a shared library can be found here as the dynamic loader looks
// for it (LD_LIBRARY_PATH, its cache, the default directories), without
// loading it: loading runs the library's constructors and whatever it pulls
// in (libfabric's PSM providers calibrate a clock for ~200 ms).
bool findable(const char* soname) {
  if (void* h = dlopen(soname, RTLD_LAZY | RTLD_NOLOAD)) {
    dlclose(h);
    return true;
  }
  std::vector<std::string> candidates;
  if (const char* lp = std::getenv("LD_LIBRARY_PATH")) {
    std::string dirs = lp;
    for (size_t pos = 0; pos <= dirs.size();) {
      size_t end = dirs.find_first_of(":;", pos);
      if (end == std::string::npos) end = dirs.size();
      std::string dir = dirs.substr(pos, end - pos);
      if (!dir.empty()) candidates.push_back(dir + "/" + soname);
      pos = end + 1;
    }
  }
  for (std::string& p : cached_paths(soname)) candidates.push_back(std::move(p));
  // The default directories: libc's own (/lib/<multiarch> on Debian), its
  // /usr twin, then the generic ones.
  std::vector<std::string> dirs;
  Dl_info libc{};
  if (dladdr(reinterpret_cast<void*>(&std::strlen), &libc) != 0 && libc.dli_fname != nullptr) {
    std::string dir = libc.dli_fname;
    dir.erase(dir.rfind('/') == std::string::npos ? 0 : dir.rfind('/'));
    if (!dir.empty()) {
      dirs.push_back(dir);
      if (dir.rfind("/usr/", 0) != 0) dirs.push_back("/usr" + dir);
    }
  }
  for (const char* dir : {"/lib64", "/usr/lib64", "/lib", "/usr/lib"}) dirs.emplace_back(dir);
  for (const std::string& dir : dirs) candidates.push_back(dir + "/" + soname);
  for (const std::string& c : candidates)
    if (same_machine_elf(c)) return true;
  return false;
}

std::string part(const char* name, bool built, const char* soname) {
  std::string s = std::string("  ") + name + ": " + (built ? "built" : "not built");
  if (soname != nullptr) s += std::string(", ") + soname + (findable(soname) ? " found" : " not found");
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
