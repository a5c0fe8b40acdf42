// api.cpp — the C API of <accrun/accrun.h>: argument checks, the process's
// runtime state, and the boundary no C++ exception crosses.
//
// The C API is a process-wide interface (accrun_init has no handle), so the
// runtime state is the one global of libaccrun, kept in this file behind a
// shared mutex: the job-context and object-store calls take it shared,
// accrun_init/accrun_finalize exclusive.  The data calls on a group take
// only that group's call lock (see accrun_group_s): accrun_finalize destroys
// every group, under each group's lock, before it deletes the runtime.
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <string>
#include <vector>

#include "accrun/accrun.h"
#include "accrun/backend.hpp"
#include "accrun/log.hpp"
#include "accrun/strings.hpp"
#include "call_lock.hpp"
#include "config.hpp"
#include "directory.hpp"
#include "fork_guard.hpp"
#include "groups.hpp"
#include "object_store.hpp"
#include "peers.hpp"
#include "pmix_client.hpp"

#define ACCRUN_API extern "C" __attribute__((visibility("default")))

using accrun::Code;
using accrun::Result;
using accrun::Status;
namespace coll = accrun::collectives;
namespace rt = accrun::runtime;

namespace {

// cudaPointerGetAttributes, found only if the program already loaded the
// CUDA runtime: libaccrun never loads it to check a pointer.
struct CudaPointerAttributes {
  int type;  // cudaMemoryType: 2 = device
  int device;
  void* device_pointer;
  void* host_pointer;
};
using CudaPointerGetAttributesFn = int (*)(CudaPointerAttributes*, const void*);
using CudaGetLastErrorFn = int (*)();

}  // namespace

// A group handle.  A handle is never freed while the process runs: destroying
// the group (or accrun_finalize) releases the group and leaves this small
// shell, so a call on a destroyed group, even after accrun_finalize, reads a
// valid handle and fails cleanly.  The magic number catches most pointers that
// never were a handle.  A data call takes only the handle's call lock, which
// keeps the C layer's cost per call small: from the thread that made the
// handle, without a locked instruction (call_lock.hpp).
struct accrun_group_s {
  static constexpr std::uint64_t kMagic = 0x61636372756e6770ull;  // "accrungp"
  std::uint64_t magic = kMagic;
  rt::CallLock lock;  // serialises the calls on the group, its destruction and accrun_finalize's
  // Guarded by `lock`:
  std::shared_ptr<rt::Group> group;  // null once destroyed
  bool finalized = false;            // destroyed by accrun_finalize rather than accrun_group_destroy
  // Copied from the runtime when the handle is made.
  CudaPointerGetAttributesFn cuda_attrs = nullptr;
  CudaGetLastErrorFn cuda_last_error = nullptr;
};

namespace {

// Every handle ever made; never destroyed (see accrun_group_s).
std::mutex g_handles_mu;
std::vector<std::unique_ptr<accrun_group_s>>& all_handles() {
  static auto* handles = new std::vector<std::unique_ptr<accrun_group_s>>();
  return *handles;
}

struct Runtime {
  rt::RuntimeConfig cfg;
  int rank = 0, size = 1, local_rank = 0, local_size = 1, node_rank = 0;
  std::string host;
  std::unique_ptr<rt::PeerTable> peers;
  std::unique_ptr<rt::PmixClient> pmix;
  std::unique_ptr<rt::MemoryDirectory> lone_directory;
  rt::Directory* directory = nullptr;
  std::string shm_dir;
  bool remove_shm_dir = false;  // a directory this process made (lone process)
  int owner_fd = -1;            // its owner lock (make_private_dir)
  std::unique_ptr<rt::ObjectStore> store;
  std::unique_ptr<rt::GroupManager> groups;
  std::vector<accrun_group_s*> handles;  // made in this runtime; guarded by g_handles_mu
  CudaPointerGetAttributesFn cuda_attrs = nullptr;
  CudaGetLastErrorFn cuda_last_error = nullptr;

  ~Runtime() {
    // Backends first (they use the directory and peers), then the store,
    // then PMIx, then the private directory.
    std::lock_guard handles_lock(g_handles_mu);
    for (accrun_group_s* h : handles) {
      std::lock_guard call(h->lock);  // waits for a call in progress
      if (h->group == nullptr) continue;
      (void)groups->destroy(*h->group);
      h->group.reset();
      h->finalized = true;
    }
    handles.clear();
    groups.reset();
    store.reset();
    (void)coll::mpi_finalize_owned();
    pmix.reset();
    if (remove_shm_dir) {
      std::error_code ec;
      std::filesystem::remove_all(shm_dir, ec);
    }
    if (owner_fd >= 0) ::close(owner_fd);
  }
};

// The library's state lock: every call holds it shared, init and finalize
// alone.  glibc's default read-write lock lets new readers in while a
// writer waits, so threads that kept calling starved accrun_finalize for
// ever; this one lets no new reader in while a writer waits (no call takes
// it twice, which would then deadlock).
class StateMutex {
 public:
  StateMutex() {
    pthread_rwlockattr_t a;
    pthread_rwlockattr_init(&a);
    pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&l_, &a);
    pthread_rwlockattr_destroy(&a);
  }
  StateMutex(const StateMutex&) = delete;
  StateMutex& operator=(const StateMutex&) = delete;
  void lock() { pthread_rwlock_wrlock(&l_); }
  void unlock() { pthread_rwlock_unlock(&l_); }
  void lock_shared() { pthread_rwlock_rdlock(&l_); }
  void unlock_shared() { pthread_rwlock_unlock(&l_); }

