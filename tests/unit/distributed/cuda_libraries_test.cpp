// LibTorch's CUDA backend is loaded at run time, only where it can run
// (lib/distributed/cuda_libraries.hpp): on a machine without a CUDA driver a
// process holds none of the CUDA libraries, and where they are loaded (forced
// here with WANTRAIN_CUDA=on, as a driver would) LibTorch's CUDA backend is
// registered and every CUDA runtime and NCCL function the NCCL backend calls
// resolves.
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <link.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "wantrain/distributed/cuda_libraries.hpp"
#include "wantrain/distributed/nccl_comm.hpp"

namespace cuda_libraries_test {
namespace {

using wt::distributed::load_cuda_libraries;
using wt::distributed::torch_has_cuda;

// The file names of the shared objects in this process.
std::vector<std::string> loaded_objects() {
  std::vector<std::string> names;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        if (info->dlpi_name != nullptr) static_cast<std::vector<std::string>*>(out)->push_back(info->dlpi_name);
        return 0;
      },
      &names);
  return names;
}

bool holds(const std::string& library) {
  for (const auto& name : loaded_objects())
    if (name.find("/" + library) != std::string::npos) return true;
  return false;
}

bool cuda_driver_installed() {
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (driver != nullptr) dlclose(driver);
  return driver != nullptr;
}

// (The CUDA runtime is not among them: libtorch_cpu itself needs it.)
const char* const kCudaLibraries[] = {"libtorch_cuda.so", "libc10_cuda.so", "libnccl.so", "libcublas.so",
                                      "libcudnn.so"};

TEST(CudaLibraries, WithoutADriverNoneIsInTheProcess) {
  if (!torch_has_cuda()) GTEST_SKIP() << "this LibTorch has no CUDA backend to load";
  if (cuda_driver_installed()) GTEST_SKIP() << "this machine has a CUDA driver: the backend is loaded here";
  const char* setting = std::getenv("WANTRAIN_CUDA");
  if (setting != nullptr && std::string(setting) == "on") GTEST_SKIP() << "WANTRAIN_CUDA=on";
  // The test binary links as the programs do: nothing CUDA came with it.
  for (const char* library : kCudaLibraries) EXPECT_FALSE(holds(library)) << library << " is loaded";
  const auto& cuda = load_cuda_libraries();
  EXPECT_FALSE(cuda.loaded);
  EXPECT_FALSE(cuda.wanted);
  EXPECT_EQ(cuda.why_not, "not loaded: this machine has no CUDA driver");
  for (const char* library : kCudaLibraries) EXPECT_FALSE(holds(library)) << library << " is loaded";
  // No device, and nothing to warn about: a CPU node.
  EXPECT_EQ(wt::distributed::cuda_device_count(), 0);
  EXPECT_FALSE(c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA));
}

// Loads as a driver would have it, checks, and ends the process: 0 and
// "loaded" when all holds, else 1 and what did not.
[[noreturn]] void load_forced_and_exit() {
  setenv("WANTRAIN_CUDA", "on", 1);
  const auto& cuda = load_cuda_libraries();
  const auto fail = [](const std::string& what) {
    fprintf(stderr, "%s\n", what.c_str());
    std::exit(1);
  };
  if (!cuda.loaded || !cuda.wanted) fail("not loaded: " + cuda.why_not);
  for (const char* library : {"libtorch_cuda.so", "libc10_cuda.so", "libnccl.so", "libcublas.so"})
    if (!holds(library)) fail(std::string(library) + " is not in the process");
  // LibTorch's CUDA device interface, which streams and events go through.
  if (!c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA)) fail("no CUDA device guard registered");
  // LibTorch's CUDA hooks (torch::cuda::device_count() and the like): the
  // real ones, not the stub that answers before libtorch_cuda is loaded.
  try {
    if (at::detail::getCUDAHooks().versionCUDART() <= 0) fail("no CUDA runtime version from the CUDA hooks");
  } catch (const std::exception& e) {
    fail(std::string("the CUDA hooks are LibTorch's stub: ") + e.what());
  }
  if (wt::distributed::nccl_built()) {
    const std::string why_not = wt::distributed::nccl_unavailable_reason();
    if (!why_not.empty()) fail("the CUDA runtime and NCCL functions: " + why_not);
    // Without a driver the runtime answers, and says there is no device.
    if (!cuda_driver_installed() && wt::distributed::cuda_device_count() != 0) fail("a device without a driver");
  }
  fprintf(stderr, "loaded\n");
  std::exit(0);
}

// In a process of its own (the loading happens once per process).
TEST(CudaLibraries, LoadedTheBackendRegistersAndEveryFunctionResolves) {
  if (!torch_has_cuda()) GTEST_SKIP() << "this LibTorch has no CUDA backend to load";
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process, not a fork of this one
  EXPECT_EXIT(load_forced_and_exit(), ::testing::ExitedWithCode(0), "loaded");
}

TEST(CudaLibraries, AnUnknownSettingIsNamed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("WANTRAIN_CUDA", "yes", 1);
        const auto& cuda = load_cuda_libraries();
        fprintf(stderr, "%s; %s; %d\n", cuda.why_not.c_str(), cuda.setting.c_str(), int(cuda.loaded));
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "WANTRAIN_CUDA='yes' is not one of auto, on, off; yes; 0");
}

}  // namespace
}  // namespace cuda_libraries_test
