// The MPI backend under real Open MPI, driven directly through backend.hpp:
// groups built from MPI_COMM_WORLD with a directory-backed Rendezvous.  Run
// under a launcher at any size (ctest runs 2, 3, 4 and 8 ranks):
//   mpi_suite [--thread-level multiple|serialized] | --probe
// Prints one line per failure and "mpi_suite: PASS ..." on rank 0; exits 1
// when any rank failed a check.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "accrun/backend.hpp"
#include "exact_suite.hpp"
#include "file_rendezvous.hpp"

namespace ac = accrun::collectives;
using accrun::Code;
using accrun::testing::ExactSuite;
using accrun::testing::FileRendezvous;

namespace {

struct Job {
  int rank = 0;
  int size = 1;
  std::string host;
  std::string dir;
  int checks = 0;
  std::vector<std::string> failures;

  void check(bool cond, const std::string& what) {
    ++checks;
    if (!cond) failures.push_back("rank " + std::to_string(rank) + ": " + what);
  }
  void absorb(const ExactSuite& s) {
    checks += s.checks();
    failures.insert(failures.end(), s.failures().begin(), s.failures().end());
  }
};

// A group over the given job ranks (group rank g = ranks[g]); null when this
// rank is not a member.
struct Group {
  std::unique_ptr<FileRendezvous> rdv;
  ac::GroupContext ctx;
  std::unique_ptr<ac::Backend> backend;
  accrun::Status status;
};

Group make_group(const Job& job, const std::string& name, std::uint64_t epoch, const std::vector<int>& ranks,
                 int timeout_ms = 60000) {
  Group g;
  int me = -1;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] == job.rank) me = static_cast<int>(i);
  }
  if (me < 0) return g;
  g.rdv = std::make_unique<FileRendezvous>(job.dir, name, epoch);
  g.ctx.name = name;
  g.ctx.epoch = epoch;
  g.ctx.rank = me;
  g.ctx.size = static_cast<int>(ranks.size());
  for (int r : ranks) {
    ac::Member m;
    m.job_rank = r;
    m.host = job.host;
    g.ctx.members.push_back(m);
  }
  g.ctx.oversubscribed = true;
  g.ctx.timeout_ms = timeout_ms;
  g.ctx.rendezvous = g.rdv.get();
  auto b = ac::make_mpi_backend(g.ctx);
  if (b.is_ok()) {
    g.backend = std::move(b).value();
    g.backend->set_timeout(-1);  // the fast, blocking path for the suite
  } else {
    g.status = b.status();
  }
  return g;
}

std::vector<int> iota_ranks(int n) {
  std::vector<int> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i;
  return v;
}

