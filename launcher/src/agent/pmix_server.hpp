// pmix_server.hpp — the node agent's PMIx server (docs/design.md §4, accrun(7)
// "THE LAUNCHER AND THE RUNTIME").  Wraps the OpenPMIx server library: init,
// the job's namespace, its clients, and the host upcalls.  Upcalls arrive on
// PMIx's progress thread; they only copy their arguments into an UpcallQueue
// and wake the event loop, which runs everything here on its own thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <optional>
#include <vector>

#include <pmix.h>
#include <pmix_server.h>

#include "agent/node_daemon.hpp"
#include "accrun/plan.hpp"
#include "accrun/status.hpp"

namespace accrun::launcher {

// Closures handed from any thread to the event loop, which is woken through
// an eventfd.  Thread-safe.
class UpcallQueue {
 public:
  UpcallQueue();
  ~UpcallQueue();
  UpcallQueue(const UpcallQueue&) = delete;
  UpcallQueue& operator=(const UpcallQueue&) = delete;

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }        // readable while closures are queued
  void push(std::function<void()> fn);  // any thread
  // Runs every queued closure (including ones queued while running) on the
  // calling thread, the event loop.
  void drain();
  // Drops every queued closure unrun (after the PMIx library stopped).
  void clear();

 private:
  int fd_ = -1;
  std::mutex mu_;
  std::deque<std::function<void()>> q_;
};

// What the event loop learns from the PMIx library about its clients (by id).
class ClientEvents {
 public:
  virtual ~ClientEvents() = default;
  virtual void on_connected(int id) = 0;
  virtual void on_finalized(int id) = 0;
  virtual void on_abort(int id, int status, const std::string& message) = 0;
  // A client asked to start new processes (PMIx_Spawn); `done` gets the
  // PMIx status and, on success, the new namespace, once its processes
  // run.  Default: refused.
  virtual void on_spawn(SpawnRequest request, std::function<void(int status, std::string nspace)> done) {
    (void)request;
    done(PMIX_ERR_NOT_SUPPORTED, std::string());
  }
  // PMIx_Job_control: signal the processes `ids` (of any host) with `sig`;
  // `stop` (kill, terminate): their deaths are asked for, not failures.
  // `done` gets a PMIx status.  Default: refused.
  virtual void on_job_control(int requester, std::vector<int> ids, int sig, bool stop,
                              std::function<void(int status)> done) {
    (void)requester, (void)ids, (void)sig, (void)stop;
    done(PMIX_ERR_NOT_SUPPORTED);
  }
};

// One host's view of a job, as PMIx registers it.
struct PmixJob {
  std::string nspace;
  std::string jobid;
  std::vector<std::string> hostnames;  // node ids 0..n-1
  std::vector<std::vector<int>> ranks_by_node;  // global ranks on each node, ascending
  int node = 0;                         // this host's node id (-1: none of the job's processes run here)
  int size = 0;
  int universe = 0;                     // PMIX_UNIV_SIZE (MPI_UNIVERSE_SIZE): at least `size`
  std::vector<std::string> cpus;        // per global rank: hwloc list, "" unbound
  std::string tmpdir;                   // job temp dir (PMIX_TMPDIR)
  std::string nsdir;                    // PMIX_NSDIR
  std::string bind_to = "none";
  std::optional<pmix_proc_t> parent;   // a spawned job: the process that spawned it (PMIX_PARENT_ID)
  std::vector<int> app_of;              // per rank: its application (PMIX_APPNUM); empty: one application
};

// The PMIx server and the job's name directory.  One per process (the PMIx
// server library is process-global).  All methods run on the event loop
// thread; construction and destruction too.
class PmixServer {
 public:
  // Initialises the server library with its rendezvous in `rendezvous_dir`
  // (which must exist, mode 0700).  Upcalls are queued on `queue` and
  // reported to `events`; both must outlive the server.
  static Result<std::unique_ptr<PmixServer>> start(const std::string& rendezvous_dir,
                                                   UpcallQueue* queue, ClientEvents* events);
  ~PmixServer();  // deregisters the namespace and finalises the library
  PmixServer(const PmixServer&) = delete;
  PmixServer& operator=(const PmixServer&) = delete;

  // Registers the namespace (full job/node/app/proc key set) and this
  // host's clients.  Blocks until the library has stored it.
  Status register_job(const PmixJob& job);
  // Registers a namespace of processes the job spawned, whose rank 0 has
  // id `base` (the others follow; the controller hands out the ids, the
  // same on every host).
  Status register_spawned(const PmixJob& job, int base);
  // The PMIx client variables for one local process (PMIx_server_setup_fork).
  Result<Env> client_env(int id);

