# ACCEL_NCCL=AUTO|ON|OFF: the nccl communication backend (src/distributed/nccl_*.cpp).
#   AUTO (default): compiled when nccl.h (NCCL >= 2.14), libnccl, cuda_runtime_api.h and libcudart are
#                   found (CUDAToolkit package, NCCL_ROOT / CUDA_HOME, or /usr/local/cuda*).
#   ON:             the same, and a configure error naming what is missing.
#   OFF:            never; backend "nccl" then reports ACCEL_ERR_UNIMPLEMENTED.
# libaccel does NOT link libnccl or libcudart: it opens them with dlopen at first use (why: see
# src/distributed/nccl_api.hpp). The libraries are looked for here so that the link check
# (tests/distributed, nccl_link_check) proves every function accel resolves exists in them.
# Sets ACCEL_NCCL_FOUND, ACCEL_NCCL_INCLUDE_DIRS, ACCEL_NCCL_LIBRARIES and ACCEL_NCCL_REASON (why not).
set(ACCEL_NCCL AUTO CACHE STRING "Compile the NCCL backend: AUTO, ON or OFF")
set_property(CACHE ACCEL_NCCL PROPERTY STRINGS AUTO ON OFF)
set(ACCEL_NCCL_FOUND FALSE)
set(ACCEL_NCCL_REASON "ACCEL_NCCL is OFF")
if(NOT ACCEL_NCCL STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  file(GLOB accel_cuda_dirs LIST_DIRECTORIES true /usr/local/cuda /usr/local/cuda-*)
  set(accel_cuda_hints $ENV{NCCL_ROOT} ${NCCL_ROOT} $ENV{CUDA_HOME} ${accel_cuda_dirs})
  if(CUDAToolkit_FOUND)
    list(PREPEND accel_cuda_hints ${CUDAToolkit_LIBRARY_ROOT})
  endif()
  find_path(ACCEL_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${accel_cuda_hints} PATH_SUFFIXES include)
  find_path(ACCEL_CUDART_INCLUDE_DIR cuda_runtime_api.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${accel_cuda_hints}
            PATH_SUFFIXES include)
  find_library(ACCEL_NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${CUDAToolkit_LIBRARY_DIR} ${accel_cuda_hints}
               PATH_SUFFIXES lib lib64)
  find_library(ACCEL_CUDART_LIBRARY NAMES cudart HINTS ${CUDAToolkit_LIBRARY_DIR} ${accel_cuda_hints}
               PATH_SUFFIXES lib lib64)
  set(accel_missing "")
  foreach(var ACCEL_NCCL_INCLUDE_DIR ACCEL_CUDART_INCLUDE_DIR ACCEL_NCCL_LIBRARY ACCEL_CUDART_LIBRARY)
    if(NOT ${var})
      list(APPEND accel_missing ${var})
    endif()
  endforeach()
  if(NOT accel_missing)
    file(STRINGS ${ACCEL_NCCL_INCLUDE_DIR}/nccl.h accel_nccl_version REGEX "^#define NCCL_(MAJOR|MINOR) ")
    string(REGEX REPLACE ".*NCCL_MAJOR ([0-9]+).*" "\\1" accel_nccl_major "${accel_nccl_version}")
    string(REGEX REPLACE ".*NCCL_MINOR ([0-9]+).*" "\\1" accel_nccl_minor "${accel_nccl_version}")
    set(ACCEL_NCCL_VERSION "${accel_nccl_major}.${accel_nccl_minor}")
    if(ACCEL_NCCL_VERSION VERSION_LESS 2.14)
      set(ACCEL_NCCL_REASON "${ACCEL_NCCL_INCLUDE_DIR}/nccl.h is NCCL ${ACCEL_NCCL_VERSION}; accel needs 2.14 or newer")
    else()
      set(ACCEL_NCCL_FOUND TRUE)
      set(ACCEL_NCCL_REASON "")
    endif()
  else()
    string(REPLACE ";" ", " accel_missing "${accel_missing}")
    set(ACCEL_NCCL_REASON "not found: ${accel_missing} (set NCCL_ROOT or CUDA_HOME)")
  endif()
  if(NOT ACCEL_NCCL_FOUND AND ACCEL_NCCL STREQUAL "ON")
    message(FATAL_ERROR "ACCEL_NCCL=ON, but the NCCL backend cannot be built: ${ACCEL_NCCL_REASON}")
  endif()
endif()
if(ACCEL_NCCL_FOUND)
  set(ACCEL_NCCL_INCLUDE_DIRS ${ACCEL_NCCL_INCLUDE_DIR} ${ACCEL_CUDART_INCLUDE_DIR})
  list(REMOVE_DUPLICATES ACCEL_NCCL_INCLUDE_DIRS)
  set(ACCEL_NCCL_LIBRARIES ${ACCEL_NCCL_LIBRARY} ${ACCEL_CUDART_LIBRARY})
  message(STATUS "accel: NCCL backend compiled (NCCL ${ACCEL_NCCL_VERSION} headers in ${ACCEL_NCCL_INCLUDE_DIR}; "
                 "libnccl and libcudart are opened at run time)")
else()
  message(STATUS "accel: NCCL backend not compiled: ${ACCEL_NCCL_REASON}")
endif()

# Compiles the NCCL sources of `target` with the CUDA headers (as system headers, so their warnings
# stay out of -Wall) and ACCEL_WITH_NCCL; no other source file sees either. Elsewhere,
# accel::distributed::nccl_compiled() tells whether the backend is in.
function(accel_enable_nccl target)
  if(NOT ACCEL_NCCL_FOUND)
    return()
  endif()
  # Only these two files get the definition: a target-wide one would change every compile command, and
  # switching ACCEL_NCCL would then miss ccache for the whole library.
  set(opts "")
  foreach(dir IN LISTS ACCEL_NCCL_INCLUDE_DIRS)
    list(APPEND opts -isystem ${dir})
  endforeach()
  set_source_files_properties(${CMAKE_SOURCE_DIR}/src/distributed/nccl_api.cpp
    ${CMAKE_SOURCE_DIR}/src/distributed/nccl_communicator.cpp PROPERTIES
    COMPILE_OPTIONS "${opts}" COMPILE_DEFINITIONS ACCEL_WITH_NCCL)
endfunction()
