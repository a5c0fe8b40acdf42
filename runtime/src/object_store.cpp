#include "object_store.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/random.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <thread>

#include "accrun/object_wire.hpp"
#include "config.hpp"
#include "object_fetch.hpp"

namespace accrun::runtime {
namespace {

constexpr std::size_t kMaxKeyLen = 256;
// The segment: the counter at offset 0 and the recount flag (all the agent
// maps, objects::kAccountingAgentBytes), then from kSlotsAt the journal's
// slots, kSlotBytes apart.
constexpr std::size_t kSlotsAt = 4096;
static_assert(objects::kAccountingAgentBytes <= objects::kAccountingLockAt &&
              objects::kAccountingLockAt < kSlotsAt);
constexpr std::size_t kSlotBytes = 512;
constexpr int kSlots = 256;
constexpr std::size_t kSegmentSize = kSlotsAt + kSlots * kSlotBytes;

// A slot's step.
constexpr std::uint32_t kFree = 0;
constexpr std::uint32_t kPutting = 1;   // bytes reserved; the file may exist, part written
constexpr std::uint32_t kWritten = 2;   // the file whole; the key may be published (or on its way)
constexpr std::uint32_t kUnlinked = 3;  // a delete unlinks the file (or has); the key may still be published

std::string meta_key(const std::string& key) { return "accrun.s/" + escape_key_component(key); }

struct Meta {
  std::string host, file, server;
  std::uint64_t len = 0;
};

Result<Meta> parse_meta(const std::string& s) {
  Meta m;
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line)) {
    auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string k = line.substr(0, eq), v = line.substr(eq + 1);
    if (k == "host") m.host = v;
    else if (k == "file") m.file = v;
    else if (k == "len") m.len = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "server") m.server = v;
  }
  if (m.file.empty() || m.file.find('/') != std::string::npos)
    return Status(Code::kSystem, "malformed object metadata");
  return m;
}

// Unpublishes the key `mk` while it still names `file`: an object put again
// since (after another member finished this delete) names another, which
// stays.  Errors are the directory's; a key gone already is none.
Status unpublish_if_names(Directory& dir, const std::string& mk, const std::string& file) {
  auto v = dir.lookup(mk, 0);
  if (!v) return v.status().code() == Code::kNotFound ? Status::ok() : v.status();
  auto m = parse_meta(*v);
  if (!m || m->file != file) return Status::ok();
  Status st = dir.unpublish(mk);
  return st.code() == Code::kNotFound ? Status::ok() : st;
}

// 32 random hex digits: the part of a file's name no other host can guess.
Result<std::string> random_token() {
  unsigned char b[objects::kTokenHex / 2];
  std::size_t got = 0;
  while (got < sizeof b) {
    ssize_t n = ::getrandom(b + got, sizeof b - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return system_error("object store: getrandom");
    got += static_cast<std::size_t>(n);
  }
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : b) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

// Where an object put on another host can be asked for, or why it cannot.
Status reachable(const Meta& m, const std::string& key, const char* what) {
  if (!m.server.empty()) return Status::ok();
  return not_supported("object '" + key + "' lives on host " + m.host +
                       ", whose ranks were not started by accrun's agents; " + what + " it from a rank on that host");
}

std::string human(std::uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) { v /= 1024; ++u; }
  char buf[64];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

// Sets one byte's open-file-description lock (F_WRLCK or F_UNLCK); wait:
// until it is free.
bool byte_lock(int fd, std::size_t at, short type, bool wait = false) {
  struct flock fl {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = static_cast<off_t>(at);
  fl.l_len = 1;
  for (;;) {
    if (::fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl) == 0) return true;
    if (errno != EINTR) return false;
  }
}

// Whether another open file description holds the byte's lock.
bool byte_held(int fd, std::size_t at) {
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = static_cast<off_t>(at);
  fl.l_len = 1;
  if (::fcntl(fd, F_OFD_GETLK, &fl) != 0) return true;  // unknown: take it as held
  return fl.l_type != F_UNLCK;
}

std::size_t slot_at(int i) { return kSlotsAt + static_cast<std::size_t>(i) * kSlotBytes; }

}  // namespace

