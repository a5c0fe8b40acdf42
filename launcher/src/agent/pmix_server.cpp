// The node agent's PMIx server: see pmix_server.hpp and accrun(7).
#include "agent/pmix_server.hpp"

#include "peer_guard.hpp"

#include <hwloc.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include "accrun/detect.hpp"
#include "accrun/log.hpp"

namespace accrun::launcher {

// ---------------------------------------------------------------- UpcallQueue

UpcallQueue::UpcallQueue() : fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

UpcallQueue::~UpcallQueue() {
  if (fd_ >= 0) close(fd_);
}

void UpcallQueue::push(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    q_.push_back(std::move(fn));
  }
  uint64_t one = 1;
  ssize_t n = write(fd_, &one, sizeof one);
  (void)n;  // the counter cannot overflow in practice; a failed wake-up is retried by the next push
}

void UpcallQueue::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  q_.clear();
}

void UpcallQueue::drain() {
  uint64_t count = 0;
  ssize_t n = read(fd_, &count, sizeof count);
  (void)n;  // EAGAIN: nothing was signalled, the queue may still hold work
  for (;;) {
    std::deque<std::function<void()>> batch;
    {
      std::lock_guard<std::mutex> lock(mu_);
      batch.swap(q_);
    }
    if (batch.empty()) return;
    for (auto& fn : batch) fn();
  }
}

// ------------------------------------------------------------------- helpers

namespace {

// The PMIx server library calls plain C functions with no context pointer
// for most upcalls, so the active server is reached through this one
// process-wide pointer (one PMIx server per process is the library's own
// rule).  Set while the server is initialised, cleared before finalize.
std::atomic<PmixServer*> g_active{nullptr};

// How long the agent waits for the library's teardown (~PmixServer).
constexpr std::chrono::seconds kTeardownBound{2};

// Waits for one PMIx operation callback.
struct OpSync {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  pmix_status_t status = PMIX_SUCCESS;

  static void callback(pmix_status_t status, void* cbdata) {
    auto* s = static_cast<OpSync*>(cbdata);
    std::lock_guard<std::mutex> lock(s->mu);
    s->status = status;
    s->done = true;
    s->cv.notify_all();
  }
  pmix_status_t wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [this] { return done; });
    return status;
  }
  // Waits at most `bound`; past it, the waiter has gone on (`abandoned`),
  // which whoever completes it checks under `mu`.
  bool abandoned = false;
  bool wait_for(std::chrono::milliseconds bound) {
    std::unique_lock<std::mutex> lock(mu);
    abandoned = !cv.wait_for(lock, bound, [this] { return done; });
    return !abandoned;
  }
};

Status pmix_error(const std::string& what, pmix_status_t rc) {
  return Status(Code::kSystem, what + ": " + PMIx_Error_string(rc));
}

std::string join(const std::vector<std::string>& parts, const char* sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::vector<std::string> parts;
  for (int r : ranks) parts.push_back(std::to_string(r));
  return join(parts, ",");
}

void free_value(pmix_value_t* v) {
  if (v == nullptr) return;
  PMIX_VALUE_RELEASE(v);
}

std::shared_ptr<pmix_value_t> copy_value(const pmix_value_t* src) {
  pmix_value_t* v = nullptr;
  PMIX_VALUE_CREATE(v, 1);
  if (v == nullptr) return nullptr;
  if (PMIx_Value_xfer(v, src) != PMIX_SUCCESS) {
    free_value(v);
    return nullptr;
  }
  return std::shared_ptr<pmix_value_t>(v, free_value);
}

// An info list under construction; converted to one array at the end.
class InfoList {
 public:
  InfoList() : p_(PMIx_Info_list_start()) {}
  ~InfoList() { PMIx_Info_list_release(p_); }
  InfoList(const InfoList&) = delete;
  InfoList& operator=(const InfoList&) = delete;
  void add(const char* key, const void* value, pmix_data_type_t type) {
    if (PMIx_Info_list_add(p_, key, value, type) != PMIX_SUCCESS) ok_ = false;
  }
  void add_string(const char* key, const std::string& v) { add(key, v.c_str(), PMIX_STRING); }
  void add_u32(const char* key, uint32_t v) { add(key, &v, PMIX_UINT32); }
  void add_u16(const char* key, uint16_t v) { add(key, &v, PMIX_UINT16); }
  void add_rank(const char* key, pmix_rank_t v) { add(key, &v, PMIX_PROC_RANK); }
  void add_bool(const char* key, bool v) { add(key, &v, PMIX_BOOL); }
  // Adds `inner` as a nested data array under `key`.
  void add_array(const char* key, InfoList& inner) {
    pmix_data_array_t da;
    PMIX_DATA_ARRAY_CONSTRUCT(&da, 0, PMIX_INFO);
    if (PMIx_Info_list_convert(inner.p_, &da) != PMIX_SUCCESS) {
      ok_ = false;
      return;
    }
    add(key, &da, PMIX_DATA_ARRAY);
    PMIX_DATA_ARRAY_DESTRUCT(&da);
  }
  bool ok() const { return ok_; }
  // The list as an array the caller owns (PMIX_DATA_ARRAY_DESTRUCT).
  bool convert(pmix_data_array_t* out) {
    PMIX_DATA_ARRAY_CONSTRUCT(out, 0, PMIX_INFO);
    return ok_ && PMIx_Info_list_convert(p_, out) == PMIX_SUCCESS;
  }

 private:
  void* p_;
  bool ok_ = true;
};

// ------------------------------------------------------------------- upcalls
// Each runs on PMIx's progress thread: copy, queue, return.  The answer
// goes back to the library on that thread too (on_progress_thread).

void run_shifted(pmix_status_t, void* cbdata) {
  std::unique_ptr<std::function<void()>> fn(static_cast<std::function<void()>*>(cbdata));
  (*fn)();
}

// Runs `fn` on the library's progress thread.  OpenPMIx 4.2 queues the
// reply of many host callbacks (publish, unpublish, lookup, a client's
// finalize, abort, job control, queries, a direct modex) on the caller's
// thread, touching the client's send queue without a lock; from the
// agent's event loop that raced the progress thread's own replies to the
// same client, and a reply was lost (a client that looked up keys from
// several threads hung in PMIx_Lookup).  PMIx_server_setup_local_support
// without a namespace thread-shifts, does nothing else (its network
// plugins refuse a missing namespace) and calls back there, in every
// version.  Once the library is finalised nothing is answered: the
// client's request goes with it.
void on_progress_thread(std::function<void()> fn) {
  auto* box = new std::function<void()>(std::move(fn));
  if (PMIx_server_setup_local_support(nullptr, nullptr, 0, run_shifted, box) != PMIX_SUCCESS) delete box;
}

// An op callback's answer, on the progress thread.
void answer_op(pmix_op_cbfunc_t cbfunc, void* cbdata, pmix_status_t status) {
  if (cbfunc) on_progress_thread([cbfunc, cbdata, status] { cbfunc(status, cbdata); });
}

