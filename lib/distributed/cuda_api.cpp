#include "wantrain/distributed/cuda_api.hpp"

#include <dlfcn.h>

#include "wantrain/distributed/cuda_libraries.hpp"
#include "wantrain/config.hpp"
#include "wantrain/util/error.hpp"

// The name a header macro makes of `name` (a versioned one), as a string.
#define WANTRAIN_CUDA_API_NAME(name) WANTRAIN_CUDA_API_STRING(name)
#define WANTRAIN_CUDA_API_STRING(name) #name

namespace wt::distributed {

namespace {

struct Resolved {
  CudaApi api;
  std::string why_not;  // empty when every function resolved
};

Resolved resolve() {
  Resolved out;
  const auto& libraries = load_cuda_libraries();
  if (!libraries.loaded) {
    out.why_not = "LibTorch's CUDA backend is " + libraries.why_not;
    return out;
  }
  std::string error;
  void* cudart = loaded_library(WANTRAIN_CUDART_SONAME, error);
  void* nccl = cudart != nullptr ? loaded_library(WANTRAIN_NCCL_SONAME, error) : nullptr;
  if (cudart == nullptr || nccl == nullptr) {
    out.why_not = error;
    return out;
  }
  const auto find = [&](void* library, const char* name, auto& pointer) {
    pointer = reinterpret_cast<std::remove_reference_t<decltype(pointer)>>(dlsym(library, name));
    if (pointer == nullptr && out.why_not.empty()) out.why_not = std::string(name) + " is not in the loaded libraries";
  };
#define WANTRAIN_CUDA_API_FIND_CUDART(name) find(cudart, WANTRAIN_CUDA_API_NAME(name), out.api.name);
#define WANTRAIN_CUDA_API_FIND_NCCL(name) find(nccl, WANTRAIN_CUDA_API_NAME(name), out.api.name);
  WANTRAIN_CUDART_FUNCTIONS(WANTRAIN_CUDA_API_FIND_CUDART)
  WANTRAIN_NCCL_FUNCTIONS(WANTRAIN_CUDA_API_FIND_NCCL)
  find(cudart, "cudaMalloc", out.api.cudaMalloc);
#undef WANTRAIN_CUDA_API_FIND_CUDART
#undef WANTRAIN_CUDA_API_FIND_NCCL
  return out;
}

}  // namespace

const CudaApi* cuda_api(std::string* why_not) {
  static const Resolved resolved = resolve();
  if (!resolved.why_not.empty()) {
    if (why_not != nullptr) *why_not = resolved.why_not;
    return nullptr;
  }
  return &resolved.api;
}

const CudaApi& cu() {
  std::string why_not;
  const CudaApi* api = cuda_api(&why_not);
  if (api == nullptr) throw Error("the CUDA runtime and NCCL cannot be called: " + why_not);
  return *api;
}

}  // namespace wt::distributed