struct ObjectStore::Slot {
  std::uint32_t step;  // written last when taken, first when freed (atomic_ref)
  std::uint32_t key_len;
  std::uint64_t len;
  char file[objects::kMaxName + 1];
  char key[kMaxKeyLen];
};

// The host's lock: this instance's mutex (an open file description's lock
// does not tell its threads apart), then the segment's lock byte, which the
// kernel lets go if the process dies holding it.
class ObjectStore::HostLock {
 public:
  explicit HostLock(ObjectStore& s) : s_(s), mu_(s.lock_mu_) { take(); }
  ~HostLock() {
    if (mu_.owns_lock()) byte_lock(s_.fd_, objects::kAccountingLockAt, F_UNLCK);
  }
  void unlock() {
    byte_lock(s_.fd_, objects::kAccountingLockAt, F_UNLCK);
    mu_.unlock();
  }
  void lock() {
    mu_.lock();
    take();
  }

 private:
  void take() { byte_lock(s_.fd_, objects::kAccountingLockAt, F_WRLCK, true); }
  ObjectStore& s_;
  std::unique_lock<std::mutex> mu_;
};

ObjectStore::Slot& ObjectStore::slot(int i) const {
  static_assert(sizeof(Slot) <= kSlotBytes);
  return *reinterpret_cast<Slot*>(static_cast<char*>(segment_) + slot_at(i));
}

std::atomic_ref<std::uint32_t> ObjectStore::step(int i) const { return std::atomic_ref<std::uint32_t>(slot(i).step); }

int ObjectStore::claim(std::uint32_t step_now, const std::string& key, const std::string& file, std::uint64_t len) {
  for (int i = 0; i < kSlots; ++i) {
    if (step(i).load() != kFree || !byte_lock(fd_, slot_at(i), F_WRLCK)) continue;
    Slot& sl = slot(i);
    sl.len = len;
    sl.key_len = static_cast<std::uint32_t>(key.size());
    std::memcpy(sl.key, key.data(), key.size());
    std::memset(sl.file, 0, sizeof sl.file);
    std::memcpy(sl.file, file.data(), std::min(file.size(), sizeof sl.file - 1));
    step(i).store(step_now, std::memory_order_release);  // a slot is taken once its fields are in
    mine_[static_cast<std::size_t>(i)] = true;
    return i;
  }
  return -1;
}

int ObjectStore::claim_waiting(HostLock& lock, std::uint32_t step_now, const std::string& key,
                               const std::string& file, std::uint64_t len) {
  for (int tries = 0;; ++tries) {
    const int at = claim(step_now, key, file, len);
    if (at >= 0) return at;
    if (tries % 64 == 0) collect(lock, false);  // dead processes' slots first
    // Every slot is some live put's or delete's: wait for one.
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(200 + 50 * std::min(tries, 40)));
    lock.lock();
  }
}

void ObjectStore::release(int i) {
  step(i).store(kFree, std::memory_order_release);
  std::memset(slot(i).file, 0, sizeof slot(i).file);
  byte_lock(fd_, slot_at(i), F_UNLCK);
  mine_[static_cast<std::size_t>(i)] = false;
}

std::string ObjectStore::meta_of(const std::string& file, std::uint64_t len) const {
  std::string meta = "host=" + opts_.host + "\nfile=" + file + "\nlen=" + std::to_string(len) + "\n";
  if (!opts_.server.empty()) meta += "server=" + opts_.server + "\n";
  return meta;
}

bool ObjectStore::file_exists(const std::string& file) const {
  struct stat st {};
  return ::stat((opts_.shm_dir + "/" + file).c_str(), &st) == 0 || errno != ENOENT;
}

