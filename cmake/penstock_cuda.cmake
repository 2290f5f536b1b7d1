# CUDA compile options shared by src/kernels/cuda, tests/kernels/cuda and bench/: included only when
# PENSTOCK_ENABLE_CUDA is 1 (after enable_language(CUDA)). penstock_cuda_options(target) gives a target's .cu files
# C++20, relaxed constexpr, line info, and host-code warnings as errors (nvcc's own warnings too).
include_guard(GLOBAL)

if(NOT CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90a)
endif()

set(PENSTOCK_CUDA_FLAGS
    --expt-relaxed-constexpr
    -lineinfo
    --Werror all-warnings
    "-Xcompiler=-Wall,-Wextra,-Werror,-Wno-unused-parameter")

function(penstock_cuda_options name)
  target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${PENSTOCK_CUDA_FLAGS}>)
  set_target_properties(${name} PROPERTIES CUDA_STANDARD 20 CUDA_STANDARD_REQUIRED ON)
endfunction()