 private:
  pthread_rwlock_t l_;
};

StateMutex g_state_mu;
Runtime* g_runtime = nullptr;  // guarded by g_state_mu
thread_local std::string t_last_error;

int fail(const Status& st) {
  t_last_error = st.message().empty() ? accrun::code_name(st.code()) : st.message();
  accrun::log(accrun::LogLevel::kDebug, "%s", t_last_error.c_str());
  return static_cast<int>(st.code());
}

// Runs f at the C boundary: Status → code, exceptions → codes.  In a
// child forked after accrun_init only the calls that read (reads_only)
// run (fork_guard.hpp).
template <class F>
int boundary(const char* fn, F&& f, bool reads_only = false) noexcept {
  if (rt::forked_child().load(std::memory_order_relaxed) && !reads_only) [[unlikely]]
    return fail(rt::forked_child_error(fn));
  try {
    Status st = f();
    if (st.is_ok()) return ACCRUN_SUCCESS;
    return fail(st.with_context(fn));
  } catch (const std::bad_alloc&) {
    return fail(Status(Code::kSystem, std::string(fn) + ": out of memory"));
  } catch (const std::exception& e) {
    return fail(Status(Code::kSystem, std::string(fn) + ": internal error: " + e.what()));
  } catch (...) {
    return fail(Status(Code::kSystem, std::string(fn) + ": internal error"));
  }
}

Status not_initialised() { return accrun::invalid_usage("accrun_init has not been called"); }

std::string upper(const char* s) { return accrun::ascii_upper(s); }

// The private directory of a process that has no launcher's: named
// accrun.<uid>.<tag>.<pid>.XXXXXX under /dev/shm, so that one left by a
// process killed before accrun_finalize can be recognised and removed by the
// next process that makes one.  Its owner holds an flock on the file
// `owner` inside for its whole life: a pid that looks dead may belong to
// another pid namespace sharing /dev/shm, and the lock tells the two apart.
std::string private_dir_base() {
  if (::access("/dev/shm", W_OK) == 0) return "/dev/shm";
  const char* t = std::getenv("TMPDIR");  // only where /dev/shm is missing
  return t != nullptr && *t != '\0' ? t : "/tmp";
}

std::string private_dir_prefix(const std::string& tag) {
  return "accrun." + std::to_string(::getuid()) + "." + tag + ".";
}

// Empties the directory open at `dfd` and everything below it, every name
// resolved relative to an open descriptor and no link followed, so nothing
// outside the tree can be reached by swapping a name meanwhile.  Best effort.
void remove_entries_at(int dfd, int depth) {
  const int scan = ::dup(dfd);  // fdopendir takes the descriptor it is given
  if (scan < 0) return;
  DIR* d = ::fdopendir(scan);
  if (d == nullptr) {
    ::close(scan);
    return;
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d))
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
  ::closedir(d);
  for (const std::string& n : names) {
    if (::unlinkat(dfd, n.c_str(), 0) == 0 || (errno != EISDIR && errno != EPERM) || depth >= 32) continue;
    const int sub = ::openat(dfd, n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) continue;
    remove_entries_at(sub, depth + 1);
    ::close(sub);
    ::unlinkat(dfd, n.c_str(), AT_REMOVEDIR);
  }
}

// Opens `name` under `base_fd` as a directory that is ours to remove: a real
// directory (not a link), owned by this effective uid, writable by nobody
// else (mkdtemp makes it 0700), so nothing in it can be another user's.  -1 when it is not, with the
// reason in *why.  The checks are made on the opened directory itself, so a
// name swapped after the check cannot redirect the removal.
int open_own_private_dir(int base_fd, const char* name, const char** why) {
  const int fd = ::openat(base_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    *why = errno == ELOOP || errno == ENOTDIR ? "not a directory" : "cannot be opened";
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISDIR(st.st_mode)) {
    *why = "not a directory";
  } else if (st.st_uid != ::geteuid()) {
    *why = "owned by another user";
  } else if ((st.st_mode & 022) != 0) {
    *why = "writable by other users";
  } else {
    return fd;
  }
  ::close(fd);
  return -1;
}