void ObjectStore::collect(HostLock& lock, bool recount) {
  // The slots of dead processes, taken over (their locks now this
  // instance's, so no other collector takes them too).
  struct Dead {
    int at;
    std::uint32_t step;
    std::string key, file;
    std::uint64_t len;
  };
  std::vector<Dead> dead;
  for (int i = 0; i < kSlots; ++i) {
    const std::uint32_t st = step(i).load(std::memory_order_acquire);
    if (st == kFree || mine_[static_cast<std::size_t>(i)] || byte_held(fd_, slot_at(i)) ||
        !byte_lock(fd_, slot_at(i), F_WRLCK))
      continue;
    const Slot& sl = slot(i);
    mine_[static_cast<std::size_t>(i)] = true;
    dead.push_back({i, st, std::string(sl.key, std::min<std::size_t>(sl.key_len, kMaxKeyLen)),
                    std::string(sl.file, ::strnlen(sl.file, sizeof sl.file)), sl.len});
  }
  if (!dead.empty()) {
    // What each left, finished or undone.  The directory's calls go
    // without the host's lock (they may take a while); the files' changes
    // and the slots' release with it.
    std::vector<int> unlink_theirs(dead.size(), 0);  // 1: unlink the file; -1: leave the slot for later
    std::vector<bool> exists(dead.size()), republished(dead.size()), deleting(dead.size());
    for (std::size_t d = 0; d < dead.size(); ++d) {
      exists[d] = file_exists(dead[d].file);
      deleting[d] = deleted_by_another(dead[d].file);
    }
    lock.unlock();
    for (std::size_t d = 0; d < dead.size(); ++d) {
      const Dead& x = dead[d];
      const std::string mk = meta_key(x.key);
      auto names_it = [&] {
        auto v = dir_.lookup(mk, 0);
        if (!v) return v.status().code() == Code::kNotFound ? 0 : -1;
        auto m = parse_meta(*v);
        return m && m->file == x.file && m->host == opts_.host ? 1 : 0;
      };
      if (x.step == kPutting) {
        unlink_theirs[d] = 1;  // killed before its bytes were all written: never published
      } else if (x.step == kWritten && !exists[d]) {
        // Deleted since it published (or since a collector, killed since,
        // published for it): the key goes, unless a delete in progress
        // here will unpublish it itself.
        if (!deleting[d]) {
          const int n = names_it();
          if (n < 0) unlink_theirs[d] = -1;
          else if (n == 1) (void)dir_.unpublish(mk);
        }
      } else if (x.step == kWritten) {
        // Its publish may have been made, or be on its way: make it (the
        // same metadata), and keep the object unless another's is the key's.
        Status st = dir_.publish(mk, meta_of(x.file, x.len));
        republished[d] = st.is_ok();
        if (!st && st.code() != Code::kInvalidUsage) {
          unlink_theirs[d] = -1;
        } else if (!st) {
          const int n = names_it();
          unlink_theirs[d] = n < 0 ? -1 : n == 0 ? 1 : 0;
        }
      } else if (x.step == kUnlinked && !exists[d]) {
        // A delete that had unlinked the file: its key goes too.
        const int n = names_it();
        if (n < 0) unlink_theirs[d] = -1;
        else if (n == 1) (void)dir_.unpublish(mk);
      }
    }
    lock.lock();
    // A delete may have taken a republished object's file meanwhile (and
    // unpublished the key before this publish): then the key goes again.
    // (Unless that delete is still here to unpublish it itself.)
    std::vector<std::string> gone_again;
    for (std::size_t d = 0; d < dead.size(); ++d)
      if (republished[d] && !file_exists(dead[d].file) && !deleted_by_another(dead[d].file))
        gone_again.push_back(dead[d].key);
    if (!gone_again.empty()) {
      lock.unlock();
      for (std::size_t d = 0; d < dead.size(); ++d) {
        if (std::find(gone_again.begin(), gone_again.end(), dead[d].key) == gone_again.end()) continue;
        (void)unpublish_if_names(dir_, meta_key(dead[d].key), dead[d].file);
      }
      lock.lock();
    }
    for (std::size_t d = 0; d < dead.size(); ++d) {
      if (unlink_theirs[d] == 1 && objects::is_object_file(dead[d].file))
        ::unlink((opts_.shm_dir + "/" + dead[d].file).c_str());
      if (unlink_theirs[d] >= 0) {
        release(dead[d].at);
      } else {  // the directory could not say: the next collection looks again
        byte_lock(fd_, slot_at(dead[d].at), F_UNLCK);
        mine_[static_cast<std::size_t>(dead[d].at)] = false;
      }
    }
    recount = true;
  }
  // The agent sets the flag when it deleted without the lock.
  if (recount_flag().exchange(0) != 0) recount = true;
  if (!recount) return;
  // The bytes in use: every object file's, and in place of the file of a
  // put still writing, its reservation.
  std::uint64_t total = 0;
  std::vector<std::string> writing;
  for (int i = 0; i < kSlots; ++i) {
    if (step(i).load(std::memory_order_acquire) != kPutting) continue;
    const Slot& sl = slot(i);
    total += sl.len;
    writing.emplace_back(sl.file, ::strnlen(sl.file, sizeof sl.file));
  }
  if (DIR* d = ::opendir(opts_.shm_dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string_view name = e->d_name;
      if (!objects::is_object_file(name) || std::find(writing.begin(), writing.end(), name) != writing.end()) continue;
      struct stat st {};
      if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
        total += static_cast<std::uint64_t>(st.st_size);
    }
    ::closedir(d);
  }
  counter().store(total);
}

