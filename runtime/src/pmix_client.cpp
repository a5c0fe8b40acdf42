#include "pmix_client.hpp"

#include <pmix.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "accrun/log.hpp"

namespace accrun::runtime {
namespace {

using Clock = std::chrono::steady_clock;

// PMIx's event callback carries no user pointer, so the one PeerTable of the
// process is reachable from here only.  Set at init, cleared at finalize.
std::atomic<PeerTable*> g_event_peers{nullptr};
// This process's namespace, for filtering events about other jobs.
char g_nspace[PMIX_MAX_NSLEN + 1];

std::optional<long> value_to_long(const pmix_value_t* v) {
  switch (v->type) {
    case PMIX_UINT8: return v->data.uint8;
    case PMIX_UINT16: return v->data.uint16;
    case PMIX_UINT32: return static_cast<long>(v->data.uint32);
    case PMIX_UINT64: return static_cast<long>(v->data.uint64);
    case PMIX_INT8: return v->data.int8;
    case PMIX_INT16: return v->data.int16;
    case PMIX_INT32: return v->data.int32;
    case PMIX_INT64: return static_cast<long>(v->data.int64);
    case PMIX_INT: return v->data.integer;
    case PMIX_UINT: return static_cast<long>(v->data.uint);
    case PMIX_SIZE: return static_cast<long>(v->data.size);
    default: return std::nullopt;
  }
}

std::optional<long> get_number(const pmix_proc_t& proc, const char* key) {
  pmix_value_t* val = nullptr;
  if (PMIx_Get(&proc, key, nullptr, 0, &val) != PMIX_SUCCESS || val == nullptr) return std::nullopt;
  auto n = value_to_long(val);
  PMIX_VALUE_RELEASE(val);
  return n;
}

std::optional<std::string> get_string(const pmix_proc_t& proc, const char* key) {
  pmix_value_t* val = nullptr;
  if (PMIx_Get(&proc, key, nullptr, 0, &val) != PMIX_SUCCESS || val == nullptr) return std::nullopt;
  std::optional<std::string> s;
  if (val->type == PMIX_STRING && val->data.string != nullptr) s = val->data.string;
  PMIX_VALUE_RELEASE(val);
  return s;
}

bool is_failure_code(pmix_status_t st) {
  switch (st) {
    case PMIX_ERR_PROC_ABORTED:
    case PMIX_ERR_PROC_ABORTING:
    case PMIX_PROC_TERMINATED:
    case PMIX_ERR_PROC_TERM_WO_SYNC:
    case PMIX_ERR_PROC_ABORTED_BY_SIG:
    case PMIX_ERR_PROC_KILLED_BY_CMD:
    case PMIX_ERR_PROC_REQUESTED_ABORT:
    case PMIX_ERR_PROC_FAILED_TO_START:
    case PMIX_ERR_PROC_SENSOR_BOUND_EXCEEDED:
      return true;
    default:
      return false;
  }
}

// Runs on PMIx's progress thread: it only records and returns.
void on_event(size_t, pmix_status_t status, const pmix_proc_t*, pmix_info_t info[], size_t ninfo,
              pmix_info_t*, size_t, pmix_event_notification_cbfunc_fn_t cbfunc, void* cbdata) {
  PeerTable* peers = g_event_peers.load();
  std::vector<int> ranks;
  std::optional<long> exit_code;
  std::string text, host, kind;
  for (size_t i = 0; i < ninfo; ++i) {
    const pmix_info_t& in = info[i];
    if (PMIX_CHECK_KEY(&in, PMIX_EVENT_AFFECTED_PROC) && in.value.type == PMIX_PROC &&
        in.value.data.proc != nullptr) {
      if (PMIX_CHECK_NSPACE(in.value.data.proc->nspace, g_nspace))
        ranks.push_back(static_cast<int>(in.value.data.proc->rank));
    } else if (PMIX_CHECK_KEY(&in, PMIX_EVENT_AFFECTED_PROCS) && in.value.type == PMIX_DATA_ARRAY &&
               in.value.data.darray != nullptr && in.value.data.darray->type == PMIX_PROC) {
      auto* procs = static_cast<pmix_proc_t*>(in.value.data.darray->array);
      for (size_t k = 0; k < in.value.data.darray->size; ++k)
        if (PMIX_CHECK_NSPACE(procs[k].nspace, g_nspace)) ranks.push_back(static_cast<int>(procs[k].rank));
    } else if (PMIX_CHECK_KEY(&in, PMIX_EXIT_CODE)) {
      exit_code = value_to_long(&in.value);
    } else if (PMIX_CHECK_KEY(&in, PMIX_EVENT_TEXT_MESSAGE) && in.value.type == PMIX_STRING &&
               in.value.data.string != nullptr) {
      text = in.value.data.string;
    } else if (PMIX_CHECK_KEY(&in, "accrun.failure.kind") && in.value.type == PMIX_STRING &&
               in.value.data.string != nullptr) {
      kind = in.value.data.string;
    } else if (PMIX_CHECK_KEY(&in, PMIX_HOSTNAME) && in.value.type == PMIX_STRING &&
               in.value.data.string != nullptr) {
      host = in.value.data.string;
    }
  }
  // Custom codes below PMIX_EXTERNAL_ERR_BASE are failure notices of some
  // other launcher; they too name the affected rank.
  if (peers != nullptr && !ranks.empty() && (is_failure_code(status) || status <= PMIX_EXTERNAL_ERR_BASE)) {
    std::string how;
    // accrun's daemon says which kind of failure it was (accrun(7), Failure events).
    if (kind == "exit" && exit_code)
      how = "exited with status " + std::to_string(*exit_code);
    else if (kind == "signal" && exit_code)
      how = "was killed by signal " + std::to_string(*exit_code - 128);
    else if (kind == "abort")
      how = "aborted" + (exit_code ? " with status " + std::to_string(*exit_code) : std::string());
    else if (kind == "lost")
      how = "was lost with its host (its agent stopped answering)";
    else if (kind == "no-finalize" || status == PMIX_ERR_PROC_TERM_WO_SYNC)
      how = "exited without finalizing";
    else if (kind == "no-init")
      how = "exited without initialising PMIx while other ranks did";
    else if (status == PMIX_PROC_TERMINATED)
      how = exit_code ? "exited with status " + std::to_string(*exit_code) : "terminated";
    else if (status == PMIX_ERR_PROC_ABORTED || status == PMIX_ERR_PROC_REQUESTED_ABORT ||
             status == PMIX_ERR_PROC_ABORTING)
      how = exit_code ? "aborted with status " + std::to_string(*exit_code) : "aborted";
    else if (status == PMIX_ERR_PROC_ABORTED_BY_SIG)
      how = "was killed by a signal";
    else
      how = std::string("failed (") + PMIx_Error_string(status) + ")" + (text.empty() ? "" : ": " + text);
    for (int r : ranks) peers->report_failure(r, how, host);
  }
  if (cbfunc != nullptr) cbfunc(PMIX_SUCCESS, nullptr, 0, nullptr, nullptr, cbdata);
}

class PmixDirectory final : public Directory {
 public:
  Status publish(const std::string& key, const std::string& value) override {
    ACCRUN_RETURN_IF_ERROR(check(key));
    pmix_info_t info;
    PMIX_INFO_LOAD(&info, key.c_str(), value.c_str(), PMIX_STRING);
    pmix_status_t rc = PMIx_Publish(&info, 1);
    PMIX_INFO_DESTRUCT(&info);
    if (rc == PMIX_SUCCESS) return Status::ok();
    if (rc == PMIX_ERR_DUPLICATE_KEY || rc == PMIX_EXISTS)
      return invalid_usage("key '" + key + "' exists");
    return Status(Code::kSystem, "PMIx_Publish(" + key + "): " + PMIx_Error_string(rc));
  }