// Removes the directories of this tag whose process no longer exists.
// Only directories that are this user's own (open_own_private_dir) and
// whose owner lock is free are touched: a matching name proves nothing.
void remove_dead_private_dirs(const std::string& base, const std::string& tag) {
  const std::string prefix = private_dir_prefix(tag);
  const int base_fd = ::open(base.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (base_fd < 0) return;
  std::vector<std::string> candidates;
  if (const int scan = ::dup(base_fd); scan >= 0) {
    if (DIR* d = ::fdopendir(scan)) {
      while (dirent* e = ::readdir(d))
        if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) candidates.emplace_back(e->d_name);
      ::closedir(d);
    } else {
      ::close(scan);
    }
  }
  for (const std::string& name : candidates) {
    char* end = nullptr;
    long pid = std::strtol(name.c_str() + prefix.size(), &end, 10);
    if (pid <= 0 || end == nullptr || *end != '.') continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    const char* why = nullptr;
    const int dfd = open_own_private_dir(base_fd, name.c_str(), &why);
    if (dfd < 0) {
      accrun::log(accrun::LogLevel::kDebug, "left %s/%s alone: %s", base.c_str(), name.c_str(), why);
      continue;
    }
    const int fd = ::openat(dfd, "owner", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    const bool held = fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) != 0;
    if (fd >= 0) ::close(fd);
    if (!held) {  // else its owner lives, in another pid namespace
      remove_entries_at(dfd, 0);
      // In a sticky /dev/shm only we can rename our own entry, so the name
      // still denotes the directory just emptied.
      if (::unlinkat(base_fd, name.c_str(), AT_REMOVEDIR) == 0)
        accrun::log(accrun::LogLevel::kDebug, "removed %s/%s, left by process %ld", base.c_str(), name.c_str(), pid);
    }
    ::close(dfd);
  }
  ::close(base_fd);
}

// Makes the directory and takes its owner lock; the lock's descriptor goes
// to *owner_fd, to be closed after the directory is removed.
Result<std::string> make_private_dir(const std::string& tag, int* owner_fd) {
  std::string base = private_dir_base();
  remove_dead_private_dirs(base, tag);
  std::string tmpl = base + "/" + private_dir_prefix(tag) + std::to_string(::getpid()) + ".XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) return accrun::system_error("mkdtemp " + tmpl);
  std::string dir(buf.data());
  const std::string owner = dir + "/owner";
  const int fd = ::open(owner.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 || ::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    Status st = accrun::system_error("locking " + owner);
    if (fd >= 0) ::close(fd);
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    return st;
  }
  *owner_fd = fd;
  return dir;
}

Status init_runtime(Runtime& r) {
  auto cfg = rt::read_config(rt::process_environment());
  if (!cfg) return cfg.status();
  r.cfg = std::move(cfg).value();
  char hostbuf[256] = {};
  ::gethostname(hostbuf, sizeof hostbuf - 1);
  if (r.cfg.pmix_server) {
    r.peers = std::make_unique<rt::PeerTable>(r.cfg.host.empty() ? hostbuf : r.cfg.host);
    auto client = rt::PmixClient::init(r.peers.get());
    if (!client) return client.status();
    r.pmix = std::move(client).value();
    const auto& f = r.pmix->facts();
    auto pick = [](int pmix_value, int env_value, int fallback) {
      return pmix_value >= 0 ? pmix_value : env_value >= 0 ? env_value : fallback;
    };
    r.rank = pick(f.rank, r.cfg.rank, 0);
    r.size = pick(f.size, r.cfg.size, 1);
    r.local_rank = pick(f.local_rank, r.cfg.local_rank, 0);
    r.local_size = pick(f.local_size, r.cfg.local_size, 1);
    r.node_rank = r.cfg.node_rank >= 0 ? r.cfg.node_rank : f.node_id >= 0 ? f.node_id : 0;
    r.host = !r.cfg.host.empty() ? r.cfg.host : !f.host.empty() ? f.host : hostbuf;
    r.directory = &r.pmix->directory();
    if (!r.cfg.shm_dir.empty()) {
      r.shm_dir = r.cfg.shm_dir;
    } else {
      // Another PMIx launcher: a private directory per process would not be
      // shared, so each process makes its own and the store stays per process.
      auto d = make_private_dir("pmix", &r.owner_fd);
      if (!d) return d.status();
      r.shm_dir = *d;
      r.remove_shm_dir = true;
    }
  } else {
    // A lone process: a job of one rank.
    r.host = r.cfg.host.empty() ? hostbuf : r.cfg.host;
    r.peers = std::make_unique<rt::PeerTable>(r.host);
    r.lone_directory = std::make_unique<rt::MemoryDirectory>();
    r.directory = r.lone_directory.get();
    auto d = make_private_dir("lone", &r.owner_fd);
    if (!d) return d.status();
    r.shm_dir = *d;
    r.remove_shm_dir = true;
  }

  rt::StoreOptions so;
  so.shm_dir = r.shm_dir;
  so.host = r.host;
  so.job_rank = r.rank;
  so.size_spec = r.cfg.store_size;
  so.server = r.cfg.object_server;
  auto store = rt::ObjectStore::open(*r.directory, so);
  if (!store) return store.status();
  r.store = std::move(store).value();

  rt::SelfInfo self;
  self.member.job_rank = r.rank;
  self.member.host = r.host;
  self.member.node_rank = r.node_rank;
  self.member.local_rank = r.local_rank;
  self.member.pid = ::getpid();
  self.facts.host = r.host;
  if (auto it = r.cfg.accelerator_ids.find("GPU"); it != r.cfg.accelerator_ids.end())
    self.facts.gpu_ids = it->second;
  self.facts.gpus_whole = r.cfg.fractions.count("GPU") == 0;
  rt::GroupManagerOptions go;
  go.shm_dir = r.shm_dir;
  go.oversubscribed = r.cfg.oversubscribed;
  go.store_transport = r.cfg.store_transport;
  go.store_tcp_congestion = r.cfg.store_tcp_congestion;
  go.init_timeout_ms = r.cfg.group_init_timeout_ms;
  go.data_timeout_ms = r.cfg.group_timeout_ms;
  go.job_size = r.size;
  if (const char* ns = std::getenv("PMIX_NAMESPACE"); ns != nullptr && r.cfg.pmix_server) go.job = ns;
  go.refresh_facts = [](coll::MemberFacts& f) {
    f.mpi_initialized = coll::mpi_initialized();
    // Loading NCCL and the CUDA runtime is slow: only when it can matter.
    f.nccl_loadable = f.gpu_ids.size() == 1 && f.gpus_whole && coll::nccl_loadable(nullptr);
  };
  auto factory = [](coll::BackendKind kind, const coll::GroupContext& ctx)
      -> Result<std::unique_ptr<coll::Backend>> {
    switch (kind) {
      case coll::BackendKind::kStore: return coll::make_store_backend(ctx);
      case coll::BackendKind::kMpi: return coll::make_mpi_backend(ctx);
      case coll::BackendKind::kNccl: return coll::make_nccl_backend(ctx);
    }
    return accrun::invalid_argument("unknown backend");
  };
  r.groups = std::make_unique<rt::GroupManager>(*r.directory, r.peers.get(), self, go, factory,
                                                coll::resolve_auto);
  r.cuda_attrs = reinterpret_cast<CudaPointerGetAttributesFn>(::dlsym(RTLD_DEFAULT, "cudaPointerGetAttributes"));
  r.cuda_last_error = reinterpret_cast<CudaGetLastErrorFn>(::dlsym(RTLD_DEFAULT, "cudaGetLastError"));
  accrun::log(accrun::LogLevel::kDebug, "rank %d of %d on %s (local %d of %d), %s, shm %s", r.rank, r.size,
              r.host.c_str(), r.local_rank, r.local_size, r.pmix ? "PMIx client" : "lone process",
              r.shm_dir.c_str());
  return Status::ok();
}