bool ObjectStore::deleted_by_another(const std::string& file) const {
  for (int i = 0; i < kSlots; ++i)
    if (!mine_[static_cast<std::size_t>(i)] && step(i).load(std::memory_order_acquire) == kUnlinked &&
        ::strncmp(slot(i).file, file.c_str(), sizeof slot(i).file) == 0)
      return true;
  return false;
}

void ObjectStore::after_fork() {
  // The child's copy of the descriptor would keep the parent's locks held
  // after the parent's death.
  ::close(fd_);
  fd_ = -1;
}

Result<std::unique_ptr<ObjectStore>> ObjectStore::open(Directory& dir, StoreOptions opts) {
  struct statvfs fs {};
  if (::statvfs(opts.shm_dir.c_str(), &fs) != 0)
    return system_error("object store: statvfs " + opts.shm_dir);
  auto cap = parse_store_size(opts.size_spec, static_cast<std::uint64_t>(fs.f_blocks) * fs.f_frsize);
  if (!cap) return cap.status();
  std::string path = opts.shm_dir + "/store.accounting";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return system_error("object store: open " + path);
  // Every opener sizes it the same; new bytes read as zero, a valid counter.
  if (::ftruncate(fd, kSegmentSize) != 0) {
    Status st = system_error("object store: ftruncate " + path);
    ::close(fd);
    return st;
  }
  void* seg = ::mmap(nullptr, kSegmentSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  Status st = seg == MAP_FAILED ? system_error("object store: mmap " + path) : Status::ok();
  ::close(fd);
  // The locks go on a description of their own: a mapping holds the one it
  // was made through, and a child forked without exec keeps the mapping.
  if (st.is_ok() && (fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC)) < 0)
    st = system_error("object store: open " + path);
  if (!st) {
    if (seg != MAP_FAILED) ::munmap(seg, kSegmentSize);
    return st;
  }
  std::unique_ptr<ObjectStore> store(new ObjectStore(dir, std::move(opts), fd, seg, *cap));
  store->mine_.assign(kSlots, false);
  return store;
}

ObjectStore::~ObjectStore() {
  ::munmap(segment_, kSegmentSize);
  if (fd_ >= 0) ::close(fd_);  // and with it this instance's locks
}

std::atomic_ref<std::uint64_t> ObjectStore::recount_flag() const {
  return std::atomic_ref<std::uint64_t>(
      *reinterpret_cast<std::uint64_t*>(static_cast<char*>(segment_) + objects::kAccountingRecountAt));
}

bool ObjectStore::recount_asked() const { return recount_flag().load() != 0; }

std::atomic_ref<std::uint64_t> ObjectStore::counter() const {
  return std::atomic_ref<std::uint64_t>(*static_cast<std::uint64_t*>(segment_));
}

std::uint64_t ObjectStore::used() const { return counter().load(); }

Status ObjectStore::check_key(const std::string& key) {
  if (key.empty()) return invalid_argument("object key is empty");
  if (key.size() > kMaxKeyLen)
    return invalid_argument("object key longer than " + std::to_string(kMaxKeyLen) + " bytes");
  return Status::ok();
}