  // The id of a process of a namespace this server knows; -1 otherwise.
  int id_of(const pmix_proc_t& proc) const;
  // The process behind an id (false: none).
  bool proc_of(int id, pmix_proc_t* out) const;
  const std::string& nspace() const { return nspace_; }
  // A collective's signature: "*" for the job's whole namespace, else the
  // ids of its members, ascending and comma-separated.
  std::string signature_of(const std::vector<pmix_proc_t>& procs) const;
  // The ids of `procs` (a wildcard rank: every process of its namespace),
  // ascending, each once; processes of unknown namespaces are left out.
  std::vector<int> ids_of(const std::vector<pmix_proc_t>& procs) const;
  // The namespaces this server knows (the job's, then the spawned ones),
  // and the size of one (-1: unknown).
  std::vector<std::string> namespaces() const;
  int nspace_size(const std::string& nspace) const;

  // Tells every surviving rank that `rank` failed (accrun(7), "Failure
  // events"); `done` runs on the event loop once the library took it.
  void notify_failure(int rank, int exit_code, const std::string& kind,
                      const std::string& host, const std::string& text,
                      std::function<void()> done);

  // Fences go to `router` with their signature ("*" for the whole job, else
  // the ranks, ascending and comma-separated) and this host's
  // contribution; the router calls back with every participating host's.
  // (The node daemon's router completes a fence whose ranks are all on this
  // host at once, and sends the others to the job controller.)
  using FenceDone = std::function<void(bool ok, std::string all)>;
  using FenceRouter = std::function<void(const std::string& signature, std::string blob, FenceDone done)>;
  void set_fence_router(FenceRouter router) { fence_router_ = std::move(router); }
  const FenceRouter& fence_router() const { return fence_router_; }

  // Direct modex: the library asks for a rank on another host's data;
  // `router` fetches it (from that host's agent, through the controller).
  using ModexDone = std::function<void(int status, std::string blob)>;
  using ModexRouter = std::function<void(int rank, ModexDone done)>;
  void set_modex_router(ModexRouter router) { modex_router_ = std::move(router); }
  const ModexRouter& modex_router() const { return modex_router_; }
  // A local rank's committed data, as the library packs it for another
  // host's server (it waits for the rank's commit); `done` runs on the
  // event loop.
  void local_modex(int rank, ModexDone done);

  // The job's name directory lives with the job controller, for one host
  // as for many.  Values travel packed (pack_value/unpack_value); a lookup's
  // answer lists (key, publisher rank, packed value).
  using Found = DirectoryEntry;
  using DirectoryRouter = JobDirectory;
  // Keys any rank may unpublish: the object store's (accrun_delete(3) lets
  // any rank of the job delete an object).  Every other key only its
  // publisher may take back.
  static bool anyone_may_unpublish(const std::string& key) { return key.rfind("accrun.s/", 0) == 0; }
  void set_directory_router(DirectoryRouter* router) { directory_router_ = router; }
  static Result<std::string> pack_value(const pmix_value_t& value);

  // Event-loop side of the upcalls (called through the queue).
  struct PendingLookup;
  void do_publish(int rank, std::vector<std::pair<std::string, std::shared_ptr<pmix_value_t>>> values,
                  std::function<void(int)> reply);
  void do_lookup(std::shared_ptr<PendingLookup> lookup);
  void do_unpublish(int rank, std::vector<std::string> keys, std::function<void(int)> reply);
  UpcallQueue* queue() const { return queue_; }
  ClientEvents* events() const { return events_; }

 private:
  PmixServer(UpcallQueue* queue, ClientEvents* events) : queue_(queue), events_(events) {}

  UpcallQueue* queue_;
  ClientEvents* events_;
  bool initialized_ = false;
  void* topology_ = nullptr;            // hwloc_topology_t, alive until after finalize
  pmix_topology_t pmix_topology_{};
  Status register_nspace(const PmixJob& job, const std::vector<int>& local);
  std::string nspace_;
  int size_ = 0;
  struct Spawned {
    std::string nspace;
    int base = 0;  // id of its rank 0
    int size = 0;
  };
  std::vector<Spawned> spawned_;  // in order of their ids
  FenceRouter fence_router_;
  ModexRouter modex_router_;
  DirectoryRouter* directory_router_ = nullptr;
};

}  // namespace accrun::launcher
