#include "object_store.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <sstream>

#include "accrun/object_wire.hpp"
#include "config.hpp"
#include "object_fetch.hpp"

namespace accrun::runtime {
namespace {

constexpr std::size_t kSegmentSize = 4096;
constexpr std::size_t kMaxKeyLen = 256;

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

}  // namespace

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
  int err = errno;
  ::close(fd);
  if (seg == MAP_FAILED) return system_error("object store: mmap " + path, err);
  return std::unique_ptr<ObjectStore>(new ObjectStore(dir, std::move(opts), seg, *cap));
}

ObjectStore::~ObjectStore() { ::munmap(segment_, kSegmentSize); }

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

Status ObjectStore::put(const std::string& key, const void* buf, std::size_t len) {
  ACCRUN_RETURN_IF_ERROR(check_key(key));
  const std::string mk = meta_key(key);
  if (dir_.lookup(mk, 0)) return invalid_usage("object '" + key + "' exists; objects are immutable (delete it first)");
  // Reserve capacity first, so two racing puts cannot both squeeze in.
  auto c = counter();
  std::uint64_t cur = c.load();
  do {
    if (cur + len > capacity_ || cur + len < cur)
      return no_memory("object store full: putting '" + key + "' (" + human(len) + ") with " +
                       human(cur) + " of " + human(capacity_) +
                       " in use on this host (raise ACCRUN_STORE_SIZE or delete objects)");
  } while (!c.compare_exchange_weak(cur, cur + len));
  auto release = [&] { c.fetch_sub(len); };

  auto token = random_token();
  if (!token) {
    release();
    return token.status();
  }
  std::string file = "obj." + std::to_string(opts_.job_rank) + "." + std::to_string(::getpid()) + "." +
                     std::to_string(next_file_.fetch_add(1)) + "." + *token;
  std::string path = opts_.shm_dir + "/" + file;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    Status st = system_error("object store: create " + path);
    release();
    return st;
  }
  Status st;
  if (len > 0) {
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
  ::close(fd);
  if (st.is_ok()) {
    std::string meta = "host=" + opts_.host + "\nfile=" + file + "\nlen=" + std::to_string(len) + "\n";
    if (!opts_.server.empty()) meta += "server=" + opts_.server + "\n";
    st = dir_.publish(mk, meta);
    if (!st && st.code() == Code::kInvalidUsage)
      st = invalid_usage("object '" + key + "' exists; objects are immutable (delete it first)");
  }
  if (!st) {
    ::unlink(path.c_str());
    release();
  }
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
    if (st.code() == Code::kNotFound) return not_found("no object '" + key + "' (deleted already)");
    if (!st) return st.with_context("object '" + key + "'");
    st = dir_.unpublish(mk);
    if (!st && st.code() != Code::kNotFound) return st.with_context("object store: unpublish '" + key + "'");
    return Status::ok();
  }
  // unlink is the atomic step: of two racing deletes one frees the bytes.
  std::string path = opts_.shm_dir + "/" + meta->file;
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return not_found("no object '" + key + "' (deleted already)");
    return system_error("object store: unlink " + path);
  }
  counter().fetch_sub(meta->len);
  Status st = dir_.unpublish(mk);
  if (!st && st.code() != Code::kNotFound) return st.with_context("object store: unpublish '" + key + "'");
  return Status::ok();
}

}  // namespace accrun::runtime
