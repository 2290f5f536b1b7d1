# CUDA compile options shared by src/kernels/cuda, tests/kernels/cuda and bench/: included only when
# PENSTOCK_ENABLE_CUDA is 1 (after enable_language(CUDA)). penstock_cuda_options(target) gives a target's .cu files
# C++20, relaxed constexpr, line info, and host-code warnings as errors (nvcc's own warnings too).

# CMake < 3.26 (Debian 12 ships 3.25) does not know nvcc's -std=c++20; teach it, for this directory and below.
if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION OR CMAKE_CUDA20_STANDARD_COMPILE_OPTION STREQUAL "")
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_COMPILE_FEATURES cuda_std_20)
  list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
endif()

if(NOT CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90a)
endif()

set(PENSTOCK_CUDA_FLAGS
    --expt-relaxed-constexpr
    -lineinfo
    --Werror=all-warnings
    "-Xcompiler=-Wall,-Wextra,-Werror,-Wno-unused-parameter")

function(penstock_cuda_options name)
  target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${PENSTOCK_CUDA_FLAGS}>)
  set_target_properties(${name} PROPERTIES CUDA_STANDARD 20 CUDA_STANDARD_REQUIRED ON)
endfunction()