// ---- argument checks shared by the data calls ----

// The integer a C caller passed for an enum parameter.  Read through its
// bytes: a C program may pass any int, and loading an out-of-range value as
// the C++ enum type is undefined behaviour.
template <class E>
int raw(const E& e) {
  static_assert(sizeof(E) == sizeof(int), "accrun's C enums are int-sized");
  int v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

// The checks run on every call: the test is inline, the message is built
// out of line and only on failure.
[[gnu::cold, gnu::noinline]] Status bad_enum(const char* what, int v) {
  return accrun::invalid_argument(std::string(what) + " " + std::to_string(v) + " is not an accrun_" + what + "_t");
}
inline Status check_dtype(int dt) {
  if (dt < ACCRUN_INT8 || dt > ACCRUN_FLOAT64) [[unlikely]]
    return bad_enum("dtype", dt);
  return Status::ok();
}
inline Status check_op(int op) {
  if (op < ACCRUN_SUM || op > ACCRUN_MAX) [[unlikely]]
    return bad_enum("op", op);
  return Status::ok();
}
// The largest element count of a buffer whose byte size still leaves room to
// double it, per dtype (no division on the per-call path).
std::size_t max_count(int dt) {
  static constexpr std::size_t kMax[] = {SIZE_MAX / 2, SIZE_MAX / 2, SIZE_MAX / 8, SIZE_MAX / 16,
                                         SIZE_MAX / 4, SIZE_MAX / 4, SIZE_MAX / 8, SIZE_MAX / 16};
  return kMax[dt];
}

// The error of a call on a handle whose group is gone.
[[gnu::cold]] Status dead_group(const accrun_group_s& g) {
  if (g.finalized) return accrun::invalid_usage("the group was destroyed by accrun_finalize");
  return accrun::invalid_argument("not a live group (destroyed already?)");
}

// Runs f(handle, group) holding the group's call lock, so that neither
// accrun_group_destroy nor accrun_finalize can pull the group away.
template <class F>
Status with_group(accrun_group_t g, F&& f) {
  if (g == nullptr) [[unlikely]]
    return accrun::invalid_argument("group is NULL");
  if (g->magic != accrun_group_s::kMagic) [[unlikely]]
    return accrun::invalid_argument("not a group handle");
  std::lock_guard call(g->lock);
  if (g->group == nullptr) [[unlikely]]
    return dead_group(*g);
  return f(*g, *g->group);
}

struct Buf {
  const void* ptr;
  std::size_t count;  // elements
  const char* what;
};

// Pointers, sizes, the stream and the memory kind of each buffer, with the
// message of the first that is wrong.
[[gnu::noinline]] Status check_data_fully(const accrun_group_s& h, const rt::Group& g, int dt,
                                          std::initializer_list<Buf> bufs, void* stream) {
  ACCRUN_RETURN_IF_ERROR(check_dtype(dt));
  const bool nccl = g.kind == coll::BackendKind::kNccl;
  if (stream != nullptr && !nccl)
    return accrun::invalid_argument(std::string("stream must be NULL on a ") +
                                    coll::backend_name(g.kind) + " group (streams are for NCCL groups)");
  for (const Buf& b : bufs) {
    if (b.count > max_count(dt))
      return accrun::invalid_argument(std::string(b.what) + ": count " + std::to_string(b.count) + " is too large");
    if (b.count > 0 && b.ptr == nullptr) return accrun::invalid_argument(std::string(b.what) + " is NULL");
    if (!nccl && b.ptr != nullptr && h.cuda_attrs != nullptr) {
      CudaPointerAttributes a{};
      if (h.cuda_attrs(&a, b.ptr) == 0) {
        if (a.type == 2)
          return accrun::invalid_argument(std::string(b.what) + " is GPU device memory, but group '" + g.name +
                                          "' uses the " + coll::backend_name(g.kind) +
                                          " backend, which needs host memory (use an NCCL group)");
      } else if (h.cuda_last_error != nullptr) {
        h.cuda_last_error();  // a host pointer on old CUDA: clear the error we caused
      }
    }
  }
  return Status::ok();
}

// The same checks, inline: the full ones run only when a test here fails or
// the program has loaded the CUDA runtime (a pointer's memory kind is then
// asked of it).
inline Status check_data(const accrun_group_s& h, const rt::Group& g, int dt, std::initializer_list<Buf> bufs,
                         void* stream) {
  bool fine = dt >= ACCRUN_INT8 && dt <= ACCRUN_FLOAT64 && h.cuda_attrs == nullptr &&
              (stream == nullptr || g.kind == coll::BackendKind::kNccl);
  if (fine) {
    const std::size_t max = max_count(dt);
    for (const Buf& b : bufs) fine = fine && b.count <= max && (b.ptr != nullptr || b.count == 0);
  }
  if (fine) [[likely]]
    return Status::ok();
  return check_data_fully(h, g, dt, bufs, stream);
}

[[gnu::cold, gnu::noinline]] Status bad_rank(const rt::Group& g, int r, const char* what) {
  return accrun::invalid_argument(std::string(what) + " " + std::to_string(r) + " is out of range for group '" +
                                  g.name + "' of size " + std::to_string(g.size));
}
inline Status check_rank(const rt::Group& g, int r, const char* what) {
  if (r < 0 || r >= g.size) [[unlikely]]
    return bad_rank(g, r, what);
  return Status::ok();
}

}  // namespace

