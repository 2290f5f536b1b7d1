# Optional cuDNN for the CUDA backend's attention (the SDPA path of kernels/cuda/attention_cudnn.cc; docs/design/
# kernels.md). Included by src/kernels/cuda/CMakeLists.txt after find_package(CUDAToolkit).
#   PENSTOCK_CUDNN                   AUTO (default: on when the frontend header, cudnn.h and libcudnn are all found),
#                                    ON (fail when missing) or OFF
#   PENSTOCK_CUDNN_ROOT              a directory with include/cudnn.h and lib/libcudnn.so[.9] (e.g. the nvidia-cudnn
#                                    pip package's nvidia/cudnn); default search: the CUDA toolkit's directories
#   PENSTOCK_CUDNN_FRONTEND_INCLUDE  the directory holding cudnn_frontend.h (header-only; pip nvidia-cudnn-frontend's
#                                    include/ or a clone's include/); default search: the toolkit's and system includes
# Sets PENSTOCK_ENABLE_CUDNN (0/1), PENSTOCK_CUDNN_INCLUDE_DIRS and PENSTOCK_CUDNN_LIBRARY.
set(PENSTOCK_CUDNN "AUTO" CACHE STRING "cuDNN SDPA path for CUDA attention: AUTO, ON or OFF")
set(PENSTOCK_CUDNN_ROOT "" CACHE PATH "cuDNN directory with include/ and lib/ (optional hint)")
set(PENSTOCK_CUDNN_FRONTEND_INCLUDE "" CACHE PATH "Directory holding cudnn_frontend.h (optional hint)")

set(PENSTOCK_ENABLE_CUDNN 0)
set(PENSTOCK_CUDNN_INCLUDE_DIRS "")
set(PENSTOCK_CUDNN_LIBRARY "")
if(NOT PENSTOCK_CUDNN STREQUAL "OFF")
  find_path(_fe_dir cudnn_frontend.h HINTS ${PENSTOCK_CUDNN_FRONTEND_INCLUDE} ${CUDAToolkit_INCLUDE_DIRS} NO_CACHE)
  if(PENSTOCK_CUDNN_ROOT)  # the hint alone: a toolkit's own cuDNN of another version must not mix in
    find_path(_cudnn_inc cudnn.h PATHS ${PENSTOCK_CUDNN_ROOT} PATH_SUFFIXES include NO_DEFAULT_PATH NO_CACHE)
    find_library(_cudnn_lib NAMES cudnn libcudnn.so.9 PATHS ${PENSTOCK_CUDNN_ROOT} PATH_SUFFIXES lib lib64
                 NO_DEFAULT_PATH NO_CACHE)
  else()
    find_path(_cudnn_inc cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} NO_CACHE)
    find_library(_cudnn_lib NAMES cudnn libcudnn.so.9 HINTS ${CUDAToolkit_LIBRARY_DIR} NO_CACHE)
  endif()
  set(_missing "")
  foreach(v _fe_dir _cudnn_inc _cudnn_lib)
    if(NOT ${v})
      list(APPEND _missing ${v})
    endif()
  endforeach()
  if(NOT _missing)
    file(STRINGS "${_cudnn_inc}/cudnn_version.h" _major REGEX "^#define CUDNN_MAJOR [0-9]+")
    string(REGEX REPLACE ".* ([0-9]+)$" "\\1" _major "${_major}")
    if(NOT _major OR _major LESS 9)
      list(APPEND _missing "cuDNN >= 9 (found major '${_major}')")
    endif()
  endif()
  if(NOT _missing)
    set(PENSTOCK_ENABLE_CUDNN 1)
    set(PENSTOCK_CUDNN_INCLUDE_DIRS ${_cudnn_inc} ${_fe_dir})
    set(PENSTOCK_CUDNN_LIBRARY ${_cudnn_lib})
    message(STATUS "Penstock: cuDNN SDPA path ON (cudnn.h in ${_cudnn_inc}, ${_cudnn_lib}, frontend in ${_fe_dir})")
  elseif(PENSTOCK_CUDNN STREQUAL "ON")
    message(FATAL_ERROR "PENSTOCK_CUDNN=ON but not found: ${_missing} (hints: PENSTOCK_CUDNN_ROOT, "
                        "PENSTOCK_CUDNN_FRONTEND_INCLUDE)")
  else()
    message(STATUS "Penstock: cuDNN SDPA path OFF (not found: ${_missing}); attention uses the CUDA-core kernel")
  endif()
endif()
