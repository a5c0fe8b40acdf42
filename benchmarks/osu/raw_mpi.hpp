// The raw-mpi table entry: the same operations as plain MPI calls on
// MPI_COMM_WORLD (float32 sums), the reference the store backend is held to.
#pragma once

// C bindings only: the C++ bindings would need libmpi_cxx.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include "harness.hpp"

namespace accrun::bench {

inline Impl make_raw_mpi_impl() {
  Impl im;
  im.name = "raw-mpi";
  im.allreduce = [](const void* s, void* r, std::size_t bytes) {
    return MPI_Allreduce(s, r, static_cast<int>(bytes / 4), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  };
  im.bcast = [](void* buf, std::size_t bytes, int root) {
    return MPI_Bcast(buf, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD);
  };
  im.allgather = [](const void* s, void* r, std::size_t bytes) {
    return MPI_Allgather(s, static_cast<int>(bytes), MPI_BYTE, r, static_cast<int>(bytes), MPI_BYTE, MPI_COMM_WORLD);
  };
  im.reduce_scatter = [](const void* s, void* r, std::size_t recv_bytes) {
    return MPI_Reduce_scatter_block(s, r, static_cast<int>(recv_bytes / 4), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  };
  im.barrier = [] { return MPI_Barrier(MPI_COMM_WORLD); };
  im.send = [](const void* buf, std::size_t bytes, int peer) {
    return MPI_Send(buf, static_cast<int>(bytes), MPI_BYTE, peer, 1, MPI_COMM_WORLD);
  };
  im.recv = [](void* buf, std::size_t bytes, int peer) {
    return MPI_Recv(buf, static_cast<int>(bytes), MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  };
  return im;
}

}  // namespace accrun::bench
