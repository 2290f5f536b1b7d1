# Finds every dependency wherever the distribution puts it. Optional features whose dependency is missing are
# switched off with a message, never a failed build.
find_package(Threads REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(CLI11 REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
# toml++ (Debian libtomlplusplus-dev) for `penstock sweep` matrix files: its CMake package links the distribution's
# compiled library; without one, the header alone is used in header-only mode.
find_package(tomlplusplus CONFIG QUIET)
if(NOT TARGET tomlplusplus::tomlplusplus)
  find_path(PENSTOCK_TOMLPP_INCLUDE toml++/toml.h)
  if(NOT PENSTOCK_TOMLPP_INCLUDE)
    message(FATAL_ERROR "toml++ not found: install libtomlplusplus-dev (tools/setup.sh)")
  endif()
  add_library(tomlplusplus::tomlplusplus INTERFACE IMPORTED)
  set_target_properties(tomlplusplus::tomlplusplus PROPERTIES INTERFACE_INCLUDE_DIRECTORIES ${PENSTOCK_TOMLPP_INCLUDE}
                        INTERFACE_COMPILE_DEFINITIONS TOML_HEADER_ONLY=1)
endif()

# OpenBLAS: cblas.h may live under an openblas-pthread include folder (Ubuntu) or directly in /usr/include (Debian).
find_path(PENSTOCK_CBLAS_INCLUDE cblas.h
  PATHS /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas /usr/include/x86_64-linux-gnu
        /usr/include/aarch64-linux-gnu/openblas-pthread /usr/include
  NO_DEFAULT_PATH)
find_library(PENSTOCK_OPENBLAS_LIB NAMES openblas
  PATHS /usr/lib/x86_64-linux-gnu/openblas-pthread /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu/openblas-pthread)
if(NOT PENSTOCK_CBLAS_INCLUDE OR NOT PENSTOCK_OPENBLAS_LIB)
  message(FATAL_ERROR "OpenBLAS not found: install libopenblas-dev")
endif()
add_library(penstock_blas INTERFACE)
target_include_directories(penstock_blas SYSTEM INTERFACE ${PENSTOCK_CBLAS_INCLUDE})
target_link_libraries(penstock_blas INTERFACE ${PENSTOCK_OPENBLAS_LIB})
message(STATUS "Penstock: OpenBLAS ${PENSTOCK_OPENBLAS_LIB} (cblas.h in ${PENSTOCK_CBLAS_INCLUDE})")

if(PENSTOCK_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()

find_package(MPI COMPONENTS C QUIET)
if(MPI_C_FOUND)
  set(PENSTOCK_ENABLE_MPI 1)
  message(STATUS "Penstock: MPI found (${MPI_C_LIBRARIES})")
else()
  set(PENSTOCK_ENABLE_MPI 0)
  message(STATUS "Penstock: MPI not found; multi-rank CPU runs are disabled")
endif()

# CUDA: AUTO turns the backend on wherever nvcc is found.
set(PENSTOCK_ENABLE_CUDA 0)
if(NOT PENSTOCK_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(PENSTOCK_ENABLE_CUDA 1)
    message(STATUS "Penstock: CUDA backend ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, arch ${CMAKE_CUDA_ARCHITECTURES})")
  elseif(PENSTOCK_CUDA STREQUAL "ON")
    message(FATAL_ERROR "PENSTOCK_CUDA=ON but no CUDA compiler was found")
  else()
    message(STATUS "Penstock: no nvcc found; CUDA backend OFF")
  endif()
endif()

set(PENSTOCK_FIXTURES_DIR "${PROJECT_SOURCE_DIR}/../shared/fixtures" CACHE PATH "Reference fixtures")

# UCX (Debian libucx-dev) for disaggregated KV transfer (src/disagg): found through pkg-config; without it the
# disaggregation module builds without a transfer engine and says so at run time.
find_package(PkgConfig QUIET)
set(PENSTOCK_ENABLE_UCX 0)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(PENSTOCK_UCX QUIET IMPORTED_TARGET ucx)
endif()
if(PENSTOCK_UCX_FOUND AND EXISTS "${PENSTOCK_UCX_INCLUDEDIR}/ucp/api/ucp.h")
  set(PENSTOCK_ENABLE_UCX 1)
  message(STATUS "Penstock: UCX ${PENSTOCK_UCX_VERSION} found; disaggregated KV transfer ON")
else()
  message(STATUS "Penstock: UCX headers not found (libucx-dev); disaggregated KV transfer OFF")
endif()
