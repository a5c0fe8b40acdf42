// osu_<bench>: OSU-style benchmarks run under accrun, linking libaccrun.
//   accrun -n 2 osu_allreduce --backend store,raw-mpi
// ACCRUN_OSU_BENCH (set per executable in CMake) names the benchmark.
// Backends are table entries: `store` (an accrun group with
// ACCRUN_BACKEND_STORE over every rank), `mpi` (an accrun group with
// ACCRUN_BACKEND_MPI), `raw-mpi` (plain MPI calls on MPI_COMM_WORLD); the
// last two in MPI builds.  `-d cuda` is reserved for the NCCL backend.
#include <accrun/accrun.h>

#include <cstdio>
#include <string>
#include <vector>

#include "accrun/config.h"
#include "harness.hpp"
#if ACCRUN_HAVE_MPI
#include "raw_mpi.hpp"
#endif

#ifndef ACCRUN_OSU_BENCH
#error "ACCRUN_OSU_BENCH must name the benchmark"
#endif

namespace {

int report(int rc) {
  if (rc != ACCRUN_SUCCESS) std::fprintf(stderr, "osu: %s: %s\n", accrun_strerror(rc), accrun_last_error());
  return rc;
}

accrun::bench::Impl group_impl(const char* name, accrun_group_t g) {
  accrun::bench::Impl im;
  im.name = name;
  im.allreduce = [g](const void* s, void* r, std::size_t n) {
    return report(accrun_allreduce(g, s, r, n / 4, ACCRUN_FLOAT32, ACCRUN_SUM, nullptr));
  };
  im.bcast = [g](void* buf, std::size_t n, int root) { return report(accrun_broadcast(g, buf, n, ACCRUN_UINT8, root, nullptr)); };
  im.allgather = [g](const void* s, void* r, std::size_t n) {
    return report(accrun_allgather(g, s, r, n, ACCRUN_UINT8, nullptr));
  };
  im.reduce_scatter = [g](const void* s, void* r, std::size_t n) {
    return report(accrun_reducescatter(g, s, r, n / 4, ACCRUN_FLOAT32, ACCRUN_SUM, nullptr));
  };
  im.barrier = [g] { return report(accrun_barrier(g)); };
  im.send = [g](const void* buf, std::size_t n, int peer) { return report(accrun_send(g, buf, n, ACCRUN_UINT8, peer, nullptr)); };
  im.recv = [g](void* buf, std::size_t n, int peer) { return report(accrun_recv(g, buf, n, ACCRUN_UINT8, peer, nullptr)); };
  return im;
}

}  // namespace

int main(int argc, char** argv) {
  accrun::bench::Options o;
  o.bench = ACCRUN_OSU_BENCH;
  if (!accrun::bench::parse_options(argc, argv, &o)) return 2;
  if (o.cuda) {
    std::fprintf(stderr, "osu_%s: -d cuda needs the nccl backend, which this harness does not have yet\n", o.bench.c_str());
    return 2;
  }
  bool want_mpi = false;
  bool want_mpi_group = false;
  for (const auto& b : o.backends) {
    if (b == "raw-mpi" || b == "mpi") {
      want_mpi = true;
      want_mpi_group = want_mpi_group || b == "mpi";
    } else if (b != "store") {
      std::fprintf(stderr, "osu_%s: --backend %s: unknown (known: store, mpi, raw-mpi)\n", o.bench.c_str(),
                   b.c_str());
      return 2;
    }
  }
#if ACCRUN_HAVE_MPI
  if (want_mpi) MPI_Init(&argc, &argv);
#else
  if (want_mpi) {
    std::fprintf(stderr, "osu_%s: --backend mpi/raw-mpi: this build has no MPI\n", o.bench.c_str());
    return 2;
  }
#endif
  if (report(accrun_init()) != ACCRUN_SUCCESS) return 1;
  accrun_group_t g = nullptr;
  const int rank = accrun_rank(), size = accrun_size();
  if (report(accrun_group_init("osu", size, rank, ACCRUN_BACKEND_STORE, &g)) != ACCRUN_SUCCESS) return 1;
  accrun_group_t gm = nullptr;
  if (want_mpi_group &&
      report(accrun_group_init("osu-mpi", size, rank, ACCRUN_BACKEND_MPI, &gm)) != ACCRUN_SUCCESS) {
    return 1;
  }

  std::vector<accrun::bench::Impl> impls;
  for (const auto& b : o.backends) {
    if (b == "store") impls.push_back(group_impl("store", g));
    if (b == "mpi") impls.push_back(group_impl("mpi", gm));
#if ACCRUN_HAVE_MPI
    if (b == "raw-mpi") impls.push_back(accrun::bench::make_raw_mpi_impl());
#endif
  }
  accrun::bench::Env env;
  env.rank = rank;
  env.size = size;
  env.sum = [g](double v) {
    double out = 0;
    (void)accrun_allreduce(g, &v, &out, 1, ACCRUN_FLOAT64, ACCRUN_SUM, nullptr);
    return out;
  };
  env.sync = [g] { (void)accrun_barrier(g); };
  const int rc = accrun::bench::run(o, impls, env);
  if (gm != nullptr) (void)accrun_group_destroy(gm);
  (void)accrun_group_destroy(g);
  (void)accrun_finalize();
#if ACCRUN_HAVE_MPI
  if (want_mpi) MPI_Finalize();
#endif
  return rc;
}
