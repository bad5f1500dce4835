#include "wantrain/distributed/cuda_libraries.hpp"

#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <filesystem>

#include "wantrain/config.hpp"

namespace wt::distributed {

namespace {

std::string dl_error() {
  const char* error = dlerror();
  return error != nullptr ? error : "unknown error";
}

// Whether the CUDA driver's library is installed: without it, CUDA cannot run.
bool cuda_driver_installed() {
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (driver == nullptr) return false;
  dlclose(driver);
  return true;
}

// libtorch_cuda beside the libtorch_cpu this process runs (the torch wheel
// keeps them in one directory); by its name alone (the programs' RUNPATH)
// when that is not found.
std::string torch_cuda_path() {
  std::string directory;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        const std::filesystem::path name(info->dlpi_name != nullptr ? info->dlpi_name : "");
        if (name.filename() != "libtorch_cpu.so") return 0;
        *static_cast<std::string*>(out) = name.parent_path().string();
        return 1;
      },
      &directory);
  return directory.empty() ? "libtorch_cuda.so" : directory + "/libtorch_cuda.so";
}

CudaLibraries load() {
  CudaLibraries out;
  const char* setting = std::getenv("WANTRAIN_CUDA");
  const std::string wanted = setting != nullptr && *setting != '\0' ? setting : "auto";
  if (wanted != "auto" && wanted != "on" && wanted != "off") {
    out.setting = wanted;
    out.why_not = "WANTRAIN_CUDA='" + wanted + "' is not one of auto, on, off";
    return out;
  }
  if (!WANTRAIN_TORCH_HAS_CUDA) {
    out.why_not = "this LibTorch has no CUDA support";
    return out;
  }
  if (wanted == "off") {
    out.why_not = "not loaded: WANTRAIN_CUDA=off";
    return out;
  }
  if (wanted == "auto" && !cuda_driver_installed()) {
    out.why_not = "not loaded: this machine has no CUDA driver";
    return out;
  }
  out.wanted = true;
  const std::string path = torch_cuda_path();
  if (dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    out.why_not = "not loaded: " + dl_error();
    return out;
  }
  out.loaded = true;
  return out;
}

}  // namespace

const CudaLibraries& load_cuda_libraries() {
  static const CudaLibraries libraries = load();
  return libraries;
}

bool torch_has_cuda() { return WANTRAIN_TORCH_HAS_CUDA; }

void* loaded_library(const char* soname, std::string& error) {
  void* handle = dlopen(soname, RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) handle = dlopen(soname, RTLD_NOW | RTLD_GLOBAL);
  if (handle == nullptr) error = dl_error();
  return handle;
}

}  // namespace wt::distributed