// ---------------------------------------------------------------- job context

ACCRUN_API int accrun_init(void) {
  return boundary("accrun_init", []() -> Status {
    std::unique_lock lock(g_state_mu);
    if (g_runtime != nullptr) return accrun::invalid_usage("accrun_init was called already");
    auto r = std::make_unique<Runtime>();
    ACCRUN_RETURN_IF_ERROR(init_runtime(*r));
    g_runtime = r.release();
    // A child forked from here on inherits the state, not the right to use it.
    static std::once_flag fork_handler;
    std::call_once(fork_handler, [] {
      ::pthread_atfork(nullptr, nullptr, [] {
        if (g_runtime == nullptr) return;
        rt::forked_child().store(true, std::memory_order_relaxed);
        if (g_runtime->store) g_runtime->store->after_fork();
      });
    });
    return Status::ok();
  });
}

ACCRUN_API int accrun_finalize(void) {
  if (rt::forked_child().load(std::memory_order_relaxed)) [[unlikely]] {
    // A forked child's finalize (at its exit, say) leaves the parent's
    // directory, keys and connection alone: the copy is simply dropped.
    g_runtime = nullptr;
    return ACCRUN_SUCCESS;
  }
  return boundary("accrun_finalize", []() -> Status {
    {
      // Calls that wait for a key (accrun_get with a timeout, a group's
      // rendezvous) end now with ACCRUN_ERR_INVALID_USAGE instead of
      // holding finalize up; so do the waits of calls that start before it.
      std::shared_lock state(g_state_mu);
      if (g_runtime == nullptr) return not_initialised();
      g_runtime->directory->cancel_waits();
    }
    std::unique_lock lock(g_state_mu);
    if (g_runtime == nullptr) return not_initialised();
    delete g_runtime;
    g_runtime = nullptr;
    return Status::ok();
  });
}

// accrun_init_mpi(3): MPI initialised by libaccrun on the program's behalf.
// The MPI calls live in collectives (mpi_init_owned), so libaccrun's C
// boundary needs no MPI header; accrun_finalize() calls mpi_finalize_owned().
// A failure's message (which names the call already) is the thread's last
// error, as every call's, and goes to standard error too.
ACCRUN_API int accrun_init_mpi(int* argc, char*** argv) {
  int rc = ACCRUN_SUCCESS;
  try {
    const Status st = rt::forked_child().load(std::memory_order_relaxed)
                          ? rt::forked_child_error("accrun_init_mpi")
                          : accrun::collectives::mpi_init_owned(argc, argv);
    if (!st.is_ok()) rc = fail(st);
  } catch (...) {
    rc = fail(Status(Code::kSystem, "accrun_init_mpi: internal error"));
  }
  if (rc != ACCRUN_SUCCESS) accrun::log(accrun::LogLevel::kError, "%s", t_last_error.c_str());
  return rc;
}

