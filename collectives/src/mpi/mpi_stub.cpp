// The MPI backend in a build without MPI (ACCRUN_WITH_MPI=OFF or no MPI
// found): every entry point says the build has no MPI.
#include "accrun/backend.hpp"

namespace accrun::collectives {

Result<std::unique_ptr<Backend>> make_mpi_backend(const GroupContext& ctx) {
  return not_supported("MPI group '" + ctx.name +
                       "': this build of accrun has no MPI backend (rebuild with ACCRUN_WITH_MPI=ON and an MPI "
                       "installed, e.g. libopenmpi-dev)");
}

bool mpi_initialized() { return false; }

Status mpi_init_owned(int* /*argc*/, char*** /*argv*/) {
  return not_supported("accrun_init_mpi: this build of accrun has no MPI (rebuild with ACCRUN_WITH_MPI=ON)");
}

Status mpi_finalize_owned() { return Status::ok(); }

}  // namespace accrun::collectives