void world_suite(Job& job) {
  Group world = make_group(job, "world", 1, iota_ranks(job.size));
  job.check(world.backend != nullptr, "create group 'world': " + world.status.message());
  if (!world.backend) return;
  job.check(world.backend->kind() == ac::BackendKind::kMpi, "kind() is kMpi");
  ExactSuite suite(*world.backend, job.rank, job.size, "world(blocking)");
  suite.run_all({1, 1031, 40000});
  job.absorb(suite);

  // The same suite on the non-blocking path (a timeout set).
  world.backend->set_timeout(60000);
  ExactSuite timed(*world.backend, job.rank, job.size, "world(timeout set)");
  timed.run_all({1, 1031});
  job.absorb(timed);
  world.backend->set_timeout(-1);

  // A second group alive at the same time, its members in reverse order:
  // group rank g is job rank size-1-g, so results prove group-rank order.
  std::vector<int> rev = iota_ranks(job.size);
  std::reverse(rev.begin(), rev.end());
  Group reversed = make_group(job, "reversed", 7, rev);
  job.check(reversed.backend != nullptr, "create group 'reversed': " + reversed.status.message());
  if (reversed.backend) {
    const int grank = job.size - 1 - job.rank;
    ExactSuite s(*reversed.backend, grank, job.size, "reversed");
    s.run_all({3});
    job.absorb(s);
    // Interleave the two groups.
    ExactSuite w(*world.backend, job.rank, job.size, "world(interleaved)");
    w.allreduce(5, ac::DType::kFloat32, ac::Op::kSum, false);
    s.allreduce(5, ac::DType::kFloat16, ac::Op::kMax, true);
    w.broadcast(9, ac::DType::kBFloat16, job.size - 1);
    job.absorb(w);
  }

  // A group of the even job ranks only; odd ranks do nothing.
  std::vector<int> evens;
  for (int r = 0; r < job.size; r += 2) evens.push_back(r);
  Group even = make_group(job, "evens", 3, evens);
  if (job.rank % 2 == 0) {
    job.check(even.backend != nullptr, "create group 'evens': " + even.status.message());
    if (even.backend) {
      ExactSuite s(*even.backend, job.rank / 2, static_cast<int>(evens.size()), "evens");
      s.allreduce(100, ac::DType::kInt32, ac::Op::kSum, false);
      s.allgather(10, ac::DType::kUInt8, true);
      job.absorb(s);
    }
  } else {
    job.check(even.backend == nullptr && even.status.is_ok(), "non-member of 'evens' did nothing");
  }

  // Wrong use fails clearly, before anything is posted.
  float x = 0;
  int dummy_stream = 0;
  accrun::Status st = world.backend->allreduce(&x, &x, 1, ac::DType::kFloat32, ac::Op::kSum, &dummy_stream);
  job.check(st.code() == Code::kInvalidArgument && st.message().find("NCCL") != std::string::npos,
            "a stream on an MPI group is refused naming NCCL: " + st.message());
  st = world.backend->broadcast(&x, 1, ac::DType::kFloat32, job.size, nullptr);
  job.check(st.code() == Code::kInvalidArgument && st.message().find("root") != std::string::npos,
            "an out-of-range root is refused: " + st.message());
  st = world.backend->group_end();
  job.check(st.code() == Code::kInvalidUsage, "group_end without group_start is refused: " + st.message());

  // A receive nobody answers times out, is cancelled, and the group stays usable.
  if (job.size >= 2) {
    world.backend->set_timeout(300);
    if (job.rank == 0) {
      st = world.backend->recv(&x, 1, ac::DType::kFloat32, 1, nullptr);
      job.check(st.code() == Code::kTimeout, "an unanswered recv times out: " + std::string(accrun::code_name(st.code())) +
                                                 " " + st.message());
    }
    world.backend->set_timeout(-1);
    st = world.backend->barrier();
    job.check(st.is_ok(), "the group works after a cancelled recv: " + st.message());
  }
}

// Ranks 0 and 1 each send 4 MiB to the other, then receive: a send never
// waits for its matching receive, so this completes (with a timeout set,
// and on the blocking path), and the bytes are exact.
void send_first(Job& job) {
  if (job.size < 2) return;
  Group g = make_group(job, "sendfirst", 1, iota_ranks(job.size));
  job.check(g.backend != nullptr, "create group 'sendfirst': " + g.status.message());
  if (!g.backend || job.rank > 1) return;
  const std::size_t n = (4u << 20) / sizeof(std::int32_t);
  const int peer = 1 - job.rank;
  for (int timeout : {20000, -1}) {
    g.backend->set_timeout(timeout);
    std::vector<std::int32_t> out(n), in(n, -1);
    for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::int32_t>(i * 5 + job.rank);
    accrun::Status st = g.backend->send(out.data(), n, ac::DType::kInt32, peer, nullptr);
    job.check(st.is_ok(), "send 4 MiB before the peer receives (timeout " + std::to_string(timeout) + "): " + st.message());
    std::fill(out.begin(), out.end(), 0);  // the send's buffer is free once it returns
    st = g.backend->recv(in.data(), n, ac::DType::kInt32, peer, nullptr);
    job.check(st.is_ok(), "then receive 4 MiB (timeout " + std::to_string(timeout) + "): " + st.message());
    bool exact = true;
    for (std::size_t i = 0; i < n && exact; ++i) exact = in[i] == static_cast<std::int32_t>(i * 5 + peer);
    job.check(exact, "the 4 MiB received are exact (timeout " + std::to_string(timeout) + ")");
  }
}