namespace {
template <class F>
int getter(F&& f) noexcept {
  std::shared_lock lock(g_state_mu);
  return g_runtime == nullptr ? -1 : f(*g_runtime);
}
}  // namespace

ACCRUN_API int accrun_rank(void) { return getter([](const Runtime& r) { return r.rank; }); }
ACCRUN_API int accrun_size(void) { return getter([](const Runtime& r) { return r.size; }); }
ACCRUN_API int accrun_local_rank(void) { return getter([](const Runtime& r) { return r.local_rank; }); }
ACCRUN_API int accrun_local_size(void) { return getter([](const Runtime& r) { return r.local_size; }); }

ACCRUN_API int accrun_accelerator_ids(const char* resource, int* ids, int max_ids, int* count) {
  return boundary("accrun_accelerator_ids", [&]() -> Status {
    if (resource == nullptr) return accrun::invalid_argument("resource is NULL");
    if (count == nullptr) return accrun::invalid_argument("count is NULL");
    if (max_ids < 0) return accrun::invalid_argument("max_ids is negative");
    if (max_ids > 0 && ids == nullptr) return accrun::invalid_argument("ids is NULL but max_ids > 0");
    std::shared_lock lock(g_state_mu);
    if (g_runtime == nullptr) return not_initialised();
    *count = 0;
    auto it = g_runtime->cfg.accelerator_ids.find(upper(resource));
    if (it == g_runtime->cfg.accelerator_ids.end()) return Status::ok();
    const auto& v = it->second;
    for (std::size_t i = 0; i < v.size() && i < static_cast<std::size_t>(max_ids); ++i) ids[i] = v[i];
    *count = static_cast<int>(v.size());
    return Status::ok();
  }, /*reads_only=*/true);
}

ACCRUN_API const char* accrun_accelerator_type(const char* resource) {
  try {
    std::shared_lock lock(g_state_mu);
    if (g_runtime == nullptr) return nullptr;
    const auto& c = g_runtime->cfg;
    if (resource == nullptr) return c.accelerator_type.empty() ? nullptr : c.accelerator_type.c_str();
    std::string res = upper(resource);
    if (auto it = c.accelerator_types.find(res); it != c.accelerator_types.end()) return it->second.c_str();
    if (c.accelerator_ids.count(res) == 0 || c.accelerator_type.empty()) return nullptr;
    return c.accelerator_type.c_str();
  } catch (...) {
    return nullptr;
  }
}

ACCRUN_API const char* accrun_pod(const char* level) {
  try {
    if (level == nullptr) return nullptr;
    std::shared_lock lock(g_state_mu);
    if (g_runtime == nullptr) return nullptr;
    const auto& c = g_runtime->cfg;
    std::string l = upper(level);
    const std::optional<std::string>* v = l == "POD" ? &c.pod : l == "ZONE" ? &c.zone : l == "REGION" ? &c.region : nullptr;
    return v != nullptr && v->has_value() ? (*v)->c_str() : nullptr;
  } catch (...) {
    return nullptr;
  }
}

// ---------------------------------------------------------------- groups

ACCRUN_API int accrun_group_init(const char* name, int world_size, int rank, accrun_backend_t backend,
                                 accrun_group_t* group) {
  return boundary("accrun_group_init", [&]() -> Status {
    if (group == nullptr) return accrun::invalid_argument("group is NULL");
    *group = nullptr;
    if (name == nullptr || *name == '\0') return accrun::invalid_argument("group name is NULL or empty");
    if (std::strlen(name) > 256) return accrun::invalid_argument("group name longer than 256 bytes");
    if (world_size < 1) return accrun::invalid_argument("world_size " + std::to_string(world_size) + " is < 1");
    if (rank < 0 || rank >= world_size)
      return accrun::invalid_argument("rank " + std::to_string(rank) + " is out of range for world_size " +
                                      std::to_string(world_size));
    int b = raw(backend);
    if (b < ACCRUN_BACKEND_AUTO || b > ACCRUN_BACKEND_NCCL)
      return accrun::invalid_argument("backend " + std::to_string(b) + " is not an accrun_backend_t");
    std::optional<coll::BackendKind> requested;
    if (backend == ACCRUN_BACKEND_STORE) requested = coll::BackendKind::kStore;
    if (backend == ACCRUN_BACKEND_MPI) requested = coll::BackendKind::kMpi;
    if (backend == ACCRUN_BACKEND_NCCL) requested = coll::BackendKind::kNccl;
    std::shared_lock state(g_state_mu);
    if (g_runtime == nullptr) return not_initialised();
    auto g = g_runtime->groups->create(name, world_size, rank, requested);
    if (!g) return g.status();
    auto h = std::make_unique<accrun_group_s>();
    h->group = std::move(g).value();
    h->cuda_attrs = g_runtime->cuda_attrs;
    h->cuda_last_error = g_runtime->cuda_last_error;
    *group = h.get();
    std::lock_guard lock(g_handles_mu);
    g_runtime->handles.push_back(h.get());
    all_handles().push_back(std::move(h));
    return Status::ok();
  });
}

