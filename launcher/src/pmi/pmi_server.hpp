// pmi_server.hpp — the PMI-1 and PMI-2 wire protocols on a rank's PMI_FD
// socket (accrun(7), "MPICH AND OTHER PMI PROGRAMS").  The protocol side
// only: parsing, replies and each rank's state.  Keys, values and fences
// belong to a PmiHost, which the node agent implements over the same fence
// path as its PMIx server (pmi_host.hpp), so a PMI fence crosses hosts as a
// PMIx fence does.
//
// The wire formats, as MPICH's simple PMI client and Hydra speak them:
//   PMI-1  newline-terminated lines of space-separated key=value tokens,
//          "cmd=NAME ..." (values hold no spaces).
//   PMI-2  after a PMI-1 style "cmd=init pmi_version=2" line, messages of a
//          6-byte decimal length and "cmd=NAME;key=value;...;" where ";;"
//          inside a value stands for ';'.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace accrun::launcher::pmi {

// What a PMI client may ask about its job.  Fixed for the job's life.
struct PmiJobInfo {
  std::string kvsname;          // PMI-1 kvs name and PMI-2 job id
  int size = 0;                 // ranks in the job
  int universe_size = 0;        // what MPI_UNIVERSE_SIZE reports
  int appnum = 0;
  std::string process_mapping;  // PMI_process_mapping, e.g. "(vector,(0,2,4))"
  std::string host;             // this host's name, in the reasons fences fail with
};

// The key-value space and fences behind the PMI servers of one host.  All
// calls come from the event loop thread; callbacks run there too, possibly
// before the call returns.
class PmiHost {
 public:
  virtual ~PmiHost() = default;
  // Stores `key` for the job; visible to every rank after `rank`'s next
  // fence completes.  An error text (e.g. the key was already committed)
  // refuses it.
  virtual std::optional<std::string> put(int rank, const std::string& key, const std::string& value) = 0;
  // `rank` reached a fence (PMI-1 barrier, PMI-2 kvs-fence).  `done` runs
  // once every rank of the job arrived and the job's puts are visible, with
  // ok=false and a reason if the fence cannot complete (a rank failed).
  virtual void fence(int rank, std::function<void(bool ok, const std::string& why)> done) = 0;
  // A committed value of the job, if any.
  virtual std::optional<std::string> get(const std::string& key) const = 0;
  // Node attributes (PMI-2 info-putnodeattr/getnodeattr): this host only.
  // An error message if the put is wrong use.
  virtual std::optional<std::string> put_node(const std::string& key, const std::string& value) = 0;
  virtual std::optional<std::string> get_node(const std::string& key) const = 0;
  // The rank asked to abort the job with exit code `code`.
  virtual void abort(int rank, int code, const std::string& message) = 0;
  // The rank used the protocol wrongly; it was told so.  The host reports
  // it and fails the rank, so that no other rank waits for it for ever.
  virtual void misuse(int rank, const std::string& message) = 0;
  // The rank finished PMI (finalize); closing its socket after this is fine.
  virtual void finalized(int rank) = 0;
};

// One rank's PMI connection: feed it what the rank wrote, it answers through
// `send` and calls the host.  Not thread-safe; event loop only.
class PmiConnection {
 public:
  using Send = std::function<void(std::string_view bytes)>;
  // `job` and `host` must outlive the connection.
  PmiConnection(int rank, const PmiJobInfo* job, PmiHost* host, Send send);
  ~PmiConnection() { *alive_ = false; }  // a fence that completes later replies to nobody
  PmiConnection(const PmiConnection&) = delete;
  PmiConnection& operator=(const PmiConnection&) = delete;

  // Consumes bytes read from the socket.  Returns false once the rank
  // misused the protocol (it was told, the host too): close the socket.
  // After finalize or abort the socket stays open until the rank closes it.
  bool feed(const char* data, size_t n);
  // The rank closed its end: true if it had finalized.
  bool closed_cleanly() const { return state_ == State::kFinalized; }

  int version() const { return version_; }  // 0 before init, then 1 or 2
  int rank() const { return rank_; }

  // Limits that the server announces (get_maxes) and enforces.
  static constexpr size_t kKvsnameMax = 256, kKeyMax = 64, kValueMax = 1024;
  static constexpr size_t kLineMax = 4096;            // a PMI-1 line
  static constexpr size_t kMessageMax = 64 * 1024;    // a PMI-2 message

 private:
  enum class State { kNew, kReady, kInFence, kFinalized, kAborted, kDead };
  using Fields = std::vector<std::pair<std::string, std::string>>;

  bool handle_v1(const std::string& line);
  bool handle_v2(const std::string& message);
  bool handle_init(const Fields& f);
  void reply_v1(const std::string& text);
  void reply_v2(const Fields& f);  // cmd first; thrid_ follows it when set
  void reply_found(const std::string& response, const std::optional<std::string>& value);  // PMI-2 gets
  bool fail(const std::string& reply_cmd, const std::string& why);
  bool start_fence(const std::string& reply_cmd);
  std::optional<std::string> put(const std::string& key, const std::string& value);
  std::optional<std::string> job_attr(const std::string& key) const;

  int rank_;
  const PmiJobInfo* job_;
  PmiHost* host_;
  Send send_;
  State state_ = State::kNew;
  int version_ = 0;
  std::string in_;
  std::string thrid_;  // PMI-2: the thread id of the command being answered
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

// Parsing helpers, exposed for tests.  A PMI-1 line "cmd=a k=v" (no
// newline) into fields; nullopt if a token has no '='.
std::optional<std::vector<std::pair<std::string, std::string>>> parse_v1(std::string_view line);
// A PMI-2 command "cmd=a;k=v;" into fields (";;" unescaped); nullopt if
// malformed (a field without '=', or no final ';').
std::optional<std::vector<std::pair<std::string, std::string>>> parse_v2(std::string_view message);
// "(vector,(n,c,k),...)": the node of each rank, in rank order, as MPICH
// decodes it.
std::string process_mapping(const std::vector<int>& node_of_rank);

}  // namespace accrun::launcher::pmi
