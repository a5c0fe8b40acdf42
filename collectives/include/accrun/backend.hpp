// accrun/backend.hpp — the interface between libaccrun's named groups
// (runtime/) and the backends that move the data (collectives/store, mpi,
// nccl).  The runtime resolves membership and the group's epoch, then asks a
// backend factory for a Backend bound to that incarnation of the group.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "accrun/status.hpp"

namespace accrun::collectives {

// Same order and values as accrun_dtype_t / accrun_op_t in <accrun/accrun.h>.
enum class DType { kInt8, kUInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64 };
enum class Op { kSum, kProd, kMin, kMax };
enum class BackendKind { kStore, kMpi, kNccl };

// (Inline: every call of every backend asks it, a few-byte call several times.)
inline std::size_t dtype_size(DType dt) {
  switch (dt) {
    case DType::kInt8:
    case DType::kUInt8: return 1;
    case DType::kFloat16:
    case DType::kBFloat16: return 2;
    case DType::kInt32:
    case DType::kFloat32: return 4;
    case DType::kInt64:
    case DType::kFloat64: return 8;
  }
  return 0;
}
const char* dtype_name(DType dt);
const char* op_name(Op op);
const char* backend_name(BackendKind kind);

// inout[i] = inout[i] (op) in[i] for i < count.  float16 and bfloat16 are
// reduced in float32 and rounded to nearest even.  (collectives/src/kernels.cpp)
void reduce_into(DType dt, Op op, void* inout, const void* in, std::size_t count);
// out[i] = x[i] (op) y[i]: reduce_into with the result elsewhere.  `out`
// may be `x`; otherwise no two of them overlap.
void reduce_pair(DType dt, Op op, void* out, const void* x, const void* y, std::size_t count);

// One member of a group, by group rank.
struct Member {
  int job_rank = 0;       // rank in the job
  std::string host;       // ACCRUN_HOST of that rank
  int node_rank = 0;      // index of its host in the job
  int local_rank = 0;     // rank among the job's ranks on its host
  long pid = 0;           // its process id (meaningful on the same host)
};

// The group's slice of the job's name directory, already scoped to the
// group's name and epoch: a key published here can never be read by another
// incarnation of the group.  Implemented by the runtime over PMIx
// publish/lookup, and in memory by the in-process tests.
class Rendezvous {
 public:
  virtual ~Rendezvous() = default;
  // Publishes an immutable value; publishing an existing key is invalid usage.
  virtual Status publish(const std::string& key, const std::string& value) = 0;
  // Waits up to timeout_ms (< 0: forever) for the key; kTimeout otherwise.
  virtual Result<std::string> lookup(const std::string& key, int timeout_ms) = 0;
};

// What the job knows about failed ranks (PMIx events from the launcher).
// Backends consult it while they wait, so a dead peer is an error, not a hang.
class PeerMonitor {
 public:
  virtual ~PeerMonitor() = default;
  // A description such as "rank 3 on host n1 exited with status 1", or
  // nothing while the rank is not known to have failed.  Thread-safe.
  virtual std::optional<std::string> failure(int job_rank) const = 0;
  // Only what the job reported (a failed rank, a lost host): never that a
  // process of this host is gone, which a member that finished and exited
  // normally also is.  For members a call does not wait on.
  virtual std::optional<std::string> reported_failure(int job_rank) const {
    return failure(job_rank);
  }
};

// Everything a backend needs to bind to one incarnation of a group.
struct GroupContext {
  std::string name;
  std::uint64_t epoch = 0;
  int rank = 0;                        // this process's group rank
  int size = 1;
  std::vector<Member> members;         // indexed by group rank
  std::string shm_dir;                 // private per-job directory for segments (0700)
  bool oversubscribed = false;         // ACCRUN_OVERSUBSCRIBED: yield instead of spinning
  std::string host_transport = "tcp";  // ACCRUN_STORE_TRANSPORT: the store between hosts
  std::string tcp_congestion;          // ACCRUN_STORE_TCP_CONGESTION ("" = accrun's default)
  int timeout_ms = -1;                 // < 0: no timeout
  Rendezvous* rendezvous = nullptr;    // not owned; outlives the backend
  const PeerMonitor* peers = nullptr;  // not owned; may be null
};

// A group's data mover.  Calls on one Backend come from one thread at a
// time (the runtime serialises per group); different Backends are
// independent.  Every call is collective over the group unless noted, and
// returns kRemote naming the peer when one fails, kTimeout past the timeout.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendKind kind() const = 0;
  virtual void set_timeout(int timeout_ms) = 0;
  virtual Status allreduce(const void* send, void* recv, std::size_t count, DType dt, Op op,
                           void* stream) = 0;
  virtual Status reduce(const void* send, void* recv, std::size_t count, DType dt, Op op, int root,
                        void* stream) = 0;
  virtual Status broadcast(void* buf, std::size_t count, DType dt, int root, void* stream) = 0;
  virtual Status allgather(const void* send, void* recv, std::size_t count_per_rank, DType dt,
                           void* stream) = 0;
  virtual Status reducescatter(const void* send, void* recv, std::size_t recv_count, DType dt,
                               Op op, void* stream) = 0;
  virtual Status barrier() = 0;
  // Point-to-point (not collective).
  virtual Status send(const void* buf, std::size_t count, DType dt, int peer, void* stream) = 0;
  virtual Status recv(void* buf, std::size_t count, DType dt, int peer, void* stream) = 0;
  // Sends and receives between group_start() and group_end() are posted
  // together and complete at group_end().
  virtual Status group_start() = 0;
  virtual Status group_end() = 0;
};

