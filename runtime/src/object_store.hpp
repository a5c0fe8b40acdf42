// object_store.hpp — accrun_put/get/delete: immutable named objects shared by
// the ranks of a job (accrun_put(3), accrun(7) THE OBJECT STORE).
//
// An object's bytes live in a file "obj.<job rank>.<pid>.<n>.<32 hex>"
// (0600) in the job's shared-memory directory; its metadata
// "host=..\nfile=..\nlen=..\n[server=..\n]" is published under
// "accrun.s/<escaped key>" in the name directory, which makes put an atomic
// create-if-absent.  A rank on another host reads or deletes the file
// through the agent serving at "server" (object_fetch.hpp); the random hex
// makes the file's name unguessable.  Bytes in use on a host are counted
// in "store.accounting" (one 64-bit atomic counter, shared by the job's
// processes on that host) against ACCRUN_STORE_SIZE.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "directory.hpp"

namespace accrun::runtime {

struct StoreOptions {
  std::string shm_dir;      // private per-job directory (0700)
  std::string host;         // this process's host
  int job_rank = 0;
  std::string size_spec;    // ACCRUN_STORE_SIZE ("" = default)
  std::string server;       // ACCRUN_OBJECT_SERVER ("": no other host can read our objects)
};

class ObjectStore {
 public:
  // Maps (creating if needed) the accounting segment in opts.shm_dir.
  static Result<std::unique_ptr<ObjectStore>> open(Directory& dir, StoreOptions opts);
  ~ObjectStore();
  ObjectStore(const ObjectStore&) = delete;
  ObjectStore& operator=(const ObjectStore&) = delete;

  // All three are thread-safe and never wait for other ranks, except get,
  // which waits up to timeout_ms (< 0 forever) for the key to be put.
  Status put(const std::string& key, const void* buf, std::size_t len);
  // *len receives the object's size.  buf == nullptr with max_len == 0 asks
  // for the size only.  A buffer too small is kInvalidArgument (*len set).
  Status get(const std::string& key, void* buf, std::size_t max_len, std::size_t* len, int timeout_ms);
  Status remove(const std::string& key);

  std::uint64_t capacity() const { return capacity_; }
  std::uint64_t used() const;

 private:
  ObjectStore(Directory& dir, StoreOptions opts, void* segment, std::uint64_t capacity)
      : dir_(dir), opts_(std::move(opts)), segment_(segment), capacity_(capacity) {}
  std::atomic_ref<std::uint64_t> counter() const;
  static Status check_key(const std::string& key);

  Directory& dir_;
  StoreOptions opts_;
  void* segment_;            // mapping of store.accounting
  std::uint64_t capacity_;
  std::atomic<std::uint64_t> next_file_{0};
};

}  // namespace accrun::runtime
