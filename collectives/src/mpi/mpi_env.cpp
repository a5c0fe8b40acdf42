// MPI initialisation owned by accrun (accrun_init_mpi(3)) and the process
// fact "MPI is initialised" used by AUTO selection.
//
// MPI's own state is process-wide (MPI_Init happens once per process), so the
// single fact "accrun initialised MPI and must finalise it" is process-wide
// too; it lives in one function-local atomic rather than a config value.
#include <mpi.h>

#include <atomic>
#include <mutex>
#include <string>

#include "accrun/backend.hpp"

namespace accrun::collectives {
namespace {

struct Ownership {
  std::mutex mu;
  bool owned = false;  // accrun called MPI_Init_thread and owes MPI_Finalize
};

Ownership& ownership() {
  static Ownership o;
  return o;
}

std::string mpi_error_text(int rc) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(buf, static_cast<std::size_t>(len));
}

}  // namespace

bool mpi_initialized() {
  int init = 0;
  int fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init != 0 && fin == 0;
}

Status mpi_init_owned(int* argc, char*** argv) {
  Ownership& o = ownership();
  std::lock_guard<std::mutex> lock(o.mu);
  int fin = 0;
  MPI_Finalized(&fin);
  if (fin != 0) {
    return invalid_usage("accrun_init_mpi: MPI was already finalised; MPI cannot be initialised twice in one process");
  }
  int init = 0;
  MPI_Initialized(&init);
  if (init != 0) return Status::ok();  // the program owns MPI: leave it alone at finalize
  int provided = 0;
  int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  if (rc != MPI_SUCCESS) return {Code::kSystem, "accrun_init_mpi: MPI_Init_thread: " + mpi_error_text(rc)};
  o.owned = true;
  return Status::ok();
}

Status mpi_finalize_owned() {
  Ownership& o = ownership();
  std::lock_guard<std::mutex> lock(o.mu);
  if (!o.owned) return Status::ok();
  o.owned = false;
  int fin = 0;
  MPI_Finalized(&fin);
  if (fin != 0) return Status::ok();  // the program finalised it already
  int rc = MPI_Finalize();
  if (rc != MPI_SUCCESS) return {Code::kSystem, "accrun_finalize: MPI_Finalize: " + mpi_error_text(rc)};
  return Status::ok();
}

}  // namespace accrun::collectives