ACCRUN_API int accrun_group_rank(accrun_group_t g) {
  int out = -1;
  int rc = boundary("accrun_group_rank", [&] {
    return with_group(g, [&](const accrun_group_s&, rt::Group& grp) { out = grp.rank; return Status::ok(); });
  }, /*reads_only=*/true);
  return rc == ACCRUN_SUCCESS ? out : -1;
}

ACCRUN_API int accrun_group_size(accrun_group_t g) {
  int out = -1;
  int rc = boundary("accrun_group_size", [&] {
    return with_group(g, [&](const accrun_group_s&, rt::Group& grp) { out = grp.size; return Status::ok(); });
  }, /*reads_only=*/true);
  return rc == ACCRUN_SUCCESS ? out : -1;
}

ACCRUN_API int accrun_group_set_timeout(accrun_group_t g, int timeout_ms) {
  return boundary("accrun_group_set_timeout", [&] {
    return with_group(g, [&](const accrun_group_s&, rt::Group& grp) {
      grp.timeout_ms = timeout_ms <= 0 ? -1 : timeout_ms;  // 0 or negative: no timeout
      grp.backend->set_timeout(grp.timeout_ms);
      return Status::ok();
    });
  });
}

ACCRUN_API int accrun_group_destroy(accrun_group_t g) {
  return boundary("accrun_group_destroy", [&]() -> Status {
    if (g == nullptr) return accrun::invalid_argument("group is NULL");
    if (g->magic != accrun_group_s::kMagic) return accrun::invalid_argument("not a group handle");
    std::shared_lock state(g_state_mu);
    std::lock_guard call(g->lock);  // waits for a call in progress
    if (g->group == nullptr) return dead_group(*g);
    std::shared_ptr<rt::Group> gone = std::move(g->group);
    return g_runtime->groups->destroy(*gone);
  });
}

// ---------------------------------------------------------------- collectives

namespace {
coll::DType dtype_of(accrun_dtype_t dt) { return static_cast<coll::DType>(dt); }
coll::Op op_of(accrun_op_t op) { return static_cast<coll::Op>(op); }
}  // namespace

ACCRUN_API int accrun_allreduce(accrun_group_t g, const void* send, void* recv, size_t count, accrun_dtype_t dt,
                                accrun_op_t op, void* stream) {
  return boundary("accrun_allreduce", [&] {
    return with_group(g, [&](const accrun_group_s& h, rt::Group& grp) -> Status {
      ACCRUN_RETURN_IF_ERROR(check_op(raw(op)));
      ACCRUN_RETURN_IF_ERROR(check_data(h, grp, raw(dt), {{send, count, "send"}, {recv, count, "recv"}}, stream));
      return grp.backend->allreduce(send, recv, count, dtype_of(dt), op_of(op), stream);
    });
  });
}

ACCRUN_API int accrun_reduce(accrun_group_t g, const void* send, void* recv, size_t count, accrun_dtype_t dt,
                             accrun_op_t op, int root, void* stream) {
  return boundary("accrun_reduce", [&] {
    return with_group(g, [&](const accrun_group_s& h, rt::Group& grp) -> Status {
      ACCRUN_RETURN_IF_ERROR(check_op(raw(op)));
      ACCRUN_RETURN_IF_ERROR(check_rank(grp, root, "root"));
      // Only the root receives; recv may be NULL elsewhere.
      std::size_t recv_count = grp.rank == root ? count : 0;
      ACCRUN_RETURN_IF_ERROR(check_data(h, grp, raw(dt), {{send, count, "send"}, {recv, recv_count, "recv"}}, stream));
      return grp.backend->reduce(send, recv, count, dtype_of(dt), op_of(op), root, stream);
    });
  });
}

ACCRUN_API int accrun_broadcast(accrun_group_t g, void* buf, size_t count, accrun_dtype_t dt, int root,
                                void* stream) {
  return boundary("accrun_broadcast", [&] {
    return with_group(g, [&](const accrun_group_s& h, rt::Group& grp) -> Status {
      ACCRUN_RETURN_IF_ERROR(check_rank(grp, root, "root"));
      ACCRUN_RETURN_IF_ERROR(check_data(h, grp, raw(dt), {{buf, count, "buf"}}, stream));
      return grp.backend->broadcast(buf, count, dtype_of(dt), root, stream);
    });
  });
}

ACCRUN_API int accrun_allgather(accrun_group_t g, const void* send, void* recv, size_t count_per_rank,
                                accrun_dtype_t dt, void* stream) {
  return boundary("accrun_allgather", [&] {
    return with_group(g, [&](const accrun_group_s& h, rt::Group& grp) -> Status {
      std::size_t total = count_per_rank * static_cast<std::size_t>(grp.size);
      if (count_per_rank != 0 && total / static_cast<std::size_t>(grp.size) != count_per_rank)
        return accrun::invalid_argument("count_per_rank is too large");
      ACCRUN_RETURN_IF_ERROR(
          check_data(h, grp, raw(dt), {{send, count_per_rank, "send"}, {recv, total, "recv"}}, stream));
      return grp.backend->allgather(send, recv, count_per_rank, dtype_of(dt), stream);
    });
  });
}

