// store_micro: the store backend's collectives without the launcher or the
// runtime.  Two modes:
//   store_micro -n N [osu options]          forks N processes (pinned to CPU
//                                           rank % CPUs) sharing a temp
//                                           directory under /dev/shm; store only
//   mpirun -n N store_micro [osu options]   ranks from MPI; --backend
//                                           store,raw-mpi interleaves both in
//                                           one launch with mpirun's binding
// The first argument after the options names the benchmark (allreduce, bcast,
// allgather, reduce_scatter, barrier, latency, bw).  Tuning knobs for sweeps:
// --half B --small-max B --small-extra-max B --ar-chunk B --bc-chunk B --ag-chunk B --spin-ns NS
// --ar-over-cma-min B --ar-cma-min B --ag-cma-min B --ag-over-cma-min B --bc-cma-min B
// --bc-cma-mid MIN:MAX.
#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "accrun/backend.hpp"
#include "accrun/config.h"
#include "harness.hpp"
#include "store/store_backend.hpp"
#if ACCRUN_HAVE_MPI
#include "raw_mpi.hpp"
#endif

namespace {

using accrun::Result;
using accrun::Status;
namespace coll = accrun::collectives;

// Keys are files in a directory, written whole and renamed into place.
class FileRendezvous final : public coll::Rendezvous {
 public:
  explicit FileRendezvous(std::string dir) : dir_(std::move(dir)) {}
  Status publish(const std::string& key, const std::string& value) override {
    const std::string tmp = dir_ + "/rv." + key + ".tmp", dst = dir_ + "/rv." + key;
    { std::ofstream f(tmp); f << value; }
    if (std::rename(tmp.c_str(), dst.c_str()) != 0) return accrun::system_error("rename " + dst);
    return Status::ok();
  }
  Result<std::string> lookup(const std::string& key, int timeout_ms) override {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms < 0 ? 1 << 30 : timeout_ms);
    for (;;) {
      std::ifstream f(dir_ + "/rv." + key);
      if (f) { std::stringstream ss; ss << f.rdbuf(); return ss.str(); }
      if (std::chrono::steady_clock::now() > end) return accrun::timeout_error("rendezvous key " + key);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

 private:
  std::string dir_;
};


bool take_tuning(std::vector<std::string>& args, coll::store::Tuning* t) {
  std::vector<std::string> rest;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto val = [&]() { return i + 1 < args.size() ? std::strtoull(args[++i].c_str(), nullptr, 10) : 0ull; };
    if (a == "--half") t->half_bytes = val();
    else if (a == "--small-max") t->allreduce_small_max = val();
    else if (a == "--small-extra-max") t->allreduce_small_extra_max = val();
    else if (a == "--ar-chunk") t->allreduce_chunk = val();
    else if (a == "--bc-chunk") t->bcast_chunk = val();
    else if (a == "--ag-chunk") t->allgather_chunk = val();
    else if (a == "--spin-ns") t->spin_ns = static_cast<int>(val());
    else if (a == "--ar-over-cma-min") t->allreduce_over_cma_min = val();
    else if (a == "--ar-cma-min") t->allreduce_cma_min = val();
    else if (a == "--ag-cma-min") t->allgather_cma_min = val();
    else if (a == "--ag-over-cma-min") t->allgather_over_cma_min = val();
    else if (a == "--bc-cma-min") t->bcast_cma_min = val();
    else if (a == "--bc-cma-mid" && i + 1 < args.size()) {  // MIN:MAX, the single-copy window (0:0 closes it)
      const std::string& v = args[++i];
      t->bcast_cma_mid_min = std::strtoull(v.c_str(), nullptr, 10);
      t->bcast_cma_mid_max = v.find(':') == std::string::npos ? 0 : std::strtoull(v.c_str() + v.find(':') + 1, nullptr, 10);
    } else rest.push_back(a);
  }
  args = rest;
  return true;
}

coll::GroupContext context(int rank, int size, const std::string& dir, coll::Rendezvous* rv) {
  coll::GroupContext ctx;
  ctx.name = "store_micro";
  ctx.epoch = 1;
  ctx.rank = rank;
  ctx.size = size;
  ctx.members.resize(static_cast<std::size_t>(size));
  for (int q = 0; q < size; ++q) { ctx.members[q].job_rank = q; ctx.members[q].host = "local"; }
  ctx.shm_dir = dir;
  ctx.timeout_ms = 60'000;
  ctx.rendezvous = rv;
  const char* ov = std::getenv("ACCRUN_OVERSUBSCRIBED");
  ctx.oversubscribed = ov != nullptr && std::string(ov) == "1";
  return ctx;
}

accrun::bench::Impl store_impl(coll::Backend* b) {
  using coll::DType;
  using coll::Op;
  accrun::bench::Impl im;
  im.name = "store";
  auto rc = [](const Status& s) {
    if (!s) std::fprintf(stderr, "store_micro: %s\n", s.message().c_str());
    return s.is_ok() ? 0 : 1;
  };
  im.allreduce = [=](const void* s, void* r, std::size_t n) { return rc(b->allreduce(s, r, n / 4, DType::kFloat32, Op::kSum, nullptr)); };
  im.bcast = [=](void* buf, std::size_t n, int root) { return rc(b->broadcast(buf, n, DType::kUInt8, root, nullptr)); };
  im.allgather = [=](const void* s, void* r, std::size_t n) { return rc(b->allgather(s, r, n, DType::kUInt8, nullptr)); };
  im.reduce_scatter = [=](const void* s, void* r, std::size_t n) {
    return rc(b->reducescatter(s, r, n / 4, DType::kFloat32, Op::kSum, nullptr));
  };
  im.barrier = [=] { return rc(b->barrier()); };
  im.send = [=](const void* buf, std::size_t n, int peer) { return rc(b->send(buf, n, DType::kUInt8, peer, nullptr)); };
  im.recv = [=](void* buf, std::size_t n, int peer) { return rc(b->recv(buf, n, DType::kUInt8, peer, nullptr)); };
  return im;
}

int rank_main(int rank, int size, const std::string& dir, const accrun::bench::Options& o,
              const coll::store::Tuning& t, bool with_mpi) {
  FileRendezvous rv(dir);
  auto b = coll::store::make_store_backend_tuned(context(rank, size, dir, &rv), t);
  if (!b) { std::fprintf(stderr, "store_micro: rank %d: %s\n", rank, b.status().message().c_str()); return 1; }
  coll::Backend* be = b->get();
  std::vector<accrun::bench::Impl> impls;
  accrun::bench::Env env;
  env.rank = rank;
  env.size = size;
  env.sum = [be](double v) { double out = 0; (void)be->allreduce(&v, &out, 1, coll::DType::kFloat64, coll::Op::kSum, nullptr); return out; };
  env.max = [be](double v) { double out = 0; (void)be->allreduce(&v, &out, 1, coll::DType::kFloat64, coll::Op::kMax, nullptr); return out; };
  env.sync = [be] { (void)be->barrier(); };
#if ACCRUN_HAVE_MPI
  if (with_mpi) {
    env.sum = [](double v) { double out = 0; MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); return out; };
    env.max = [](double v) { double out = 0; MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD); return out; };
    env.sync = [] { MPI_Barrier(MPI_COMM_WORLD); };
  }
