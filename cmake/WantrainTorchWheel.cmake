# LibTorch from the pinned torch wheel (scripts/torch-version), installed by
# scripts/install-torch.sh into a venv outside the clone. Its
# torch.utils.cmake_prefix_path is appended to CMAKE_PREFIX_PATH, so a LibTorch
# that the user names (CMAKE_PREFIX_PATH=/path/to/libtorch, or Torch_DIR) wins.
# Sets WANTRAIN_TORCH_PYTHON: that venv's python (torch, plus Debian's h5py,
# numpy, matplotlib), which runs the tests' PyTorch references.
# On a GPU machine with a torch of its own, the environment's
# WANTRAIN_TORCH_PYTHON=/path/to/python builds against that one instead.
file(STRINGS "${PROJECT_SOURCE_DIR}/scripts/torch-version" WANTRAIN_TORCH_PIN LIMIT_COUNT 1)
string(STRIP "${WANTRAIN_TORCH_PIN}" WANTRAIN_TORCH_PIN)
if(DEFINED ENV{WANTRAIN_TORCH_VENV} AND NOT "$ENV{WANTRAIN_TORCH_VENV}" STREQUAL "")
  set(_venv "$ENV{WANTRAIN_TORCH_VENV}")
elseif(DEFINED ENV{XDG_CACHE_HOME} AND NOT "$ENV{XDG_CACHE_HOME}" STREQUAL "")
  set(_venv "$ENV{XDG_CACHE_HOME}/wantrain/torch-${WANTRAIN_TORCH_PIN}")
else()
  set(_venv "$ENV{HOME}/.cache/wantrain/torch-${WANTRAIN_TORCH_PIN}")
endif()
set(WANTRAIN_TORCH_VENV "${_venv}" CACHE PATH "The torch wheel's venv (scripts/install-torch.sh)")

# The environment's WANTRAIN_TORCH_PYTHON names another python whose torch to
# build against (scripts/gpu-first-run.sh on a GPU machine's own torch).
set(_python "${WANTRAIN_TORCH_VENV}/bin/python")
if(DEFINED ENV{WANTRAIN_TORCH_PYTHON} AND NOT "$ENV{WANTRAIN_TORCH_PYTHON}" STREQUAL "")
  set(_python "$ENV{WANTRAIN_TORCH_PYTHON}")
endif()
set(WANTRAIN_TORCH_PYTHON "" CACHE FILEPATH "Python with torch for the tests' references" FORCE)
if(EXISTS "${_python}")
  execute_process(
    COMMAND "${_python}" -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
    OUTPUT_VARIABLE _wheel_prefix OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _wheel_status ERROR_QUIET)
  if(_wheel_status EQUAL 0 AND EXISTS "${_wheel_prefix}")
    list(APPEND CMAKE_PREFIX_PATH "${_wheel_prefix}")
    set(WANTRAIN_TORCH_PYTHON "${_python}" CACHE FILEPATH "Python with torch for the tests' references" FORCE)
    # The wheel's CUDA runtime, cuDNN and NCCL (nvidia-* wheels, beside torch):
    # the NCCL backend links the same ones LibTorch loads.
    get_filename_component(_site "${_wheel_prefix}/../../.." ABSOLUTE)
    set(WANTRAIN_TORCH_NVIDIA_DIR "${_site}/nvidia")
    # LibTorch's CMake links the CUDA runtime and NVRTC it finds in the
    # toolkit; point it at the wheel's own, so that the process loads one of
    # each (the toolkit still gives the headers and the compiler).
    foreach(_lib cudart nvrtc)
      file(GLOB _wheel_lib "${WANTRAIN_TORCH_NVIDIA_DIR}/cu*/lib/lib${_lib}.so.[0-9]*")
      list(FILTER _wheel_lib EXCLUDE REGEX "builtins|alt")
      if(_wheel_lib AND NOT CUDA_${_lib}_LIBRARY)
        list(GET _wheel_lib 0 _wheel_lib)
        set(CUDA_${_lib}_LIBRARY "${_wheel_lib}" CACHE FILEPATH "The torch wheel's lib${_lib}")
      endif()
    endforeach()
  endif()
endif()
# A build directory configured before the wheel (Debian's LibTorch 1.13 under
# /usr) moves to the wheel; a LibTorch of the user's own stays.
if(WANTRAIN_TORCH_PYTHON AND Torch_DIR MATCHES "^/usr/(share|lib)/")
  message(STATUS "LibTorch: the torch wheel's, in place of ${Torch_DIR}")
  unset(Torch_DIR CACHE)
endif()
if(NOT WANTRAIN_TORCH_PYTHON AND NOT Torch_DIR AND NOT CMAKE_PREFIX_PATH)
  message(FATAL_ERROR "No LibTorch: scripts/install-torch.sh installs the pinned torch wheel into "
                      "${WANTRAIN_TORCH_VENV}; or name your own with -DCMAKE_PREFIX_PATH=/path/to/libtorch")
endif()
