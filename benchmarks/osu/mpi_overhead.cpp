// mpi_overhead: the MPI backend's cost over calling MPI directly, measured
// in one launch with the OSU-style harness, the two interleaved:
//   mpirun -n 2 mpi_overhead allreduce [-m 8:4194304] [-r 5]
//   (benchmarks: latency bw allreduce bcast allgather reduce_scatter barrier)
// The `mpi` entry drives the backend through backend.hpp (a group over
// MPI_COMM_WORLD, the runtime's C boundary not included), so it runs under
// any launcher; under accrun, osu_* with --backend mpi adds the C API.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "accrun/backend.hpp"
#include "harness.hpp"
#include "raw_mpi.hpp"

namespace ac = accrun::collectives;

namespace {

// The group's directory is not needed: a group over all of MPI_COMM_WORLD
// meets through MPI itself when no rendezvous is given.
accrun::bench::Impl backend_impl(ac::Backend& b) {
  accrun::bench::Impl im;
  im.name = "mpi";
  im.allreduce = [&b](const void* s, void* r, std::size_t n) {
    return static_cast<int>(b.allreduce(s, r, n / 4, ac::DType::kFloat32, ac::Op::kSum, nullptr).code());
  };
  im.bcast = [&b](void* buf, std::size_t n, int root) {
    return static_cast<int>(b.broadcast(buf, n, ac::DType::kUInt8, root, nullptr).code());
  };
  im.allgather = [&b](const void* s, void* r, std::size_t n) {
    return static_cast<int>(b.allgather(s, r, n, ac::DType::kUInt8, nullptr).code());
  };
  im.reduce_scatter = [&b](const void* s, void* r, std::size_t n) {
    return static_cast<int>(b.reducescatter(s, r, n / 4, ac::DType::kFloat32, ac::Op::kSum, nullptr).code());
  };
  im.barrier = [&b] { return static_cast<int>(b.barrier().code()); };
  im.send = [&b](const void* buf, std::size_t n, int peer) {
    return static_cast<int>(b.send(buf, n, ac::DType::kUInt8, peer, nullptr).code());
  };
  im.recv = [&b](void* buf, std::size_t n, int peer) {
    return static_cast<int>(b.recv(buf, n, ac::DType::kUInt8, peer, nullptr).code());
  };
  return im;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') {
    std::fprintf(stderr, "usage: mpi_overhead BENCH [harness options]\n");
    return 2;
  }
  accrun::bench::Options o;
  o.bench = argv[1];
  o.reps = 5;
  argv[1] = argv[0];
  if (!accrun::bench::parse_options(argc - 1, argv + 1, &o)) return 2;
  o.backends = {"mpi", "raw-mpi"};
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  ac::GroupContext ctx;
  ctx.name = "overhead";
  ctx.epoch = 1;
  ctx.rank = rank;
  ctx.size = size;
  ctx.members.resize(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) ctx.members[static_cast<std::size_t>(r)].job_rank = r;
  auto made = ac::make_mpi_backend(ctx);
  if (!made.is_ok()) {
    std::fprintf(stderr, "mpi_overhead: %s\n", made.status().message().c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  std::unique_ptr<ac::Backend> backend = std::move(made).value();

  std::vector<accrun::bench::Impl> impls = {backend_impl(*backend), accrun::bench::make_raw_mpi_impl()};
  accrun::bench::Env env;
  env.rank = rank;
  env.size = size;
  env.sum = [](double v) {
    double out = 0;
    MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return out;
  };
  env.max = [](double v) {
    double out = 0;
    MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return out;
  };
  env.sync = [] { MPI_Barrier(MPI_COMM_WORLD); };
  const int rc = accrun::bench::run(o, impls, env);
  backend.reset();
  MPI_Finalize();
  return rc;
}