pmix_status_t up_connected(const pmix_proc_t* proc, void*, pmix_op_cbfunc_t cbfunc, void* cbdata) {
  PmixServer* s = g_active.load();
  if (s == nullptr) return PMIX_OPERATION_SUCCEEDED;
  pmix_proc_t p = *proc;
  s->queue()->push([s, p, cbfunc, cbdata] {
    if (int id = s->id_of(p); id >= 0) s->events()->on_connected(id);
    answer_op(cbfunc, cbdata, PMIX_SUCCESS);
  });
  return PMIX_SUCCESS;
}

pmix_status_t up_finalized(const pmix_proc_t* proc, void*, pmix_op_cbfunc_t cbfunc, void* cbdata) {
  PmixServer* s = g_active.load();
  if (s == nullptr) return PMIX_OPERATION_SUCCEEDED;
  pmix_proc_t p = *proc;
  s->queue()->push([s, p, cbfunc, cbdata] {
    if (int id = s->id_of(p); id >= 0) s->events()->on_finalized(id);
    answer_op(cbfunc, cbdata, PMIX_SUCCESS);
  });
  return PMIX_SUCCESS;
}

std::string printable(const char* text, size_t max) {
  std::string out;
  for (const char* p = text; *p != '\0' && out.size() < max; ++p) {
    auto c = static_cast<unsigned char>(*p);
    if (c >= 0x20 && c != 0x7f) {
      out += static_cast<char>(c);
    } else {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\x%02x", c);
      out += esc;
    }
  }
  return out;
}

pmix_status_t up_abort(const pmix_proc_t* proc, void*, int status, const char msg[],
                       pmix_proc_t[], size_t, pmix_op_cbfunc_t cbfunc, void* cbdata) {
  PmixServer* s = g_active.load();
  if (s == nullptr) return PMIX_OPERATION_SUCCEEDED;
  pmix_proc_t p = *proc;
  // A rank's text reaches the user's terminal: control bytes (escape
  // sequences) are shown escaped, and the length is bounded.
  std::string message = printable(msg ? msg : "", 1024);
  // Whatever set of processes it names, an abort ends the job (mpirun's rule).
  s->queue()->push([s, p, status, message, cbfunc, cbdata] {
    if (int id = s->id_of(p); id >= 0) s->events()->on_abort(id, status, message);
    answer_op(cbfunc, cbdata, PMIX_SUCCESS);
  });
  return PMIX_SUCCESS;
}

void release_blob(void* cbdata) { delete static_cast<std::string*>(cbdata); }

std::vector<pmix_proc_t> copy_procs(const pmix_proc_t procs[], size_t nprocs) {
  return procs != nullptr ? std::vector<pmix_proc_t>(procs, procs + nprocs) : std::vector<pmix_proc_t>();
}

pmix_status_t up_fence(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t[], size_t, char* data,
                       size_t ndata, pmix_modex_cbfunc_t cbfunc, void* cbdata) {
  PmixServer* s = g_active.load();
  if (s == nullptr) return PMIX_ERR_NOT_SUPPORTED;
  // The library owns `data` only until we return: copy it.
  auto blob = std::make_shared<std::string>(data ? std::string(data, ndata) : std::string());
  auto members = copy_procs(procs, nprocs);
  s->queue()->push([s, blob, members, cbfunc, cbdata] {
    std::string signature = s->signature_of(members);
    auto complete = [cbfunc, cbdata](bool ok, std::string all) {
      if (!ok) {
        log(LogLevel::kDebug, "fence: failed%s%s", all.empty() ? "" : ": ", all.c_str());
        all.clear();  // why it failed, not data
      }
      log(LogLevel::kDebug, "fence: completing with %zu bytes", all.size());
      auto* owned = new std::string(std::move(all));
      cbfunc(ok ? PMIX_SUCCESS : PMIX_ERROR, owned->data(), owned->size(), cbdata, release_blob, owned);
    };
    if (s->fence_router()) {
      s->fence_router()(signature, std::move(*blob), complete);
    } else {
      complete(false, std::string());
    }
  });
  return PMIX_SUCCESS;
}

// PMIx_Connect and PMIx_Disconnect: a collective of every process named,
// without data, taking the fences' route; the library completes it for
// its clients (and hands each the other namespaces' job data).
pmix_status_t route_collective(const char* kind, const pmix_proc_t procs[], size_t nprocs, pmix_op_cbfunc_t cbfunc,
                               void* cbdata) {
  PmixServer* s = g_active.load();
  if (s == nullptr) return PMIX_ERR_NOT_SUPPORTED;
  auto members = copy_procs(procs, nprocs);
  std::string prefix = kind;
  s->queue()->push([s, members, prefix, cbfunc, cbdata] {
    std::string signature = prefix + s->signature_of(members);
    auto complete = [cbfunc, cbdata](bool ok, std::string) {
      if (cbfunc) cbfunc(ok ? PMIX_SUCCESS : PMIX_ERROR, cbdata);
    };
    if (s->fence_router()) {
      s->fence_router()(signature, std::string(), complete);
    } else {
      complete(false, std::string());
    }
  });
  return PMIX_SUCCESS;
}

pmix_status_t up_connect(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t[], size_t,
                         pmix_op_cbfunc_t cbfunc, void* cbdata) {
  return route_collective("connect:", procs, nprocs, cbfunc, cbdata);
}

pmix_status_t up_disconnect(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t[], size_t,
                            pmix_op_cbfunc_t cbfunc, void* cbdata) {
  return route_collective("disconnect:", procs, nprocs, cbfunc, cbdata);
}

std::map<std::string, std::string> string_infos(const pmix_info_t info[], size_t ninfo) {
  std::map<std::string, std::string> out;
  for (size_t i = 0; info != nullptr && i < ninfo; ++i)
    if (info[i].value.type == PMIX_STRING && info[i].value.data.string != nullptr)
      out[info[i].key] = info[i].value.data.string;
  return out;
}

std::vector<std::string> string_array(char** a) {
  std::vector<std::string> out;
  for (size_t i = 0; a != nullptr && a[i] != nullptr; ++i) out.emplace_back(a[i]);
  return out;
}

