# Resolves WANTRAIN_WITH_NCCL (AUTO|ON|OFF) into WANTRAIN_NCCL_ENABLED.
# ON insists on the CUDA runtime and NCCL; AUTO uses them when both are found.
set(WANTRAIN_NCCL_ENABLED OFF)
string(TOUPPER "${WANTRAIN_WITH_NCCL}" _want_nccl)
if(NOT _want_nccl MATCHES "^(AUTO|ON|OFF|TRUE|FALSE|1|0|YES|NO)$")
  message(FATAL_ERROR "WANTRAIN_WITH_NCCL must be AUTO, ON or OFF, not '${WANTRAIN_WITH_NCCL}'")
endif()
if(NOT _want_nccl MATCHES "^(OFF|FALSE|0|NO)$")
  if(NOT CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
  # The NCCL that LibTorch itself loads: with the torch wheel, its
  # nvidia-nccl (its CUDA runtime: cmake/WantrainTorchWheel.cmake).
  if(NOT NCCL_ROOT AND WANTRAIN_TORCH_NVIDIA_DIR AND EXISTS "${WANTRAIN_TORCH_NVIDIA_DIR}/nccl")
    set(NCCL_ROOT "${WANTRAIN_TORCH_NVIDIA_DIR}/nccl")
  endif()
  # Debian 12's CMake 3.25.1 marks CUDA::nvToolsExt deprecated without
  # checking that the target exists, and CUDA 12 and later have no
  # nvToolsExt library: configuring stops with "set_property could not find
  # TARGET CUDA::nvToolsExt" (fixed in CMake 3.25.2). That branch is taken
  # only for projects requiring 3.25, so the search asks for less.
  if(CMAKE_VERSION VERSION_LESS 3.25.2)
    set(_wantrain_cmake_minimum "${CMAKE_MINIMUM_REQUIRED_VERSION}")
    set(CMAKE_MINIMUM_REQUIRED_VERSION 3.24)
  endif()
  find_package(CUDAToolkit QUIET)
  if(DEFINED _wantrain_cmake_minimum)
    set(CMAKE_MINIMUM_REQUIRED_VERSION "${_wantrain_cmake_minimum}")
    unset(_wantrain_cmake_minimum)
  endif()
  if(CUDAToolkit_FOUND)
    # 2.14: the non-blocking communicator (ncclCommInitRankConfig with
    # blocking = 0, ncclInProgress, ncclCommFinalize) that bounds the join by
    # --comm-timeout; ncclAvg and ncclBfloat16 are older.
    find_package(NCCL 2.14 QUIET)
    if(NOT NCCL_FOUND AND NCCL_VERSION)
      message(STATUS "NCCL ${NCCL_VERSION} at ${NCCL_INCLUDE_DIR} is older than the 2.14 wantrain needs")
    endif()
  endif()
  if(CUDAToolkit_FOUND AND NCCL_FOUND)
    set(WANTRAIN_NCCL_ENABLED ON)
  elseif(_want_nccl STREQUAL "AUTO")
    message(STATUS "NCCL backend off: CUDA runtime found: ${CUDAToolkit_FOUND}, NCCL found: ${NCCL_FOUND}")
  else()
    message(FATAL_ERROR "WANTRAIN_WITH_NCCL=ON but the CUDA runtime (found: ${CUDAToolkit_FOUND}) or NCCL "
                        "(found: ${NCCL_FOUND}) is missing; set CUDAToolkit_ROOT / NCCL_ROOT or use OFF")
  endif()
endif()

# The sonames by which the NCCL backend finds the CUDA runtime and NCCL among
# the libraries LibTorch's CUDA backend loaded (lib/distributed/cuda_api.cpp):
# those of the files found here, as the linker would have recorded them.
if(WANTRAIN_NCCL_ENABLED)
  get_target_property(_cudart_file CUDA::cudart IMPORTED_LOCATION)
  get_filename_component(_cudart_name "${_cudart_file}" NAME)
  if(_cudart_name MATCHES "^libcudart\\.so\\.[0-9]+$")
    set(WANTRAIN_CUDART_SONAME "${_cudart_name}")
  else()
    set(WANTRAIN_CUDART_SONAME "libcudart.so.${CUDAToolkit_VERSION_MAJOR}")
  endif()
  set(WANTRAIN_NCCL_SONAME "libnccl.so.${NCCL_MAJOR}")
endif()
