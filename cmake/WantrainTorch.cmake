# LibTorch as one interface target, and a shared precompiled <torch/torch.h>
# so that the 20 s it costs to parse is paid once per build, not per file.
add_library(wantrain_torch INTERFACE)
# LibTorch's CPU library alone: a CUDA LibTorch's CUDA backend (libtorch_cuda
# and with it c10_cuda, cuBLAS, cuDNN, NCCL) is loaded at
# run time where a CUDA driver is (lib/distributed/cuda_libraries.hpp), so a
# process on a CPU node does not pay its start-up (0.1 CPU-s each;
# docs/development.md, "Scheduling").
if(TARGET torch_cpu_library AND TARGET c10)
  target_link_libraries(wantrain_torch INTERFACE torch_cpu_library c10)
  target_include_directories(wantrain_torch INTERFACE ${TORCH_INCLUDE_DIRS})
else()
  target_link_libraries(wantrain_torch INTERFACE ${TORCH_LIBRARIES})
endif()
# The wheel's libtorch.so (built by GCC 13 against an older libstdc++) carries
# and exports its own copies of newer libstdc++ functions (std::filesystem,
# std::chrono's time zones). Found before the system's libstdc++, they would
# serve our calls too, and its remove_all crashes when called from GCC 12 code.
# libstdc++ first among every program's libraries keeps the system's in front.
target_link_options(wantrain_torch INTERFACE "LINKER:--push-state,--no-as-needed" "-lstdc++" "LINKER:--pop-state")
separate_arguments(_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
target_compile_options(wantrain_torch INTERFACE ${_torch_flags})
add_library(wantrain::torch ALIAS wantrain_torch)

# The torch wheel's include directory carries its own fmt (12) and protobuf
# (3.13) headers, which would shadow the system's that spdlog, fmt's library
# and protoc's generated code are built against. A directory of links to the
# system's, searched before LibTorch's, keeps them. (GCC ignores -isystem
# /usr/include itself, hence links in a directory of their own.)
set(_system_first "${CMAKE_BINARY_DIR}/system-first-include")
file(MAKE_DIRECTORY "${_system_first}")
# The directories of the fmt and protobuf that find_package found (the
# system's, or those of scripts/pack-deps.sh's archive).
get_target_property(_fmt_include fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
foreach(_pair "fmt;${_fmt_include}" "google;${Protobuf_INCLUDE_DIR}")
  list(GET _pair 0 _name)
  list(GET _pair 1 _dir)
  if(_dir AND EXISTS "${TORCH_INSTALL_PREFIX}/include/${_name}")
    file(CREATE_LINK "${_dir}/${_name}" "${_system_first}/${_name}" SYMBOLIC)
  endif()
endforeach()
target_include_directories(wantrain_torch SYSTEM BEFORE INTERFACE "${_system_first}")

# One LibTorch is tested (the wheel of scripts/torch-version); 2.4 brought
# the device-typed autocast calls that lib/nn/autocast.cpp makes.
if(Torch_VERSION VERSION_LESS 2.4)
  message(FATAL_ERROR "LibTorch ${Torch_VERSION} at ${Torch_DIR}: wantrain needs 2.4 or newer "
                      "(scripts/install-torch.sh installs the tested ${WANTRAIN_TORCH_PIN})")
endif()

# A CUDA build of LibTorch ships c10_cuda; a CPU build does not.
if(TARGET c10_cuda OR TORCH_CUDA_LIBRARIES)
  set(WANTRAIN_TORCH_HAS_CUDA ON)
  set(WANTRAIN_TORCH_CUDA "CUDA ${CUDA_VERSION}")
else()
  set(WANTRAIN_TORCH_HAS_CUDA OFF)
  set(WANTRAIN_TORCH_CUDA "CPU")
endif()

# The PCH is built once, in this object library, and reused by every target
# that includes <torch/torch.h>. Targets that reuse it must be compiled with
# the same flags (-D, -fPIC/-fPIE, -pedantic), so they all take them from here:
# every wantrain target links wantrain_warnings and none sets PIC.
add_library(wantrain_torch_pch OBJECT "${CMAKE_CURRENT_LIST_DIR}/torch_pch.cpp")
# Every library a consumer may link that adds compile definitions is linked
# here too, so that the PCH and its users agree on them (GCC drops a PCH whose
# -D flags differ; -Winvalid-pch says so).
target_link_libraries(wantrain_torch_pch PUBLIC wantrain_torch MPI::MPI_CXX spdlog::spdlog fmt::fmt
  nlohmann_json::nlohmann_json Boost::program_options wantrain_warnings)
target_compile_options(wantrain_torch_pch PUBLIC -Winvalid-pch)
target_precompile_headers(wantrain_torch_pch PRIVATE <torch/torch.h>)

# Every target that reuses the PCH is also compiled in unity batches.
function(wantrain_use_torch_pch target)
  target_precompile_headers(${target} REUSE_FROM wantrain_torch_pch)
  wantrain_unity_build(${target})
endfunction()