// A receive into a buffer smaller than the message: INVALID_ARGUMENT
// saying so (not MPI's bare error), on the path with a timeout and the
// blocking one, and the group goes on.
void short_receive(Job& job) {
  if (job.size < 2) return;
  Group g = make_group(job, "short", 1, iota_ranks(job.size));
  job.check(g.backend != nullptr, "create group 'short': " + g.status.message());
  if (!g.backend || job.rank > 1) return;
  for (int timeout : {20000, -1}) {
    g.backend->set_timeout(timeout);
    const std::string when = " (timeout " + std::to_string(timeout) + ")";
    std::vector<std::int32_t> big(100, 7), small(10, 0);
    if (job.rank == 0) {
      accrun::Status st = g.backend->send(big.data(), big.size(), ac::DType::kInt32, 1, nullptr);
      job.check(st.is_ok(), "send 100 ints" + when + ": " + st.message());
      st = g.backend->send(small.data(), small.size(), ac::DType::kInt32, 1, nullptr);
      job.check(st.is_ok(), "then 10 ints" + when + ": " + st.message());
    } else {
      accrun::Status st = g.backend->recv(small.data(), small.size(), ac::DType::kInt32, 0, nullptr);
      job.check(st.code() == Code::kInvalidArgument &&
                    st.message().find("larger than the 40 bytes the receive buffer holds") != std::string::npos &&
                    st.message().find("group rank 0") != std::string::npos,
                "100 ints into a receive of 10 is an argument error naming the sender" + when + ": " + st.message());
      st = g.backend->recv(small.data(), small.size(), ac::DType::kInt32, 0, nullptr);
      job.check(st.is_ok(), "the next receive, of the right size, works" + when + ": " + st.message());
    }
  }
}

// Ranks 0 and 1 create two groups over {0, 1} in opposite orders: each
// waits for the other at its own first group, and both must fail with an
// error that names the creation-order rule instead of hanging.
void order_mismatch(Job& job) {
  if (job.size < 2 || job.rank > 1) return;
  const std::string first = job.rank == 0 ? "order-a" : "order-b";
  Group g = make_group(job, first, 1, {0, 1}, 1500);
  job.check(g.backend == nullptr && g.status.code() == Code::kTimeout &&
                g.status.message().find("same order") != std::string::npos &&
                g.status.message().find("group rank " + std::to_string(1 - job.rank)) != std::string::npos,
            "mismatched creation order is a timeout naming the missing rank and the rule: " + g.status.message());
}

