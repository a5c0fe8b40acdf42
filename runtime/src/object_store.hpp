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
// in "store.accounting" (one 64-bit counter, shared by the job's processes
// on that host) against ACCRUN_STORE_SIZE.
//
// A process killed in the middle of a put or a delete must not leave bytes
// counted that no key names, nor a key that names a deleted file.  So the
// same segment keeps a journal: a slot per put or delete in progress on the
// host (its key, file, size and step), each slot write-locked (an
// open-file-description lock on one byte, which the kernel drops when its
// process dies) by the process that holds it.  Every change of the
// counter, and a delete's unlink, happens under the host's lock (such a
// lock on another byte; the agent takes it too).  A slot in use whose lock
// is free belongs to a dead process: collect() finishes or undoes its step
// and counts the host's bytes again from the files.  It runs when a put
// finds the store full or the key's file gone, and when a delete finds the
// file gone.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

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
  // In a child forked without exec: lets go of the descriptor whose locks
  // are the parent's (the child must not use the store).
  void after_fork();

  std::uint64_t capacity() const { return capacity_; }
  std::uint64_t used() const;

 private:
  struct Slot;
  class HostLock;
  ObjectStore(Directory& dir, StoreOptions opts, int fd, void* segment, std::uint64_t capacity)
      : dir_(dir), opts_(std::move(opts)), fd_(fd), segment_(segment), capacity_(capacity) {}
  std::atomic_ref<std::uint64_t> counter() const;
  std::atomic_ref<std::uint64_t> recount_flag() const;
  static Status check_key(const std::string& key);
  Slot& slot(int i) const;
  std::atomic_ref<std::uint32_t> step(int i) const;
  // Under the host lock: a free slot taken for this instance at `step` (-1:
  // none free), or (claim_waiting) the first that frees.
  int claim(std::uint32_t step, const std::string& key, const std::string& file, std::uint64_t len);
  int claim_waiting(HostLock& lock, std::uint32_t step, const std::string& key, const std::string& file,
                    std::uint64_t len);
  void release(int i);  // under the host lock
  // Under the host lock (let go meanwhile for the directory's calls):
  // finishes or undoes what dead processes left in the journal, then (when
  // there were any, or `recount`) sets the counter to the bytes of the
  // host's object files, a put still writing counted by its reservation.
  void collect(HostLock& lock, bool recount);
  Status heal_if_gone(const std::string& key);
  std::string meta_of(const std::string& file, std::uint64_t len) const;
  // Under the host lock: whether a delete this instance did not take over
  // holds a slot for `file` (it unpublishes the key itself).
  bool deleted_by_another(const std::string& file) const;
  bool recount_asked() const;
  bool file_exists(const std::string& file) const;

  Directory& dir_;
  StoreOptions opts_;
  int fd_;                   // store.accounting: its description holds this instance's locks
  void* segment_;            // mapping of store.accounting
  std::uint64_t capacity_;
  std::atomic<std::uint64_t> next_file_{0};
  std::mutex lock_mu_;       // the host lock's part inside this process
  std::vector<bool> mine_;   // slots this instance holds (its own locks do not show to F_OFD_GETLK)
};

}  // namespace accrun::runtime
