// osu_<bench>: OSU-style benchmarks run under accrun, linking libaccrun.
//   accrun -n 2 osu_allreduce --backend store,raw-mpi
// ACCRUN_OSU_BENCH (set per executable in CMake) names the benchmark.
// Backends are table entries: `store` (an accrun group with
// ACCRUN_BACKEND_STORE over every rank), `mpi` (an accrun group with
// ACCRUN_BACKEND_MPI), `raw-mpi` (plain MPI calls on MPI_COMM_WORLD); the
// last two in MPI builds.  With `-d cuda` (device buffers): `nccl` (an
// accrun group with ACCRUN_BACKEND_NCCL) and `raw-nccl` (plain NCCL calls on
// a communicator of every rank), in builds with the NCCL headers.
#include <accrun/accrun.h>

#include <cstdio>
#include <string>
#include <vector>

#include "accrun/config.h"
#include "harness.hpp"
#if ACCRUN_HAVE_MPI
#include "raw_mpi.hpp"
#endif
#if ACCRUN_HAVE_NCCL
#include "raw_nccl.hpp"
#endif

#ifndef ACCRUN_OSU_BENCH
#error "ACCRUN_OSU_BENCH must name the benchmark"
#endif

namespace {

int report(int rc) {
  if (rc != ACCRUN_SUCCESS) std::fprintf(stderr, "osu: %s: %s\n", accrun_strerror(rc), accrun_last_error());
  return rc;
}

// An accrun group's entry; `stream` is the cudaStream_t of an NCCL group
// (NULL otherwise).
accrun::bench::Impl group_impl(const char* name, accrun_group_t g, void* stream = nullptr) {
  accrun::bench::Impl im;
  im.name = name;
  im.allreduce = [g, stream](const void* s, void* r, std::size_t n) {
    return report(accrun_allreduce(g, s, r, n / 4, ACCRUN_FLOAT32, ACCRUN_SUM, stream));
  };
  im.bcast = [g, stream](void* buf, std::size_t n, int root) {
    return report(accrun_broadcast(g, buf, n, ACCRUN_UINT8, root, stream));
  };
  im.allgather = [g, stream](const void* s, void* r, std::size_t n) {
    return report(accrun_allgather(g, s, r, n, ACCRUN_UINT8, stream));
  };
  im.reduce_scatter = [g, stream](const void* s, void* r, std::size_t n) {
    return report(accrun_reducescatter(g, s, r, n / 4, ACCRUN_FLOAT32, ACCRUN_SUM, stream));
  };
  im.barrier = [g] { return report(accrun_barrier(g)); };
  im.send = [g, stream](const void* buf, std::size_t n, int peer) {
    return report(accrun_send(g, buf, n, ACCRUN_UINT8, peer, stream));
  };
  im.recv = [g, stream](void* buf, std::size_t n, int peer) {
    return report(accrun_recv(g, buf, n, ACCRUN_UINT8, peer, stream));
  };
  return im;
}

}  // namespace

int main(int argc, char** argv) {
  accrun::bench::Options o;
  o.bench = ACCRUN_OSU_BENCH;
  if (!accrun::bench::parse_options(argc, argv, &o)) return 2;
  bool want_mpi = false;
  bool want_mpi_group = false;
  bool want_nccl_group = false;
  bool want_raw_nccl = false;
  for (const auto& b : o.backends) {
    const bool device = b == "nccl" || b == "raw-nccl";
    if (b == "raw-mpi" || b == "mpi") {
      want_mpi = true;
      want_mpi_group = want_mpi_group || b == "mpi";
    } else if (device) {
      want_nccl_group = want_nccl_group || b == "nccl";
      want_raw_nccl = want_raw_nccl || b == "raw-nccl";
    } else if (b != "store") {
      std::fprintf(stderr, "osu_%s: --backend %s: unknown (known: store, mpi, raw-mpi, nccl, raw-nccl)\n",
                   o.bench.c_str(), b.c_str());
      return 2;
    }
    if (device != o.cuda) {
      std::fprintf(stderr,
                   device ? "osu_%s: --backend %s needs device buffers: add -d cuda\n"
                          : "osu_%s: --backend %s takes host buffers: with -d cuda use nccl and raw-nccl\n",
                   o.bench.c_str(), b.c_str());
      return 2;
    }
  }
#if !ACCRUN_HAVE_NCCL
  if (o.cuda) {
    std::fprintf(stderr, "osu_%s: -d cuda: this build has no NCCL headers (CUDA_HOME)\n", o.bench.c_str());
    return 2;
  }
#endif
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

  accrun::bench::Env env;
#if ACCRUN_HAVE_NCCL
  accrun::bench::Cuda cuda;
  accrun_group_t gn = nullptr;
  ncclComm_t raw_comm = nullptr;
  void* scratch = nullptr;
  if (o.cuda) {
    std::string why;
    if (!accrun::bench::load_cuda(&cuda, &why)) {
      std::fprintf(stderr, "osu_%s: -d cuda: %s\n", o.bench.c_str(), why.c_str());
      return 1;
    }
    env.memory = accrun::bench::device_memory(cuda);
    scratch = env.memory.alloc(64);
    if (scratch == nullptr) return 1;
    if (want_nccl_group &&
        report(accrun_group_init("osu-nccl", size, rank, ACCRUN_BACKEND_NCCL, &gn)) != ACCRUN_SUCCESS) {
      return 1;
    }
    if (want_raw_nccl && (raw_comm = accrun::bench::raw_nccl_comm(cuda, rank, size)) == nullptr) return 1;
  }
#else
  (void)want_nccl_group;
  (void)want_raw_nccl;
#endif

  std::vector<accrun::bench::Impl> impls;
  for (const auto& b : o.backends) {
    if (b == "store") impls.push_back(group_impl("store", g));
    if (b == "mpi") impls.push_back(group_impl("mpi", gm));
#if ACCRUN_HAVE_MPI
    if (b == "raw-mpi") impls.push_back(accrun::bench::make_raw_mpi_impl());
#endif
#if ACCRUN_HAVE_NCCL
    if (b == "nccl") {
      impls.push_back(group_impl("nccl", gn, cuda.stream));
      impls.back().wait = [&cuda] {
        return accrun::bench::cuda_check(cuda, cuda.cudaStreamSynchronize(cuda.stream), "cudaStreamSynchronize");
      };
    }
    if (b == "raw-nccl") impls.push_back(accrun::bench::make_raw_nccl_impl(cuda, raw_comm, scratch));
#endif
  }
  env.rank = rank;
  env.size = size;
  env.sum = [g](double v) {
    double out = 0;
    (void)accrun_allreduce(g, &v, &out, 1, ACCRUN_FLOAT64, ACCRUN_SUM, nullptr);
    return out;
  };
  env.max = [g](double v) {
    double out = 0;
    (void)accrun_allreduce(g, &v, &out, 1, ACCRUN_FLOAT64, ACCRUN_MAX, nullptr);
    return out;
  };
  env.sync = [g] { (void)accrun_barrier(g); };
  const int rc = accrun::bench::run(o, impls, env);
#if ACCRUN_HAVE_NCCL
  if (gn != nullptr) (void)accrun_group_destroy(gn);
  if (raw_comm != nullptr) (void)cuda.ncclCommDestroy(raw_comm);
  if (scratch != nullptr) env.memory.release(scratch);
#endif
  if (gm != nullptr) (void)accrun_group_destroy(gm);
  (void)accrun_group_destroy(g);
  (void)accrun_finalize();
#if ACCRUN_HAVE_MPI
  if (want_mpi) MPI_Finalize();
#endif
  return rc;
}