  Result<std::string> lookup(const std::string& key, int timeout_ms) override {
    auto v = lookup_all({key}, timeout_ms);
    if (!v) {
      if (v.status().code() == Code::kTimeout)
        return timeout_error("key '" + key + "' not published within " + std::to_string(timeout_ms) + " ms");
      return v.status();
    }
    return std::move(v->front());
  }

  // The server holds the request (PMIX_WAIT) until the last key is
  // published or the slice ends, up to a second at a time, so a caller's
  // timeout is kept to the millisecond and nobody polls; keys already
  // there are answered at once.  A timeout of 0 asks once, without a wait.
  Result<std::vector<std::string>> lookup_all(const std::vector<std::string>& keys, int timeout_ms) override {
    for (const auto& k : keys) ACCRUN_RETURN_IF_ERROR(check(k));
    if (keys.empty()) return std::vector<std::string>{};
    const auto start = Clock::now();
    for (bool first = true;; first = false) {
      // (A wait goes to the server a second at a time: finalize ends it at
      // the next.)
      if (cancelled_.load(std::memory_order_acquire) && timeout_ms != 0)
        return waits_cancelled();
      const long elapsed =
          static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count());
      if (!first && timeout_ms >= 0 && elapsed >= timeout_ms) {
        return timeout_error(std::to_string(keys.size()) + " keys not all published within " +
                             std::to_string(timeout_ms) + " ms");
      }
      const long left = timeout_ms < 0 ? 1000 : std::min<long>(1000, timeout_ms - elapsed);
      std::vector<std::string> out;
      Status s = lookup_many(keys, timeout_ms == 0 ? 0 : static_cast<int>(std::max<long>(left, 1)), &out);
      if (s) return out;
      if (s.code() != Code::kNotFound || timeout_ms == 0) return s;
    }
  }