#endif
  for (const std::string& name : o.backends) {
    if (name == "store") {
      impls.push_back(store_impl(be));
#if ACCRUN_HAVE_MPI
    } else if (name == "raw-mpi" && with_mpi) {
      impls.push_back(accrun::bench::make_raw_mpi_impl());
#endif
    } else {
      if (rank == 0) std::fprintf(stderr, "store_micro: backend '%s' needs %s\n", name.c_str(),
                                  name == "raw-mpi" ? "a launch under mpirun (and an MPI build)" : "another program");
      return 2;
    }
  }
  (void)with_mpi;
  return accrun::bench::run(o, impls, env);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  coll::store::Tuning tuning;
  take_tuning(args, &tuning);
  int nprocs = 2;
  std::string bench = "allreduce";
  std::vector<std::string> osu_args{argv[0]};
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "-n" && i + 1 < args.size()) nprocs = std::atoi(args[++i].c_str());
    else if (args[i].rfind("-", 0) != 0 && (i == 0 || args[i - 1].rfind("-", 0) != 0 || args[i - 1] == "-n")) bench = args[i];
    else osu_args.push_back(args[i]);
  }
  std::vector<char*> cargv;
  for (auto& s : osu_args) cargv.push_back(s.data());
  accrun::bench::Options o;
  o.bench = bench;
  if (!accrun::bench::parse_options(static_cast<int>(cargv.size()), cargv.data(), &o)) return 2;

#if ACCRUN_HAVE_MPI
  if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char dir[256] = {0};
    if (rank == 0) {
      char tmpl[] = "/dev/shm/accrun-micro-XXXXXX";
      if (mkdtemp(tmpl) != nullptr) std::snprintf(dir, sizeof dir, "%s", tmpl);
    }
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    const int rc = rank_main(rank, size, dir, o, tuning, true);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) std::filesystem::remove_all(dir);
    MPI_Finalize();
    return rc;
  }
#endif
  char tmpl[] = "/dev/shm/accrun-micro-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) { std::perror("store_micro: mkdtemp"); return 1; }
  const std::string dir = tmpl;
  const unsigned ncpu = std::max(1u, std::thread::hardware_concurrency());
  std::vector<pid_t> kids;
  for (int r = 0; r < nprocs; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(static_cast<int>(static_cast<unsigned>(r) % ncpu), &set);
      sched_setaffinity(0, sizeof set, &set);
      std::fflush(stdout);
      _exit(rank_main(r, nprocs, dir, o, tuning, false));
    }
    kids.push_back(pid);
  }
  int worst = 0;
  for (pid_t k : kids) {
    int st = 0;
    waitpid(k, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) worst = 1;
  }
  std::filesystem::remove_all(dir);
  return worst;
}