// PMIx_Spawn (MPI_Comm_spawn): the request is copied for the event loop,
// whose answer (a new namespace, or why not) goes back to the library.
pmix_status_t up_spawn(const pmix_proc_t* proc, const pmix_info_t job_info[], size_t ninfo, const pmix_app_t apps[],
                       size_t napps, pmix_spawn_cbfunc_t cbfunc, void* cbdata) {
  PmixServer* s = g_active.load();
  if (s == nullptr || proc == nullptr) return PMIX_ERR_NOT_SUPPORTED;
  SpawnRequest req;
  req.info = string_infos(job_info, ninfo);
  for (size_t i = 0; apps != nullptr && i < napps; ++i) {
    SpawnApp a;
    a.cmd = apps[i].cmd != nullptr ? apps[i].cmd : "";
    a.argv = string_array(apps[i].argv);
    a.env = string_array(apps[i].env);
    a.cwd = apps[i].cwd != nullptr ? apps[i].cwd : "";
    a.maxprocs = apps[i].maxprocs;
    a.info = string_infos(apps[i].info, apps[i].ninfo);
    req.apps.push_back(std::move(a));
  }
  pmix_proc_t p = *proc;
  s->queue()->push([s, p, req = std::move(req), cbfunc, cbdata]() mutable {
    req.requester = s->id_of(p);
    s->events()->on_spawn(std::move(req), [cbfunc, cbdata](int status, std::string nspace) {
      // The library copies the name before this returns.
      if (cbfunc) cbfunc(status, nspace.empty() ? nullptr : nspace.data(), cbdata);
    });
  });
  return PMIX_SUCCESS;
}

// PMIx_Job_control: kill, terminate or signal processes of the job (any
// namespace, any host).  Cleanup directives (PMIX_REGISTER_CLEANUP*, which
// Open MPI sends for its session directories) the library keeps itself and
// answers without us; other directives are not supported.
pmix_status_t up_job_control(const pmix_proc_t* requestor, const pmix_proc_t targets[], size_t ntargets,
                             const pmix_info_t directives[], size_t ndirs, pmix_info_cbfunc_t cbfunc, void* cbdata) {
  PmixServer* s = g_active.load();
  if (s == nullptr || requestor == nullptr) return PMIX_ERR_NOT_SUPPORTED;
  int sig = 0;
  bool stop = false;
  for (size_t i = 0; i < ndirs; ++i) {
    const pmix_info_t& d = directives[i];
    if (PMIX_CHECK_KEY(&d, PMIX_JOB_CTRL_KILL) && PMIX_INFO_TRUE(&d)) {
      sig = SIGKILL;
      stop = true;
    } else if (PMIX_CHECK_KEY(&d, PMIX_JOB_CTRL_TERMINATE) && PMIX_INFO_TRUE(&d)) {
      if (sig == 0) sig = SIGTERM;
      stop = true;
    } else if (PMIX_CHECK_KEY(&d, PMIX_JOB_CTRL_SIGNAL) && d.value.type == PMIX_INT && sig == 0) {
      sig = d.value.data.integer;
    }
  }
  if (sig <= 0 || sig >= NSIG) return PMIX_ERR_NOT_SUPPORTED;
  pmix_proc_t req = *requestor;
  std::vector<pmix_proc_t> who = copy_procs(targets, ntargets);
  // No targets: every process of the requester's namespace.
  if (who.empty()) {
    pmix_proc_t all;
    PMIX_LOAD_PROCID(&all, req.nspace, PMIX_RANK_WILDCARD);
    who.push_back(all);
  }
  s->queue()->push([s, req, who, sig, stop, cbfunc, cbdata] {
    s->events()->on_job_control(s->id_of(req), s->ids_of(who), sig, stop, [cbfunc, cbdata](int status) {
      if (cbfunc) on_progress_thread([cbfunc, cbdata, status] { cbfunc(status, nullptr, 0, cbdata, nullptr, nullptr); });
    });
  });
  return PMIX_SUCCESS;
}

// PMIx_Query_info: what this host's agent knows of the job (accrun(7),
// "Queries").  Each answered key comes back under its own name.
struct QueryAnswer {
  pmix_info_t* info = nullptr;
  size_t n = 0;
};
void release_answer(void* cbdata) {
  auto* a = static_cast<QueryAnswer*>(cbdata);
  if (a->info != nullptr) PMIX_INFO_FREE(a->info, a->n);
  delete a;
}

pmix_status_t up_query(pmix_proc_t*, pmix_query_t* queries, size_t nqueries, pmix_info_cbfunc_t cbfunc,
                       void* cbdata) {
  PmixServer* s = g_active.load();
  if (s == nullptr) return PMIX_ERR_NOT_SUPPORTED;
  struct Asked {
    std::string key;
    std::string nspace;  // PMIX_NSPACE qualifier
  };
  std::vector<Asked> asked;
  for (size_t q = 0; q < nqueries; ++q) {
    std::string nspace;
    for (size_t i = 0; i < queries[q].nqual; ++i)
      if (PMIX_CHECK_KEY(&queries[q].qualifiers[i], PMIX_NSPACE) &&
          queries[q].qualifiers[i].value.type == PMIX_STRING && queries[q].qualifiers[i].value.data.string)
        nspace = queries[q].qualifiers[i].value.data.string;
    for (size_t k = 0; queries[q].keys != nullptr && queries[q].keys[k] != nullptr; ++k)
      asked.push_back({queries[q].keys[k], nspace});
  }
  s->queue()->push([s, asked, cbfunc, cbdata] {
    std::vector<std::pair<std::string, std::string>> strings;
    std::vector<std::pair<std::string, uint32_t>> numbers;
    for (const Asked& a : asked) {
      if (a.key == PMIX_QUERY_NAMESPACES) {
        strings.emplace_back(a.key, join(s->namespaces(), ","));
      } else if (a.key == PMIX_QUERY_SPAWN_SUPPORT) {
        strings.emplace_back(a.key, std::string(PMIX_HOST) + "," + PMIX_WDIR);
      } else if (a.key == PMIX_JOB_SIZE) {
        int n = s->nspace_size(a.nspace.empty() ? s->nspace() : a.nspace);
        if (n >= 0) numbers.emplace_back(a.key, static_cast<uint32_t>(n));
      }
    }
    auto* answer = new QueryAnswer;
    answer->n = strings.size() + numbers.size();
    if (answer->n > 0) PMIX_INFO_CREATE(answer->info, answer->n);
    size_t i = 0;
    for (const auto& [k, v] : strings) PMIX_INFO_LOAD(&answer->info[i++], k.c_str(), v.c_str(), PMIX_STRING);
    for (const auto& [k, v] : numbers) PMIX_INFO_LOAD(&answer->info[i++], k.c_str(), &v, PMIX_UINT32);
    pmix_status_t status = answer->n == 0 ? PMIX_ERR_NOT_FOUND
                           : answer->n < asked.size() ? PMIX_QUERY_PARTIAL_SUCCESS
                                                      : PMIX_SUCCESS;
    on_progress_thread([cbfunc, cbdata, status, answer] {
      cbfunc(status, answer->info, answer->n, cbdata, release_answer, answer);
    });
  });
  return PMIX_SUCCESS;
}