// The last rank stays out of an allreduce: each other member's call times
// out naming it as the member that had not arrived, and no member that was
// there.  (The last rank then joins, so MPI completes the operation.)
void absent_member(Job& job) {
  if (job.size < 2) return;
  Group g = make_group(job, "absent", 1, iota_ranks(job.size));
  job.check(g.backend != nullptr, "create group 'absent': " + g.status.message());
  if (!g.backend) return;
  const int last = job.size - 1;
  std::int64_t v = 1;
  if (job.rank != last) {
    g.backend->set_timeout(1000);
    accrun::Status st = g.backend->allreduce(&v, &v, 1, ac::DType::kInt64, ac::Op::kSum, nullptr);
    const std::string& m = st.message();
    bool names_present = false;
    for (int r = 0; r < last; ++r)
      if (r != job.rank && m.find("group rank " + std::to_string(r) + " ") != std::string::npos) names_present = true;
    job.check(st.code() == Code::kTimeout && m.find("group rank " + std::to_string(last) + " ") != std::string::npos &&
                  m.find("had not arrived") != std::string::npos && !names_present,
              "an allreduce the last rank stays out of times out naming it alone: " + m);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (job.rank == last) {
    g.backend->set_timeout(60000);  // non-blocking, as the others' (MPI does not match the two kinds)
    accrun::Status st = g.backend->allreduce(&v, &v, 1, ac::DType::kInt64, ac::Op::kSum, nullptr);
    job.check(st.is_ok() && v == job.size, "the late rank's allreduce completes: " + st.message());
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// Two threads create and use a group each at the same time (needs
// MPI_THREAD_MULTIPLE; the tags derived from name and epoch keep the two
// creations apart).
void threads_multiple(Job& job) {
  std::vector<std::string> results(2);
  std::vector<std::thread> ts;
  for (int t = 0; t < 2; ++t) {
    ts.emplace_back([&job, &results, t] {
      Group g = make_group(job, "thread" + std::to_string(t), 11, iota_ranks(job.size));
      if (!g.backend) {
        results[static_cast<std::size_t>(t)] = "create: " + g.status.message();
        return;
      }
      for (int i = 0; i < 20; ++i) {
        std::int64_t v = job.rank + t;
        accrun::Status st = g.backend->allreduce(&v, &v, 1, ac::DType::kInt64, ac::Op::kSum, nullptr);
        const std::int64_t want = static_cast<std::int64_t>(job.size) * (job.size - 1) / 2 + job.size * t;
        if (!st.is_ok() || v != want) {
          results[static_cast<std::size_t>(t)] = "allreduce " + std::to_string(i) + ": " + st.message() + " got " +
                                                 std::to_string(v) + " want " + std::to_string(want);
          return;
        }
      }
    });
  }
  for (auto& t : ts) t.join();
  for (int t = 0; t < 2; ++t) {
    job.check(results[static_cast<std::size_t>(t)].empty(),
              "thread " + std::to_string(t) + " group: " + results[static_cast<std::size_t>(t)]);
  }
}

// Below MPI_THREAD_MULTIPLE a second thread may not create a group while
// another thread holds one; the error says what to do.
void threads_serialized(Job& job) {
  Group main_group = make_group(job, "main", 1, iota_ranks(job.size));
  job.check(main_group.backend != nullptr, "create group 'main': " + main_group.status.message());
  accrun::Status other;
  std::thread t([&] { other = make_group(job, "other", 1, iota_ranks(job.size)).status; });
  t.join();
  job.check(other.code() == Code::kInvalidUsage && other.message().find("MPI_THREAD_MULTIPLE") != std::string::npos,
            "a group from a second thread below MPI_THREAD_MULTIPLE is refused: " + other.message());
  if (main_group.backend) {
    ExactSuite s(*main_group.backend, job.rank, job.size, "serialized");
    s.allreduce(17, ac::DType::kFloat16, ac::Op::kSum, false);
    job.absorb(s);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool serialized = false;
  if (argc == 2 && std::strcmp(argv[1], "--probe") == 0) {
    // Can this launcher start an Open MPI program?  (launch.sh asks.)
    MPI_Init(&argc, &argv);
    int r = 0;
    int n = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    int sum = 0;
    MPI_Allreduce(&r, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (r == 0 && sum == n * (n - 1) / 2 && n > 1) std::printf("mpi_suite: probe ok (%d ranks)\n", n);
    MPI_Finalize();
    return 0;
  }
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--thread-level") == 0 && i + 1 < argc) {
      serialized = std::strcmp(argv[++i], "serialized") == 0;
    } else {
      std::fprintf(stderr, "usage: mpi_suite [--thread-level multiple|serialized]\n");
      return 2;
    }
  }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, serialized ? MPI_THREAD_SERIALIZED : MPI_THREAD_MULTIPLE, &provided);
  Job job;
  MPI_Comm_rank(MPI_COMM_WORLD, &job.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &job.size);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  job.host = host;

  char dir[4096] = {};
  if (job.rank == 0) {
    std::string tmpl = (std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + std::string("/accrun-mpi-suite-XXXXXX");
    std::snprintf(dir, sizeof dir, "%s", tmpl.c_str());
    if (mkdtemp(dir) == nullptr) std::snprintf(dir, sizeof dir, "%s", "");
  }
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (dir[0] == '\0') {
    std::fprintf(stderr, "mpi_suite: cannot make a rendezvous directory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  job.dir = dir;

  job.check(ac::mpi_initialized(), "mpi_initialized() is true after MPI_Init_thread");
  if (serialized) {
    if (provided == MPI_THREAD_MULTIPLE) {
      if (job.rank == 0) std::printf("mpi_suite: MPI gave MPI_THREAD_MULTIPLE; nothing to check at a lower level\n");
    } else {
      threads_serialized(job);
    }
  } else {
    world_suite(job);
    send_first(job);
    short_receive(job);
    order_mismatch(job);
    absent_member(job);
    if (provided == MPI_THREAD_MULTIPLE) threads_multiple(job);
  }

  for (const std::string& f : job.failures) std::fprintf(stderr, "FAIL %s\n", f.c_str());
  int failed = static_cast<int>(job.failures.size());
  int total_failed = 0;
  int total_checks = 0;
  MPI_Allreduce(&failed, &total_failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(&job.checks, &total_checks, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (job.rank == 0) {
    std::error_code ec;
    std::filesystem::remove_all(job.dir, ec);
    std::printf("mpi_suite: %s: %d ranks, %d checks, %d failed\n", total_failed == 0 ? "PASS" : "FAIL", job.size,
                total_checks, total_failed);
  }
  MPI_Finalize();
  return total_failed == 0 ? 0 : 1;
}