  void cancel_waits() override { cancelled_.store(true, std::memory_order_release); }

  Status unpublish(const std::string& key) override {
    ACCRUN_RETURN_IF_ERROR(check(key));
    char* keys[2] = {const_cast<char*>(key.c_str()), nullptr};
    pmix_status_t rc = PMIx_Unpublish(keys, nullptr, 0);
    if (rc == PMIX_SUCCESS) return Status::ok();
    if (rc == PMIX_ERR_NOT_FOUND) return not_found("key '" + key + "' is not published");
    return Status(Code::kSystem, "PMIx_Unpublish(" + key + "): " + PMIx_Error_string(rc));
  }

 private:
  std::atomic<bool> cancelled_{false};  // cancel_waits()

  static Status check(const std::string& key) {
    if (key.size() > PMIX_MAX_KEYLEN)
      return invalid_argument("name too long for the PMIx directory (" + std::to_string(key.size()) +
                              " > " + std::to_string(PMIX_MAX_KEYLEN) + " bytes with accrun's prefix)");
    return Status::ok();
  }

  // Every key in one request.  kNotFound when some are missing (out is
  // then left empty).  wait_ms > 0: the server holds the request up to
  // that many milliseconds for all of them.
  static Status lookup_many(const std::vector<std::string>& keys, int wait_ms, std::vector<std::string>* out) {
    const size_t n = keys.size();
    pmix_pdata_t* pd = nullptr;
    PMIX_PDATA_CREATE(pd, n);
    for (size_t i = 0; i < n; ++i) PMIX_LOAD_KEY(pd[i].key, keys[i].c_str());
    pmix_info_t info[2];
    size_t ninfo = 0;
    if (wait_ms > 0) {
      int all = 0, ms = wait_ms;
      PMIX_INFO_LOAD(&info[0], PMIX_WAIT, &all, PMIX_INT);
      // accrun's own key, not PMIX_TIMEOUT: given PMIX_TIMEOUT the client
      // library runs a timer of its own that races the server's answer
      // at the same instant; the server alone should end the wait.
      PMIX_INFO_LOAD(&info[1], "accrun.wait.ms", &ms, PMIX_INT);
      ninfo = 2;
    }
    pmix_status_t rc = PMIx_Lookup(pd, n, ninfo ? info : nullptr, ninfo);
    for (size_t i = 0; i < ninfo; ++i) PMIX_INFO_DESTRUCT(&info[i]);
    const std::string what = n == 1 ? "key '" + keys[0] + "'" : std::to_string(n) + " keys";
    Status st = not_found(n == 1 ? what + " is not published" : what + " not all published");
    if (rc == PMIX_SUCCESS) {
      out->clear();
      for (size_t i = 0; i < n; ++i) {
        if (pd[i].value.type != PMIX_STRING || pd[i].value.data.string == nullptr) { out->clear(); break; }
        out->emplace_back(pd[i].value.data.string);
      }
      if (out->size() == n) st = Status::ok();
    } else if (rc != PMIX_ERR_NOT_FOUND && rc != PMIX_ERR_TIMEOUT) {
      st = Status(Code::kSystem, "PMIx_Lookup(" + (n == 1 ? keys[0] : what) + "): " + PMIx_Error_string(rc));
    }
    PMIX_PDATA_FREE(pd, n);
    return st;
  }
};

}  // namespace