// The default timeout of a group's data calls (collectives, send, recv):
// a call that waits longer fails with kTimeout naming what it waited for
// and the peers that had not arrived, instead of hanging on a wrong
// argument or a lost peer.  Ten minutes, like torch.distributed's NCCL
// watchdog; ACCRUN_GROUP_TIMEOUT (seconds, 0: none) overrides it for the
// job, accrun_group_set_timeout(3) for one group.  The runtime applies it to
// every group it creates (GroupManagerOptions::data_timeout_ms); this is the
// one place that defines it for every backend.
inline constexpr int kDefaultGroupTimeoutMs = 10 * 60 * 1000;
// Parses an ACCRUN_GROUP_TIMEOUT value: seconds (a fraction allowed), at
// most a day; 0 means no timeout (-1).  kInvalidArgument naming the variable
// otherwise.  (collectives/src/timeout.cpp)
Result<int> parse_group_timeout(const std::string& value);

// Factories.  Each is collective over the group's members.
Result<std::unique_ptr<Backend>> make_store_backend(const GroupContext& ctx);   // store/
Result<std::unique_ptr<Backend>> make_mpi_backend(const GroupContext& ctx);     // mpi/: kNotSupported without MPI
Result<std::unique_ptr<Backend>> make_nccl_backend(const GroupContext& ctx);    // nccl/: kNotSupported without NCCL

// An AUTO group whose members each hold one whole GPU: NCCL for buffers in
// GPU memory and `host` (the store, or MPI when every member initialised
// it) for buffers in host memory, decided per call by where the buffers
// live (memory_kind), so a host pointer never reaches NCCL.  Both backends
// are made together at init.  Every member must pass the same kind of
// memory to one call; a call mixing host and device buffers is refused.
// Barriers use the host backend; brackets open on both.  (collectives/src/routed.cpp)
std::unique_ptr<Backend> make_routed_backend(std::unique_ptr<Backend> device, std::unique_ptr<Backend> host,
                                             std::string group_name);

// Where a buffer lives, as the CUDA runtime the NCCL backend loads says
// (cudaPointerGetAttributes; the last answers are cached per thread).
// kHost for a null pointer and wherever that runtime does not load.
enum class MemoryKind { kHost, kDevice, kManaged };
MemoryKind memory_kind(const void* p);

// AUTO selection (docs/design.md §5).  The runtime gathers these facts from every
// member during group init, so every member computes the same answer.
struct MemberFacts {
  std::string host;
  std::vector<int> gpu_ids;            // the GPUs the rank holds (ACCRUN_GPU_IDS)
  bool gpus_whole = true;              // false when it holds a fraction (ACCRUN_GPU_FRACTION)
  bool nccl_loadable = false;          // libnccl.so.2 and the CUDA runtime load here
  bool mpi_initialized = false;        // the program has initialised MPI
};
// Returns the backend to use; `why` receives a one-line reason for the log.
BackendKind resolve_auto(const std::vector<MemberFacts>& facts, std::string* why);
// Empty unless two members on one host hold the same GPU id (fractional
// --gpus-per-rank packs ranks onto one device); otherwise names them.  NCCL
// refuses such a group, so a group asking for NCCL fails at init with it.
std::string gpu_sharing(const std::vector<MemberFacts>& facts);

// ---- Process facts and MPI ownership (added by the backends module:
// collectives/src/mpi/mpi_env.cpp, collectives/src/nccl/nccl_backend.cpp) ----

// True when MPI is initialised and not yet finalised in this process (by the
// program or by mpi_init_owned).  False in a build without MPI.  Never blocks;
// thread-safe.  The runtime uses it for MemberFacts::mpi_initialized.
bool mpi_initialized();

// Initialises MPI on behalf of the program (accrun_init_mpi(3)), asking for
// MPI_THREAD_MULTIPLE, and remembers that accrun owns MPI so that
// mpi_finalize_owned() finalises it.  If the program already initialised MPI,
// does nothing and accrun leaves MPI alone.  Not collective by itself (MPI's
// own initialisation synchronises as MPI does).  Errors: kNotSupported in a
// build without MPI; kInvalidUsage after MPI was finalised; kSystem when
// MPI_Init_thread fails.
Status mpi_init_owned(int* argc, char*** argv);

// Calls MPI_Finalize when mpi_init_owned() initialised MPI and it is still
// initialised; otherwise does nothing.  For accrun_finalize(): call it after
// every group is destroyed.  Blocks as MPI_Finalize does.
Status mpi_finalize_owned();

// True when libnccl.so.2 and the CUDA runtime load with every symbol the NCCL
// backend needs and the CUDA runtime sees at least one GPU; otherwise false
// with the reason in *why (may be null).  Loads the libraries on first use
// (thread-safe) and keeps them loaded.  For MemberFacts::nccl_loadable.
bool nccl_loadable(std::string* why);

}  // namespace accrun::collectives