// The library asks for the data of a rank on another host (a PMIx_Get
// that no fence carried): the owning host's agent is asked through the
// controller.
pmix_status_t up_direct_modex(const pmix_proc_t* proc, const pmix_info_t[], size_t, pmix_modex_cbfunc_t cbfunc,
                              void* cbdata) {
  PmixServer* s = g_active.load();
  if (s == nullptr || !s->modex_router() || proc == nullptr) return PMIX_ERR_NOT_FOUND;
  pmix_proc_t p = *proc;
  s->queue()->push([s, p, cbfunc, cbdata] {
    int id = s->id_of(p);
    if (id < 0) {
      on_progress_thread([cbfunc, cbdata] { cbfunc(PMIX_ERR_NOT_FOUND, nullptr, 0, cbdata, nullptr, nullptr); });
      return;
    }
    s->modex_router()(id, [cbfunc, cbdata](int status, std::string blob) {
      auto* owned = new std::string(std::move(blob));
      on_progress_thread([cbfunc, cbdata, status, owned] {
        cbfunc(status, owned->data(), owned->size(), cbdata, release_blob, owned);
      });
    });
  });
  return PMIX_SUCCESS;
}

struct ModexRequest {
  PmixServer* server;
  PmixServer::ModexDone done;
};

// From the library's progress thread: the blob is its own until we return.
void local_modex_done(pmix_status_t status, char* data, size_t size, void* cbdata) {
  auto* req = static_cast<ModexRequest*>(cbdata);
  std::string blob(data != nullptr ? data : "", data != nullptr ? size : 0);
  req->server->queue()->push([req, status, blob = std::move(blob)]() mutable {
    req->done(status, std::move(blob));
    delete req;
  });
}

bool reserved_key(const char* key) { return std::strncmp(key, "pmix.", 5) == 0; }

pmix_status_t up_publish(const pmix_proc_t* proc, const pmix_info_t info[], size_t ninfo,
                         pmix_op_cbfunc_t cbfunc, void* cbdata) {
  PmixServer* s = g_active.load();
  if (s == nullptr) return PMIX_ERR_NOT_SUPPORTED;
  std::vector<std::pair<std::string, std::shared_ptr<pmix_value_t>>> values;
  for (size_t i = 0; i < ninfo; ++i) {
    if (reserved_key(info[i].key)) continue;
    auto v = copy_value(&info[i].value);
    if (!v) return PMIX_ERR_NOMEM;
    values.emplace_back(info[i].key, std::move(v));
  }
  pmix_proc_t p = *proc;
  s->queue()->push([s, p, values = std::move(values), cbfunc, cbdata]() mutable {
    s->do_publish(s->id_of(p), std::move(values), [cbfunc, cbdata](int rc) { answer_op(cbfunc, cbdata, rc); });
  });
  return PMIX_SUCCESS;
}

}  // namespace

struct PmixServer::PendingLookup {
  pmix_proc_t proc{};
  std::vector<std::string> keys;
  bool wait = false;
  size_t wait_count = 0;  // 0: every key
  std::optional<std::chrono::steady_clock::time_point> deadline;
  pmix_lookup_cbfunc_t cbfunc = nullptr;
  void* cbdata = nullptr;
  bool done = false;
};

namespace {

pmix_status_t up_lookup(const pmix_proc_t* proc, char** keys, const pmix_info_t info[], size_t ninfo,
                        pmix_lookup_cbfunc_t cbfunc, void* cbdata) {
  PmixServer* s = g_active.load();
  if (s == nullptr) return PMIX_ERR_NOT_SUPPORTED;
  auto lookup = std::make_shared<PmixServer::PendingLookup>();
  lookup->proc = *proc;
  for (size_t i = 0; keys != nullptr && keys[i] != nullptr; ++i) lookup->keys.emplace_back(keys[i]);
  for (size_t i = 0; i < ninfo; ++i) {
    const pmix_value_t& v = info[i].value;
    if (PMIX_CHECK_KEY(&info[i], PMIX_WAIT)) {
      // PMIX_WAIT is an int in the standard (0: all keys); accept a bool too.
      if (v.type == PMIX_BOOL) {
        lookup->wait = v.data.flag;
      } else if (v.type == PMIX_INT) {
        lookup->wait = true;
        lookup->wait_count = v.data.integer > 0 ? static_cast<size_t>(v.data.integer) : 0;
      } else if (v.type == PMIX_UINT32) {
        lookup->wait = true;
        lookup->wait_count = v.data.uint32;
      } else {
        lookup->wait = true;
      }
    } else {
      // The wait's limit: PMIX_TIMEOUT (or accrun.wait.seconds) in seconds,
      // libaccrun's accrun.wait.ms in milliseconds.
      long unit_ms = 0;
      if (PMIX_CHECK_KEY(&info[i], "accrun.wait.ms")) unit_ms = 1;
      if (PMIX_CHECK_KEY(&info[i], PMIX_TIMEOUT) || PMIX_CHECK_KEY(&info[i], "accrun.wait.seconds")) unit_ms = 1000;
      long n = v.type == PMIX_INT ? v.data.integer : v.type == PMIX_UINT32 ? v.data.uint32 : 0;
      if (unit_ms > 0 && n > 0)
        lookup->deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(n * unit_ms);
    }
  }
  lookup->cbfunc = cbfunc;
  lookup->cbdata = cbdata;
  s->queue()->push([s, lookup] { s->do_lookup(lookup); });
  return PMIX_SUCCESS;
}

pmix_status_t up_unpublish(const pmix_proc_t* proc, char** keys, const pmix_info_t[], size_t,
                           pmix_op_cbfunc_t cbfunc, void* cbdata) {
  PmixServer* s = g_active.load();
  if (s == nullptr) return PMIX_ERR_NOT_SUPPORTED;
  std::vector<std::string> names;
  for (size_t i = 0; keys != nullptr && keys[i] != nullptr; ++i) names.emplace_back(keys[i]);
  pmix_proc_t p = *proc;
  s->queue()->push([s, p, names = std::move(names), cbfunc, cbdata]() mutable {
    s->do_unpublish(s->id_of(p), std::move(names), [cbfunc, cbdata](int rc) { answer_op(cbfunc, cbdata, rc); });
  });
  return PMIX_SUCCESS;
}

pmix_server_module_t make_module() {
  pmix_server_module_t m;
  std::memset(&m, 0, sizeof m);
  m.client_connected = up_connected;
  m.client_finalized = up_finalized;
  m.abort = up_abort;
  m.fence_nb = up_fence;
  m.direct_modex = up_direct_modex;
  m.publish = up_publish;
  m.lookup = up_lookup;
  m.unpublish = up_unpublish;
  m.connect = up_connect;
  m.disconnect = up_disconnect;
  m.spawn = up_spawn;
  m.job_control = up_job_control;
  m.query = up_query;
  return m;
}

}  // namespace

// ---------------------------------------------------------------- PmixServer