Result<std::unique_ptr<PmixClient>> PmixClient::init(PeerTable* peers) {
  pmix_proc_t me;
  PMIX_PROC_CONSTRUCT(&me);
  pmix_status_t rc = PMIx_Init(&me, nullptr, 0);
  if (rc != PMIX_SUCCESS)
    return Status(Code::kSystem, std::string("PMIx_Init: ") + PMIx_Error_string(rc) +
                                     " (PMIX_NAMESPACE is set but the launcher's PMIx server is unreachable)");
  std::unique_ptr<PmixClient> c(new PmixClient());
  std::memcpy(g_nspace, me.nspace, sizeof g_nspace);
  pmix_proc_t job;
  PMIX_LOAD_PROCID(&job, me.nspace, PMIX_RANK_WILDCARD);
  c->facts_.rank = static_cast<int>(me.rank);
  c->facts_.size = static_cast<int>(get_number(job, PMIX_JOB_SIZE).value_or(-1));
  c->facts_.local_rank = static_cast<int>(get_number(me, PMIX_LOCAL_RANK).value_or(-1));
  c->facts_.local_size = static_cast<int>(get_number(job, PMIX_LOCAL_SIZE).value_or(-1));
  c->facts_.node_id = static_cast<int>(get_number(me, PMIX_NODEID).value_or(-1));
  c->facts_.host = get_string(me, PMIX_HOSTNAME).value_or("");
  c->directory_ = std::make_unique<PmixDirectory>();

  g_event_peers.store(peers);
  pmix_info_t hinfo;
  PMIX_INFO_LOAD(&hinfo, PMIX_EVENT_HDLR_NAME, "libaccrun-peer-failures", PMIX_STRING);
  // The failure codes by name: the PMIx server forwards a client only the
  // events it registered codes for.
  pmix_status_t codes[] = {PMIX_ERR_PROC_ABORTED,      PMIX_ERR_PROC_ABORTING,          PMIX_PROC_TERMINATED,
                           PMIX_ERR_PROC_TERM_WO_SYNC, PMIX_ERR_PROC_ABORTED_BY_SIG,    PMIX_ERR_PROC_KILLED_BY_CMD,
                           PMIX_ERR_PROC_REQUESTED_ABORT, PMIX_ERR_PROC_FAILED_TO_START,
                           PMIX_ERR_PROC_SENSOR_BOUND_EXCEEDED};
  rc = PMIx_Register_event_handler(codes, sizeof codes / sizeof codes[0], &hinfo, 1, on_event, nullptr, nullptr);
  PMIX_INFO_DESTRUCT(&hinfo);
  if (rc < 0) {
    log(LogLevel::kWarn, "cannot register for PMIx failure events (%s); dead peers are found by pid only",
        PMIx_Error_string(rc));
  }
  return c;
}

PmixClient::~PmixClient() {
  // The failure handler goes with PMIx_Finalize; from here on it finds no
  // peer table.  (Deregistering it first sent the server a message it does
  // not answer, so the finalize request behind it waited for the loopback
  // connection's delayed acknowledgement: 40 ms per rank.)
  g_event_peers.store(nullptr);
  directory_.reset();
  PMIx_Finalize(nullptr, 0);
}

}  // namespace accrun::runtime