ACCRUN_API int accrun_reducescatter(accrun_group_t g, const void* send, void* recv, size_t recv_count,
                                    accrun_dtype_t dt, accrun_op_t op, void* stream) {
  return boundary("accrun_reducescatter", [&] {
    return with_group(g, [&](const accrun_group_s& h, rt::Group& grp) -> Status {
      ACCRUN_RETURN_IF_ERROR(check_op(raw(op)));
      std::size_t total = recv_count * static_cast<std::size_t>(grp.size);
      if (recv_count != 0 && total / static_cast<std::size_t>(grp.size) != recv_count)
        return accrun::invalid_argument("recv_count is too large");
      ACCRUN_RETURN_IF_ERROR(check_data(h, grp, raw(dt), {{send, total, "send"}, {recv, recv_count, "recv"}}, stream));
      return grp.backend->reducescatter(send, recv, recv_count, dtype_of(dt), op_of(op), stream);
    });
  });
}

ACCRUN_API int accrun_barrier(accrun_group_t g) {
  return boundary("accrun_barrier", [&] {
    return with_group(g, [&](const accrun_group_s&, rt::Group& grp) { return grp.backend->barrier(); });
  });
}

// ---------------------------------------------------------------- point-to-point

ACCRUN_API int accrun_send(accrun_group_t g, const void* buf, size_t count, accrun_dtype_t dt, int peer,
                           void* stream) {
  return boundary("accrun_send", [&] {
    return with_group(g, [&](const accrun_group_s& h, rt::Group& grp) -> Status {
      ACCRUN_RETURN_IF_ERROR(check_rank(grp, peer, "peer"));
      ACCRUN_RETURN_IF_ERROR(check_data(h, grp, raw(dt), {{buf, count, "buf"}}, stream));
      return grp.backend->send(buf, count, dtype_of(dt), peer, stream);
    });
  });
}

ACCRUN_API int accrun_recv(accrun_group_t g, void* buf, size_t count, accrun_dtype_t dt, int peer, void* stream) {
  return boundary("accrun_recv", [&] {
    return with_group(g, [&](const accrun_group_s& h, rt::Group& grp) -> Status {
      ACCRUN_RETURN_IF_ERROR(check_rank(grp, peer, "peer"));
      ACCRUN_RETURN_IF_ERROR(check_data(h, grp, raw(dt), {{buf, count, "buf"}}, stream));
      return grp.backend->recv(buf, count, dtype_of(dt), peer, stream);
    });
  });
}

ACCRUN_API int accrun_group_start(accrun_group_t g) {
  return boundary("accrun_group_start", [&] {
    return with_group(g, [&](const accrun_group_s&, rt::Group& grp) { return grp.backend->group_start(); });
  });
}

ACCRUN_API int accrun_group_end(accrun_group_t g) {
  return boundary("accrun_group_end", [&] {
    return with_group(g, [&](const accrun_group_s&, rt::Group& grp) { return grp.backend->group_end(); });
  });
}

// ---------------------------------------------------------------- object store

ACCRUN_API int accrun_put(const char* key, const void* buf, size_t len) {
  return boundary("accrun_put", [&]() -> Status {
    if (key == nullptr) return accrun::invalid_argument("key is NULL");
    if (buf == nullptr && len > 0) return accrun::invalid_argument("buf is NULL");
    std::shared_lock state(g_state_mu);
    if (g_runtime == nullptr) return not_initialised();
    return g_runtime->store->put(key, buf, len);
  });
}

ACCRUN_API int accrun_get(const char* key, void* buf, size_t max_len, size_t* len, int timeout_ms) {
  return boundary("accrun_get", [&]() -> Status {
    if (key == nullptr) return accrun::invalid_argument("key is NULL");
    if (len == nullptr) return accrun::invalid_argument("len is NULL");
    if (buf == nullptr && max_len > 0) return accrun::invalid_argument("buf is NULL but max_len > 0");
    std::shared_lock state(g_state_mu);
    if (g_runtime == nullptr) return not_initialised();
    return g_runtime->store->get(key, buf, max_len, len, timeout_ms);
  });
}

ACCRUN_API int accrun_delete(const char* key) {
  return boundary("accrun_delete", [&]() -> Status {
    if (key == nullptr) return accrun::invalid_argument("key is NULL");
    std::shared_lock state(g_state_mu);
    if (g_runtime == nullptr) return not_initialised();
    return g_runtime->store->remove(key);
  });
}

// ---------------------------------------------------------------- errors

ACCRUN_API const char* accrun_strerror(int err) {
  switch (err) {
    case ACCRUN_SUCCESS: return "success";
    case ACCRUN_ERR_INVALID_ARGUMENT: return "invalid argument";
    case ACCRUN_ERR_INVALID_USAGE: return "invalid usage";
    case ACCRUN_ERR_NOT_SUPPORTED: return "not supported";
    case ACCRUN_ERR_NOT_FOUND: return "not found";
    case ACCRUN_ERR_SYSTEM: return "system error";
    case ACCRUN_ERR_REMOTE: return "remote error (a peer failed)";
    case ACCRUN_ERR_TIMEOUT: return "timeout";
    case ACCRUN_ERR_NO_MEMORY: return "no memory (the object store is full)";
    default: return "unknown accrun status code";
  }
}

ACCRUN_API const char* accrun_last_error(void) { return t_last_error.c_str(); }
