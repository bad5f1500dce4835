// LibTorch's CUDA backend, loaded at run time where it can be used.
//
// The programs link LibTorch's CPU library alone. On a machine with a CUDA
// driver, load_cuda_libraries() loads libtorch_cuda into the process (dlopen,
// global symbols), which brings c10_cuda, cuBLAS, cuDNN and NCCL (the CUDA
// runtime is libtorch_cpu's own dependency), and registers LibTorch's CUDA kernels, allocator and device hooks, as
// linking it would have. Without a driver nothing is loaded: CUDA could not
// run there anyway, and every process start is 0.1 CPU-s shorter (those
// libraries' relocations and static initialisation; docs/development.md,
// "Scheduling").
//
// Contract: call it before anything asks LibTorch about CUDA; World's
// constructor does, so every program that makes a World has it done before
// its first line. Idempotent and thread-safe; it never throws.
//
// WANTRAIN_CUDA in the environment: `auto` (or unset) loads where the driver
// (libcuda.so.1) is installed; `on` loads without one too (the backend then
// sees no device: the loading itself is what that shows); `off` never loads
// (a GPU node then runs as a CPU one).
#pragma once

#include <string>

namespace wt::distributed {

struct CudaLibraries {
  bool loaded = false;
  bool wanted = false;  // loading was asked for (a driver is installed, or WANTRAIN_CUDA=on)
  std::string why_not;  // when not loaded: in words, for --version and error lines
  std::string setting;  // a WANTRAIN_CUDA that is none of auto, on, off (World refuses it)
};

const CudaLibraries& load_cuda_libraries();

// Whether this LibTorch has a CUDA backend to load at all.
bool torch_has_cuda();

// The handle of a shared library that load_cuda_libraries() brought into
// the process (by soname, e.g. the CUDA runtime's), or, where it did not,
// that library opened now; nullptr with `error` set when neither works.
void* loaded_library(const char* soname, std::string& error);

}  // namespace wt::distributed
