# Finds accrun's dependencies.  PMIx, hwloc, Boost.Program_options and
# nlohmann-json are required; MPI, libfabric and NCCL are optional (ACCRUN_WITH_*).  NCCL and
# the CUDA runtime are never linked: only their presence is recorded, and
# libaccrun dlopens them at run time.

find_package(PkgConfig REQUIRED)
pkg_check_modules(PMIX REQUIRED IMPORTED_TARGET pmix)
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc)
find_package(Boost 1.74 REQUIRED COMPONENTS program_options)
find_package(Threads REQUIRED)
# Every JSON accrun reads or writes (Debian: nlohmann-json3-dev).
find_package(nlohmann_json 3.10 REQUIRED)

# --- MPI ---
set(ACCRUN_HAVE_MPI 0)
if(NOT ACCRUN_WITH_MPI STREQUAL "OFF")
  find_package(MPI COMPONENTS C)
  if(MPI_C_FOUND)
    set(ACCRUN_HAVE_MPI 1)
  elseif(ACCRUN_WITH_MPI STREQUAL "ON")
    message(FATAL_ERROR "ACCRUN_WITH_MPI=ON but no MPI was found (install libopenmpi-dev)")
  endif()
endif()

# --- libfabric ---
set(ACCRUN_HAVE_LIBFABRIC 0)
if(NOT ACCRUN_WITH_LIBFABRIC STREQUAL "OFF")
  pkg_check_modules(LIBFABRIC IMPORTED_TARGET libfabric)
  if(LIBFABRIC_FOUND)
    set(ACCRUN_HAVE_LIBFABRIC 1)
  elseif(ACCRUN_WITH_LIBFABRIC STREQUAL "ON")
    message(FATAL_ERROR "ACCRUN_WITH_LIBFABRIC=ON but libfabric was not found (install libfabric-dev)")
  endif()
endif()

# --- NCCL and the CUDA runtime (headers only; loaded with dlopen) ---
set(ACCRUN_HAVE_NCCL 0)
if(NOT ACCRUN_WITH_NCCL STREQUAL "OFF")
  if(DEFINED ENV{CUDA_HOME})
    set(_accrun_cuda_hints $ENV{CUDA_HOME})
  endif()
  list(APPEND _accrun_cuda_hints /usr/local/cuda)
  find_path(ACCRUN_NCCL_INCLUDE_DIR nccl.h HINTS ${_accrun_cuda_hints} PATH_SUFFIXES include)
  find_path(ACCRUN_CUDART_INCLUDE_DIR cuda_runtime_api.h HINTS ${_accrun_cuda_hints} PATH_SUFFIXES include)
  if(ACCRUN_NCCL_INCLUDE_DIR AND ACCRUN_CUDART_INCLUDE_DIR)
    set(ACCRUN_HAVE_NCCL 1)
  elseif(ACCRUN_WITH_NCCL STREQUAL "ON")
    message(FATAL_ERROR "ACCRUN_WITH_NCCL=ON but nccl.h/cuda_runtime_api.h were not found under CUDA_HOME or /usr/local/cuda")
  endif()
endif()

function(accrun_print_summary)
  message(STATUS "accrun ${PROJECT_VERSION}: optional parts")
  foreach(part MPI LIBFABRIC NCCL)
    if(ACCRUN_HAVE_${part})
      message(STATUS "  ${part}: built")
    else()
      message(STATUS "  ${part}: left out (ACCRUN_WITH_${part}=${ACCRUN_WITH_${part}})")
    endif()
  endforeach()
  if(ACCRUN_SANITIZE)
    message(STATUS "  sanitizers: ${ACCRUN_SANITIZE}")
  endif()
endfunction()
