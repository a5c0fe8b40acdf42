# Build options and the per-target defaults every accrun target gets.

set(ACCRUN_WITH_MPI AUTO CACHE STRING "Build the MPI backend (AUTO|ON|OFF)")
set(ACCRUN_WITH_NCCL AUTO CACHE STRING "Build the NCCL backend (AUTO|ON|OFF)")
set(ACCRUN_WITH_LIBFABRIC AUTO CACHE STRING "Build the libfabric transport (AUTO|ON|OFF)")
foreach(opt ACCRUN_WITH_MPI ACCRUN_WITH_NCCL ACCRUN_WITH_LIBFABRIC)
  set_property(CACHE ${opt} PROPERTY STRINGS AUTO ON OFF)
  if(NOT ${opt} MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "${opt}=${${opt}}: expected AUTO, ON or OFF")
  endif()
endforeach()
option(ACCRUN_BUILD_TESTS "Build the tests" ON)
option(ACCRUN_BUILD_BENCHMARKS "Build the benchmarks" ON)
option(ACCRUN_WERROR "Treat warnings as errors" OFF)
set(ACCRUN_SANITIZE "" CACHE STRING "Sanitizers: address,undefined | thread | empty")

if(ACCRUN_SANITIZE AND NOT ACCRUN_SANITIZE MATCHES "^(address|undefined|address,undefined|undefined,address|thread)$")
  message(FATAL_ERROR "ACCRUN_SANITIZE=${ACCRUN_SANITIZE}: expected address,undefined or thread")
endif()

# Warnings, -Werror and sanitizers, per target (no global flags).
function(accrun_target_defaults target)
  target_compile_options(${target} PRIVATE -Wall -Wextra)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # GCC 12 reports false positives on std::variant/std::optional of strings at -O2
    # (maybe-uninitialized) and on std::string concatenation at -O3 (restrict).
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CXX>:-Wno-maybe-uninitialized -Wno-restrict>)
  endif()
  if(ACCRUN_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(ACCRUN_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=${ACCRUN_SANITIZE} -fno-omit-frame-pointer
                                               -fno-sanitize-recover=undefined)
    target_link_options(${target} PRIVATE -fsanitize=${ACCRUN_SANITIZE})
  endif()
endfunction()

# Sanitizer flags for INTERFACE consumers such as tests that link static libs.
function(accrun_link_sanitizers target)
  if(ACCRUN_SANITIZE)
    target_link_options(${target} PRIVATE -fsanitize=${ACCRUN_SANITIZE})
  endif()
endfunction()