Result<std::unique_ptr<PmixServer>> PmixServer::start(const std::string& rendezvous_dir,
                                                      UpcallQueue* queue, ClientEvents* events) {
  if (g_active.load() != nullptr) return invalid_usage("a PMIx server is already running in this process");
  peer_guard_link();  // only this user's processes get past accept() (peer_guard.hpp)
  // On one host the library would complete fences without the host; route
  // them through fence_nb so several hosts only add the exchange.  The
  // library reads its MCA parameters from the environment at init, before
  // any thread of ours exists.
  setenv("PMIX_MCA_pmix_server_fence_localonly_opt", "0", 1);
  // The job's data in the library's hash store, not its shared-memory one
  // (ds21): with 256 hosts the shared-memory store fails to take every
  // host's fence data (dstore_base.c, 'PMIX ERROR') and the fence never
  // completes; each agent serves few local clients, so the hash store costs
  // little.  A user's PMIX_MCA_gds still wins.
  setenv("PMIX_MCA_gds", "hash", 0);
  std::unique_ptr<PmixServer> server(new PmixServer(queue, events));
  static pmix_server_module_t module = make_module();  // the library keeps the pointer
  // Our own topology of this host, without I/O devices: left to itself the
  // library discovers PCI and GPU devices (about 60 ms here).  An XML file
  // named by HWLOC_XMLFILE describes some other machine: it is for planning
  // only and must not reach PMIx or the ranks' binding (docs/design.md §4).
  unsetenv("HWLOC_XMLFILE");
  auto t0 = std::chrono::steady_clock::now();
  hwloc_topology_t topo = nullptr;
  if (hwloc_topology_init(&topo) == 0) {
    hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_NONE);
    detect::leave_out_cpuid_discovery(topo);
    if (hwloc_topology_load(topo) != 0) {
      hwloc_topology_destroy(topo);
      topo = nullptr;
    }
  }
  auto t_topo = std::chrono::steady_clock::now();
  server->topology_ = topo;
  server->pmix_topology_.source = const_cast<char*>("hwloc");
  server->pmix_topology_.topology = topo;
  pmix_info_t info[4];
  PMIX_INFO_LOAD(&info[0], PMIX_SERVER_TMPDIR, rendezvous_dir.c_str(), PMIX_STRING);
  PMIX_INFO_LOAD(&info[1], PMIX_SYSTEM_TMPDIR, rendezvous_dir.c_str(), PMIX_STRING);
  bool share = true;
  PMIX_INFO_LOAD(&info[2], PMIX_SERVER_SHARE_TOPOLOGY, &share, PMIX_BOOL);
  // Built by hand and never destructed: destructing a loaded PMIX_TOPO
  // entry frees the topology the library keeps using (use after free).
  size_t ninfo = 3;
  if (topo != nullptr) {
    PMIX_INFO_CONSTRUCT(&info[3]);
    PMIX_LOAD_KEY(info[3].key, PMIX_TOPOLOGY2);
    info[3].value.type = PMIX_TOPO;
    info[3].value.data.topo = &server->pmix_topology_;
    ninfo = 4;
  }
  g_active.store(server.get());
  pmix_status_t rc = PMIx_server_init(&module, info, ninfo);
  for (size_t i = 0; i < 3; ++i) PMIX_INFO_DESTRUCT(&info[i]);
  if (rc != PMIX_SUCCESS) {
    g_active.store(nullptr);
    return pmix_error("PMIx_server_init", rc);
  }
  server->initialized_ = true;
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  log(LogLevel::kDebug, "PMIx server: topology %.1f ms, PMIx_server_init %.1f ms", ms(t0, t_topo),
      ms(t_topo, std::chrono::steady_clock::now()));
  return server;
}

PmixServer::~PmixServer() {
  if (!initialized_) {
    if (topology_ != nullptr) hwloc_topology_destroy(static_cast<hwloc_topology_t>(topology_));
    return;
  }
  // The library's teardown runs on a thread of its own, and this waits for
  // it a bounded time.  A client that ends half-way through connecting (a
  // rank killed while the job ends) can leave the library's record of that
  // rank released one time too many (OpenPMIx 4.2's connection handler,
  // when its last send to the client fails): the teardown then waits for
  // ever on the lock inside the freed record.  Nothing needs the teardown to
  // finish: this host's ranks have ended, the caller removes the rendezvous
  // directory, and the process exits next.  It takes milliseconds
  // otherwise.
  auto t = std::make_shared<OpSync>();
  std::vector<std::string> nspaces;
  for (const Spawned& sp : spawned_) nspaces.push_back(sp.nspace);
  if (!nspace_.empty()) nspaces.push_back(nspace_);
  void* topology = topology_;
  std::thread([t, nspaces = std::move(nspaces), topology] {
    auto t0 = std::chrono::steady_clock::now();
    for (const std::string& ns : nspaces) {
      OpSync sync;
      PMIx_server_deregister_nspace(ns.c_str(), OpSync::callback, &sync);
      sync.wait();
    }
    auto t1 = std::chrono::steady_clock::now();
    g_active.store(nullptr);
    PMIx_server_finalize();
    std::lock_guard<std::mutex> lock(t->mu);
    if (t->abandoned) return;  // late: touch nothing the exit may be tearing down
    auto ms = [](auto a, auto b) {
      return std::chrono::duration<double, std::milli>(b - a).count();
    };
    log(LogLevel::kDebug, "PMIx server: deregister %.1f ms, finalize %.1f ms", ms(t0, t1),
        ms(t1, std::chrono::steady_clock::now()));
    if (topology != nullptr) hwloc_topology_destroy(static_cast<hwloc_topology_t>(topology));
    t->done = true;
    t->cv.notify_all();
  }).detach();
  if (!t->wait_for(kTeardownBound)) {
    // Upcalls from here on find no server (the progress thread, if it
    // still runs, answers them itself).
    g_active.store(nullptr);
    log(LogLevel::kInfo,
        "this host's PMIx server did not shut down within %lld s (a rank ended while it "
        "connected); going on without it",
        static_cast<long long>(kTeardownBound.count()));
  }
  // Whatever the progress thread queued before it stopped refers to this
  // server; its clients are gone, so it is dropped unrun.
  queue_->clear();
}

int PmixServer::id_of(const pmix_proc_t& proc) const {
  if (PMIX_CHECK_NSPACE(proc.nspace, nspace_.c_str())) return static_cast<int>(proc.rank);
  for (const Spawned& sp : spawned_)
    if (PMIX_CHECK_NSPACE(proc.nspace, sp.nspace.c_str()) && proc.rank < static_cast<pmix_rank_t>(sp.size))
      return sp.base + static_cast<int>(proc.rank);
  return -1;
}

bool PmixServer::proc_of(int id, pmix_proc_t* out) const {
  if (!is_spawned_id(id)) {
    if (id < 0) return false;
    PMIX_LOAD_PROCID(out, nspace_.c_str(), static_cast<pmix_rank_t>(id));
    return true;
  }
  for (const Spawned& sp : spawned_) {
    if (id >= sp.base && id < sp.base + sp.size) {
      PMIX_LOAD_PROCID(out, sp.nspace.c_str(), static_cast<pmix_rank_t>(id - sp.base));
      return true;
    }
  }
  return false;
}