// A key whose metadata names a file of this host that is gone: a delete
// whose process died before it unpublished.  Collecting the journal
// unpublishes it (ok: the caller looks again).
Status ObjectStore::heal_if_gone(const std::string& key) {
  auto v = dir_.lookup(meta_key(key), 0);
  if (!v) return v.status();
  auto meta = parse_meta(*v);
  if (!meta || meta->host != opts_.host || file_exists(meta->file)) return invalid_usage("");
  HostLock lock(*this);
  collect(lock, false);
  // A delete from another host's rank that died after the agent's unlink
  // left no entry here: its key goes too.
  if (!deleted_by_another(meta->file)) {
    lock.unlock();
    (void)unpublish_if_names(dir_, meta_key(key), meta->file);
  }
  return Status::ok();
}

Status ObjectStore::put(const std::string& key, const void* buf, std::size_t len) {
  ACCRUN_RETURN_IF_ERROR(check_key(key));
  const std::string mk = meta_key(key);
  auto exists = [&] { return invalid_usage("object '" + key + "' exists; objects are immutable (delete it first)"); };
  if (dir_.lookup(mk, 0) && (!heal_if_gone(key) || dir_.lookup(mk, 0))) return exists();
  auto token = random_token();
  if (!token) return token.status();
  const std::string file = "obj." + std::to_string(opts_.job_rank) + "." + std::to_string(::getpid()) + "." +
                           std::to_string(next_file_.fetch_add(1)) + "." + *token;
  const std::string path = opts_.shm_dir + "/" + file;
  // Reserve the bytes and a journal slot together, so two racing puts
  // cannot both squeeze in and a put killed from here on is undone.  A full
  // store first collects what dead processes left.
  int at = -1;
  {
    HostLock lock(*this);
    at = claim_waiting(lock, kPutting, key, file, 0);
    if (recount_asked()) collect(lock, true);
    for (bool collected = false;; collected = true) {
      const std::uint64_t cur = counter().load();
      if (cur + len <= capacity_ && cur + len >= cur) break;
      if (collected) {
        release(at);
        return no_memory("object store full: putting '" + key + "' (" + human(len) + ") with " + human(cur) +
                         " of " + human(capacity_) + " in use on this host (raise ACCRUN_STORE_SIZE or delete objects)");
      }
      collect(lock, true);
    }
    slot(at).len = len;
    counter().fetch_add(len);
  }
  // From here the put either publishes or takes its bytes and slot back,
  // also when something below throws.
  struct Undo {
    ObjectStore& s;
    int at;
    const std::string& path;
    std::uint64_t len;
    bool keep = false;
    ~Undo() {
      HostLock lock(s);
      if (!keep) {
        ::unlink(path.c_str());
        s.counter().fetch_sub(len);
      }
      s.release(at);
    }
  } undo{*this, at, path, len};
  Status st;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) st = system_error("object store: create " + path);
  if (fd >= 0 && len > 0) {
    // Allocate first: a full tmpfs says so here rather than with SIGBUS later.
    if (int e = ::posix_fallocate(fd, 0, static_cast<off_t>(len)); e != 0) {
      st = e == ENOSPC ? no_memory("object store: no space left in " + opts_.shm_dir + " for '" + key + "' (" + human(len) + ")")
                       : system_error("object store: fallocate " + path, e);
    }
    const char* p = static_cast<const char*>(buf);
    std::size_t done = 0;
    while (st.is_ok() && done < len) {
      ssize_t n = ::pwrite(fd, p + done, len - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) st = system_error("object store: write " + path);
      else done += static_cast<std::size_t>(n);
    }
  }
  if (fd >= 0) ::close(fd);
  if (st.is_ok()) {
    const std::string meta = meta_of(file, len);
    step(at).store(kWritten, std::memory_order_release);
    st = dir_.publish(mk, meta);
    if (!st && st.code() == Code::kInvalidUsage) {
      st = exists();
    } else if (!st) {
      // A publish that failed (a timeout, say) may have been made all the same.
      auto v = dir_.lookup(mk, 0);
      if (v && *v == meta) st = Status::ok();
    }
  }
  undo.keep = st.is_ok();
  return st;
}

