// accrun_init_mpi(3): MPI initialised by libaccrun on the program's behalf.
// The MPI calls live in collectives (mpi_init_owned), so libaccrun's C
// boundary needs no MPI header; accrun_finalize() calls mpi_finalize_owned().
#include "accrun/accrun.h"
#include "accrun/backend.hpp"
#include "accrun/log.hpp"
#include "fork_guard.hpp"

#define ACCRUN_API extern "C" __attribute__((visibility("default")))

ACCRUN_API int accrun_init_mpi(int* argc, char*** argv) {
  try {
    accrun::Status st = accrun::runtime::forked_child().load(std::memory_order_relaxed)
                            ? accrun::runtime::forked_child_error("accrun_init_mpi")
                            : accrun::collectives::mpi_init_owned(argc, argv);
    if (st.is_ok()) return ACCRUN_SUCCESS;
    accrun::log(accrun::LogLevel::kError, "%s", st.message().c_str());
    return static_cast<int>(st.code());
  } catch (...) {
    accrun::log(accrun::LogLevel::kError, "accrun_init_mpi: unexpected failure");
    return ACCRUN_ERR_SYSTEM;
  }
}