std::vector<std::string> PmixServer::namespaces() const {
  std::vector<std::string> out{nspace_};
  for (const Spawned& sp : spawned_) out.push_back(sp.nspace);
  return out;
}

int PmixServer::nspace_size(const std::string& nspace) const {
  if (nspace == nspace_) return size_;
  for (const Spawned& sp : spawned_)
    if (nspace == sp.nspace) return sp.size;
  return -1;
}

std::vector<int> PmixServer::ids_of(const std::vector<pmix_proc_t>& procs) const {
  std::vector<int> ids;
  for (const pmix_proc_t& p : procs) {
    if (p.rank == PMIX_RANK_WILDCARD) {
      int base = -1, size = 0;
      if (PMIX_CHECK_NSPACE(p.nspace, nspace_.c_str())) {
        base = 0;
        size = size_;
      }
      for (const Spawned& sp : spawned_)
        if (PMIX_CHECK_NSPACE(p.nspace, sp.nspace.c_str())) {
          base = sp.base;
          size = sp.size;
        }
      for (int i = 0; base >= 0 && i < size; ++i) ids.push_back(base + i);
      continue;
    }
    if (int id = id_of(p); id >= 0) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::string PmixServer::signature_of(const std::vector<pmix_proc_t>& procs) const {
  // Within the job's own namespace: "*" for all of it, else its ranks.
  bool own_only = true;
  for (const pmix_proc_t& p : procs) own_only &= PMIX_CHECK_NSPACE(p.nspace, nspace_.c_str());
  if (own_only)
    for (const pmix_proc_t& p : procs)
      if (p.rank == PMIX_RANK_WILDCARD) return "*";
  std::vector<int> ids = ids_of(procs);
  if (ids.empty()) return "*";
  std::string out;
  for (int id : ids) out += (out.empty() ? "" : ",") + std::to_string(id);
  return out;
}

Status PmixServer::register_job(const PmixJob& job) {
  nspace_ = job.nspace;
  size_ = job.size;
  Status s = register_nspace(job, job.ranks_by_node[job.node]);
  if (!s) nspace_.clear();
  return s;
}

Status PmixServer::register_spawned(const PmixJob& job, int base) {
  if (job.size <= 0 || !is_spawned_id(base) || base > INT32_MAX - job.size)
    return invalid_usage("bad ids for spawned processes");
  // Known before the clients are, so that their first upcalls find it.
  spawned_.push_back(Spawned{job.nspace, base, job.size});
  std::vector<int> none;
  const std::vector<int>& mine = job.node >= 0 ? job.ranks_by_node[static_cast<size_t>(job.node)] : none;
  if (Status s = register_nspace(job, mine); !s) {
    spawned_.pop_back();
    return s;
  }
  return Status::ok();
}

Status PmixServer::register_nspace(const PmixJob& job, const std::vector<int>& mine) {
  InfoList list;
  list.add_string(PMIX_JOBID, job.jobid);
  list.add_u32(PMIX_UNIV_SIZE, static_cast<uint32_t>(std::max(job.universe, job.size)));
  list.add_u32(PMIX_JOB_SIZE, job.size);
  list.add_u32(PMIX_MAX_PROCS, job.size);
  list.add_u32(PMIX_NUM_NODES, static_cast<uint32_t>(job.hostnames.size()));
  // Maps: node names in node-id order; one explicit comma list of ranks per
  // node (a range makes the library publish a local size of 1).
  char* regex = nullptr;
  pmix_status_t rc = PMIx_generate_regex(join(job.hostnames, ",").c_str(), &regex);
  if (rc != PMIX_SUCCESS || regex == nullptr) return pmix_error("PMIx_generate_regex", rc);
  list.add(PMIX_NODE_MAP, regex, PMIX_REGEX);
  free(regex);
  std::vector<std::string> per_node;
  for (const auto& ranks : job.ranks_by_node) per_node.push_back(rank_list(ranks));
  char* ppn = nullptr;
  rc = PMIx_generate_ppn(join(per_node, ";").c_str(), &ppn);
  if (rc != PMIX_SUCCESS || ppn == nullptr) return pmix_error("PMIx_generate_ppn", rc);
  list.add(PMIX_PROC_MAP, ppn, PMIX_REGEX);
  free(ppn);
  list.add_string(PMIX_TMPDIR, job.tmpdir);
  list.add_string(PMIX_NSDIR, job.nsdir);
  list.add_bool(PMIX_TDIR_RMCLEAN, true);
  list.add_string(PMIX_MAPBY, "slot");
  list.add_string(PMIX_RANKBY, "slot");
  list.add_string(PMIX_BINDTO, job.bind_to);
  // Its applications (one, but for MPI_Comm_spawn_multiple): each one's
  // number, size and leader, and each rank's number and rank in it.
  std::vector<int> app_of = job.app_of;
  if (app_of.size() != static_cast<size_t>(job.size)) app_of.assign(static_cast<size_t>(job.size), 0);
  int napps = app_of.empty() ? 1 : *std::max_element(app_of.begin(), app_of.end()) + 1;
  std::vector<int> app_size(static_cast<size_t>(napps), 0), app_leader(static_cast<size_t>(napps), -1);
  std::vector<int> app_rank(static_cast<size_t>(job.size), 0);
  for (int r = 0; r < job.size; ++r) {
    size_t a = static_cast<size_t>(app_of[static_cast<size_t>(r)]);
    if (app_leader[a] < 0) app_leader[a] = r;
    app_rank[static_cast<size_t>(r)] = app_size[a]++;
  }
  if (napps == 1) {
    list.add_u32(PMIX_APPNUM, 0);
    list.add_u32(PMIX_APP_SIZE, job.size);
    list.add_rank(PMIX_APPLDR, 0);
  } else {
    for (int a = 0; a < napps; ++a) {
      InfoList app;
      app.add_u32(PMIX_APPNUM, static_cast<uint32_t>(a));  // must come first
      app.add_u32(PMIX_APP_SIZE, static_cast<uint32_t>(app_size[static_cast<size_t>(a)]));
      app.add_rank(PMIX_APPLDR, static_cast<pmix_rank_t>(std::max(app_leader[static_cast<size_t>(a)], 0)));
      list.add_array(PMIX_APP_INFO_ARRAY, app);
    }
  }
  if (job.parent) {
    list.add(PMIX_PARENT_ID, &*job.parent, PMIX_PROC);
    list.add_bool(PMIX_SPAWNED, true);
  }

  std::vector<int> node_of(job.size, 0);
  for (size_t n = 0; n < job.ranks_by_node.size(); ++n) {
    for (int r : job.ranks_by_node[n]) node_of[r] = static_cast<int>(n);
    const auto& ranks = job.ranks_by_node[n];
    InfoList node;
    node.add_u32(PMIX_NODEID, static_cast<uint32_t>(n));
    node.add_string(PMIX_HOSTNAME, job.hostnames[n]);
    node.add_u32(PMIX_LOCAL_SIZE, static_cast<uint32_t>(ranks.size()));
    node.add_u32(PMIX_NODE_SIZE, static_cast<uint32_t>(ranks.size()));
    node.add_string(PMIX_LOCAL_PEERS, rank_list(ranks));
    if (!ranks.empty()) node.add_rank(PMIX_LOCALLDR, static_cast<pmix_rank_t>(ranks.front()));
    list.add_array(PMIX_NODE_INFO_ARRAY, node);
  }

  std::vector<uint16_t> local_rank(job.size, 0);
  for (const auto& ranks : job.ranks_by_node)
    for (size_t i = 0; i < ranks.size(); ++i) local_rank[ranks[i]] = static_cast<uint16_t>(i);
  for (int r = 0; r < job.size; ++r) {
    InfoList proc;
    proc.add_rank(PMIX_RANK, static_cast<pmix_rank_t>(r));  // must come first
    proc.add_u32(PMIX_APPNUM, static_cast<uint32_t>(app_of[static_cast<size_t>(r)]));
    proc.add_rank(PMIX_GLOBAL_RANK, static_cast<pmix_rank_t>(r));
    proc.add_rank(PMIX_APP_RANK, static_cast<pmix_rank_t>(app_rank[static_cast<size_t>(r)]));
    proc.add_u16(PMIX_LOCAL_RANK, local_rank[r]);
    proc.add_u16(PMIX_NODE_RANK, local_rank[r]);
    proc.add_u32(PMIX_NODEID, static_cast<uint32_t>(node_of[r]));
    proc.add_string(PMIX_HOSTNAME, job.hostnames[node_of[r]]);
    proc.add_u32(PMIX_REINCARNATION, 0);
    if (node_of[r] == job.node && r < static_cast<int>(job.cpus.size()) && !job.cpus[r].empty()) {
      pmix_cpuset_t cpuset;
      PMIX_CPUSET_CONSTRUCT(&cpuset);
      cpuset.source = const_cast<char*>("hwloc");
      hwloc_bitmap_t bitmap = hwloc_bitmap_alloc();
      if (bitmap != nullptr && hwloc_bitmap_list_sscanf(bitmap, job.cpus[r].c_str()) == 0) {
        cpuset.bitmap = bitmap;
        char* loc = nullptr;
        if (PMIx_server_generate_locality_string(&cpuset, &loc) == PMIX_SUCCESS && loc) {
          proc.add_string(PMIX_LOCALITY_STRING, loc);
          free(loc);
        }
        char* str = nullptr;
        if (PMIx_server_generate_cpuset_string(&cpuset, &str) == PMIX_SUCCESS && str) {
          proc.add_string(PMIX_CPUSET, str);
          free(str);
        }
      }
      if (bitmap != nullptr) hwloc_bitmap_free(bitmap);
    }
    list.add_array(PMIX_PROC_DATA, proc);
  }

  pmix_data_array_t arr;
  if (!list.convert(&arr)) return Status(Code::kSystem, "building the PMIx job description failed");
  OpSync sync;
  int nlocal = static_cast<int>(mine.size());
  rc = PMIx_server_register_nspace(job.nspace.c_str(), nlocal, static_cast<pmix_info_t*>(arr.array),
                                   arr.size, OpSync::callback, &sync);
  if (rc == PMIX_SUCCESS) rc = sync.wait();
  PMIX_DATA_ARRAY_DESTRUCT(&arr);
  if (rc != PMIX_SUCCESS && rc != PMIX_OPERATION_SUCCEEDED) return pmix_error("PMIx_server_register_nspace", rc);
  // All clients at once, one wait: a round trip to the library's thread per
  // client would cost ~0.3 ms each.
  struct Counter {
    std::mutex mu;
    std::condition_variable cv;
    size_t left = 0;
    pmix_status_t first_error = PMIX_SUCCESS;
    static void callback(pmix_status_t status, void* cbdata) {
      auto* c = static_cast<Counter*>(cbdata);
      std::lock_guard<std::mutex> lock(c->mu);
      if (status != PMIX_SUCCESS && status != PMIX_OPERATION_SUCCEEDED && c->first_error == PMIX_SUCCESS)
        c->first_error = status;
      if (--c->left == 0) c->cv.notify_all();
    }
  } counter;
  counter.left = mine.size();
  for (int r : mine) {
    pmix_proc_t p;
    PMIX_LOAD_PROCID(&p, job.nspace.c_str(), static_cast<pmix_rank_t>(r));
    rc = PMIx_server_register_client(&p, getuid(), getgid(), nullptr, Counter::callback, &counter);
    if (rc != PMIX_SUCCESS) Counter::callback(rc, &counter);  // the callback will not run
  }
  {
    std::unique_lock<std::mutex> lock(counter.mu);
    counter.cv.wait(lock, [&] { return counter.left == 0; });
  }
  if (counter.first_error != PMIX_SUCCESS) return pmix_error("PMIx_server_register_client", counter.first_error);
  return Status::ok();
}

Result<Env> PmixServer::client_env(int rank) {
  pmix_proc_t p;
  if (!proc_of(rank, &p)) return invalid_usage("no PMIx process has id " + std::to_string(rank));
  char** env = nullptr;
  pmix_status_t rc = PMIx_server_setup_fork(&p, &env);
  Env out;
  for (size_t i = 0; env != nullptr && env[i] != nullptr; ++i) {
    const char* eq = std::strchr(env[i], '=');
    if (eq != nullptr) out[std::string(env[i], static_cast<size_t>(eq - env[i]))] = eq + 1;
    free(env[i]);
  }
  free(env);
  if (rc != PMIX_SUCCESS) return pmix_error("PMIx_server_setup_fork(rank " + std::to_string(rank) + ")", rc);
  return out;
}

namespace {
struct NotifyCtx {
  pmix_info_t* info = nullptr;
  size_t ninfo = 0;
  UpcallQueue* queue = nullptr;
  std::function<void()> done;
};
void notify_done(pmix_status_t, void* cbdata) {
  auto* ctx = static_cast<NotifyCtx*>(cbdata);
  PMIX_INFO_FREE(ctx->info, ctx->ninfo);
  ctx->queue->push(std::move(ctx->done));
  delete ctx;
}
}  // namespace

void PmixServer::notify_failure(int rank, int exit_code, const std::string& kind,
                                const std::string& host, const std::string& text,
                                std::function<void()> done) {
  auto* ctx = new NotifyCtx;
  ctx->ninfo = 5;
  ctx->queue = queue_;
  ctx->done = std::move(done);
  PMIX_INFO_CREATE(ctx->info, ctx->ninfo);
  pmix_proc_t failed;
  if (!proc_of(rank, &failed)) PMIX_LOAD_PROCID(&failed, nspace_.c_str(), static_cast<pmix_rank_t>(rank));
  PMIX_INFO_LOAD(&ctx->info[0], PMIX_EVENT_AFFECTED_PROC, &failed, PMIX_PROC);
  PMIX_INFO_LOAD(&ctx->info[1], PMIX_EXIT_CODE, &exit_code, PMIX_INT);
  PMIX_INFO_LOAD(&ctx->info[2], PMIX_HOSTNAME, host.c_str(), PMIX_STRING);
  PMIX_INFO_LOAD(&ctx->info[3], "accrun.failure.kind", kind.c_str(), PMIX_STRING);
  PMIX_INFO_LOAD(&ctx->info[4], PMIX_EVENT_TEXT_MESSAGE, text.c_str(), PMIX_STRING);
  // The source is the failed process, so that PMIX_RANGE_NAMESPACE means
  // the job's namespace.
  pmix_status_t rc = PMIx_Notify_event(PMIX_PROC_TERMINATED, &failed, PMIX_RANGE_NAMESPACE,
                                       ctx->info, ctx->ninfo, notify_done, ctx);
  if (rc != PMIX_SUCCESS) {
    // Completed at once (or failed): the callback will not run.
    if (rc != PMIX_OPERATION_SUCCEEDED)
      log(LogLevel::kDebug, "PMIx_Notify_event: %s", PMIx_Error_string(rc));
    notify_done(rc, ctx);
  }
}

// ---------------------------------------------------------- name directory

Result<std::string> PmixServer::pack_value(const pmix_value_t& value) {
  pmix_data_buffer_t buf;
  PMIX_DATA_BUFFER_CONSTRUCT(&buf);
  pmix_status_t rc = PMIx_Data_pack(nullptr, &buf, const_cast<pmix_value_t*>(&value), 1, PMIX_VALUE);
  if (rc != PMIX_SUCCESS) {
    PMIX_DATA_BUFFER_DESTRUCT(&buf);
    return pmix_error("PMIx_Data_pack", rc);
  }
  std::string out(buf.base_ptr, buf.bytes_used);
  PMIX_DATA_BUFFER_DESTRUCT(&buf);
  return out;
}

namespace {

// Unpacks what pack_value wrote into `out` (which the caller destructs).
bool unpack_value(const std::string& packed, pmix_value_t* out) {
  pmix_data_buffer_t buf;
  PMIX_DATA_BUFFER_CONSTRUCT(&buf);
  PMIX_DATA_BUFFER_LOAD(&buf, const_cast<char*>(packed.data()), packed.size());
  int32_t n = 1;
  pmix_value_t* v = nullptr;
  PMIX_VALUE_CREATE(v, 1);
  pmix_status_t rc = PMIx_Data_unpack(nullptr, &buf, v, &n, PMIX_VALUE);
  // The buffer borrowed `packed`: detach before destructing.
  buf.base_ptr = nullptr;
  buf.bytes_allocated = buf.bytes_used = 0;
  PMIX_DATA_BUFFER_DESTRUCT(&buf);
  if (rc != PMIX_SUCCESS) {
    PMIX_VALUE_RELEASE(v);
    return false;
  }
  PMIx_Value_xfer(out, v);
  PMIX_VALUE_RELEASE(v);
  return true;
}

}  // namespace

void PmixServer::do_publish(int rank, std::vector<std::pair<std::string, std::shared_ptr<pmix_value_t>>> values,
                            std::function<void(int)> reply) {
  if (rank < 0) {
    reply(PMIX_ERR_NOT_FOUND);
    return;
  }
  if (directory_router_ != nullptr) {
    std::vector<std::pair<std::string, std::string>> packed;
    for (const auto& [key, v] : values) {
      auto p = pack_value(*v);
      if (!p) {
        reply(PMIX_ERR_BAD_PARAM);
        return;
      }
      packed.emplace_back(key, std::move(*p));
    }
    directory_router_->publish(rank, std::move(packed), std::move(reply));
    return;
  }
  reply(PMIX_ERR_NOT_SUPPORTED);
}

void PmixServer::do_lookup(std::shared_ptr<PendingLookup> lookup) {
  if (directory_router_ != nullptr) {
    // 0 means no deadline on the wire: a deadline that passed while the
    // request sat in the queue is sent as a millisecond, not as none.
    double timeout_s = 0;
    if (lookup->deadline)
      timeout_s = std::max(
          1e-3, std::chrono::duration<double>(*lookup->deadline - std::chrono::steady_clock::now()).count());
    directory_router_->lookup(
        id_of(lookup->proc), lookup->keys, lookup->wait, lookup->wait_count, timeout_s,
        [this, lookup](int status, std::vector<Found> found) {
          pmix_pdata_t* pd = nullptr;
          size_t n = 0;
          if (!found.empty()) PMIX_PDATA_CREATE(pd, found.size());
          for (const auto& f : found) {
            if (!proc_of(f.rank, &pd[n].proc))
              PMIX_LOAD_PROCID(&pd[n].proc, nspace_.c_str(), static_cast<pmix_rank_t>(f.rank));
            PMIX_LOAD_KEY(pd[n].key, f.key.c_str());
            if (unpack_value(f.packed, &pd[n].value)) ++n;
          }
          if (n == 0 && status == PMIX_SUCCESS) status = PMIX_ERR_NOT_FOUND;
          lookup->done = true;
          const size_t made = found.size();
          on_progress_thread([lookup, status, pd, n, made]() mutable {
            if (lookup->cbfunc) lookup->cbfunc(status, pd, n, lookup->cbdata);
            if (pd != nullptr) PMIX_PDATA_FREE(pd, made);
          });
        });
    return;
  }
  lookup->done = true;
  on_progress_thread([lookup] {
    if (lookup->cbfunc) lookup->cbfunc(PMIX_ERR_NOT_SUPPORTED, nullptr, 0, lookup->cbdata);
  });
}

void PmixServer::do_unpublish(int rank, std::vector<std::string> keys, std::function<void(int)> reply) {
  if (rank < 0) {
    reply(PMIX_ERR_NOT_FOUND);
    return;
  }
  if (directory_router_ != nullptr) {
    directory_router_->unpublish(rank, std::move(keys), std::move(reply));
    return;
  }
  reply(PMIX_ERR_NOT_SUPPORTED);
}

void PmixServer::local_modex(int rank, ModexDone done) {
  pmix_proc_t p;
  if (!proc_of(rank, &p)) return done(PMIX_ERR_NOT_FOUND, std::string());
  auto* req = new ModexRequest{this, std::move(done)};
  pmix_status_t rc = PMIx_server_dmodex_request(&p, local_modex_done, req);
  if (rc != PMIX_SUCCESS) {
    req->done(rc, std::string());
    delete req;
  }
}

}  // namespace accrun::launcher