Status ObjectStore::get(const std::string& key, void* buf, std::size_t max_len, std::size_t* len,
                        int timeout_ms) {
  ACCRUN_RETURN_IF_ERROR(check_key(key));
  auto v = dir_.lookup(meta_key(key), timeout_ms);
  if (!v) {
    if (v.status().code() == Code::kNotFound) return not_found("no object '" + key + "'");
    if (v.status().code() == Code::kTimeout)
      return timeout_error("object '" + key + "' was not put within " + std::to_string(timeout_ms) + " ms");
    return v.status().with_context("object '" + key + "'");
  }
  auto meta = parse_meta(*v);
  if (!meta) return meta.status().with_context("object '" + key + "'");
  *len = meta->len;
  if (buf == nullptr && max_len == 0) return Status::ok();
  if (meta->host != opts_.host) ACCRUN_RETURN_IF_ERROR(reachable(*meta, key, "read"));
  if (meta->len > max_len)
    return invalid_argument("object '" + key + "' has " + std::to_string(meta->len) +
                            " bytes, more than the buffer's " + std::to_string(max_len));
  if (meta->host != opts_.host) {
    // From the owning host's agent, straight into buf.
    Status st = fetch_remote_object(meta->server, meta->host, meta->file, buf, meta->len);
    if (st.code() == Code::kNotFound) return not_found("object '" + key + "' was deleted");
    return st ? st : st.with_context("object '" + key + "'");
  }
  std::string path = opts_.shm_dir + "/" + meta->file;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return not_found("object '" + key + "' was deleted");
    return system_error("object store: open " + path);
  }
  char* p = static_cast<char*>(buf);
  std::size_t done = 0;
  Status st;
  while (done < meta->len) {
    ssize_t n = ::pread(fd, p + done, meta->len - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) { st = system_error("object store: read " + path); break; }
    if (n == 0) { st = Status(Code::kSystem, "object store: " + path + " is shorter than its metadata"); break; }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return st;
}

Status ObjectStore::remove(const std::string& key) {
  ACCRUN_RETURN_IF_ERROR(check_key(key));
  const std::string mk = meta_key(key);
  auto v = dir_.lookup(mk, 0);
  if (!v) return not_found("no object '" + key + "'");
  auto meta = parse_meta(*v);
  if (!meta) return meta.status().with_context("object '" + key + "'");
  if (meta->host != opts_.host) {
    ACCRUN_RETURN_IF_ERROR(reachable(*meta, key, "delete"));
    Status st = delete_remote_object(meta->server, meta->host, meta->file);
    if (st.code() == Code::kNotFound) {
      // Its file is gone but its key stayed: a delete from another host
      // that died between the two (or one racing this).  The key goes
      // now, so it can be put again.
      (void)unpublish_if_names(dir_, mk, meta->file);
      return not_found("no object '" + key + "' (deleted already)");
    }
    if (!st) return st.with_context("object '" + key + "'");
    st = unpublish_if_names(dir_, mk, meta->file);
    return st ? st : st.with_context("object store: unpublish '" + key + "'");
  }
  // unlink is the atomic step: of two racing deletes one frees the bytes.
  // It, the counter and the journal's slot change together under the host
  // lock (the slot first); the slot stays until the key is unpublished.
  const std::string path = opts_.shm_dir + "/" + meta->file;
  HostLock lock(*this);
  const int at = claim_waiting(lock, kUnlinked, key, meta->file, 0);
  if (::unlink(path.c_str()) != 0) {
    const int err = errno;
    release(at);
    if (err != ENOENT) return system_error("object store: unlink " + path, err);
    collect(lock, false);  // a dead delete's key is unpublished so
    // (one from another host's rank, which left no entry here, so)
    if (!deleted_by_another(meta->file)) {
      lock.unlock();
      (void)unpublish_if_names(dir_, mk, meta->file);
    }
    return not_found("no object '" + key + "' (deleted already)");
  }
  counter().fetch_sub(meta->len);
  lock.unlock();
  Status st = unpublish_if_names(dir_, mk, meta->file);
  lock.lock();
  release(at);
  return st ? st : st.with_context("object store: unpublish '" + key + "'");
}

}  // namespace accrun::runtime
