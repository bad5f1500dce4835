#include "wantrain/app/version.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <mpi.h>

#include "wantrain/distributed/cuda_libraries.hpp"
#include "wantrain/distributed/nccl_comm.hpp"
#include "wantrain/config.hpp"

namespace wt::app {

namespace {

// Which malloc this process runs on, by what `malloc` resolves to: TCMalloc
// (linked into the apps, WANTRAIN_MALLOC, or preloaded) defines it as an
// alias of tc_malloc; jemalloc brings mallocx; otherwise glibc's.
const char* malloc_name() {
  void* const in_use = dlsym(RTLD_DEFAULT, "malloc");
  if (in_use != nullptr && in_use == dlsym(RTLD_DEFAULT, "tc_malloc")) return "TCMalloc";
  if (dlsym(RTLD_DEFAULT, "mallocx") != nullptr) return "jemalloc";
  return "glibc malloc";
}

}  // namespace

std::string version_text(const std::string& program) {
  char mpi[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(mpi, &length);
  std::string mpi_name(mpi, length);
  mpi_name = mpi_name.substr(0, mpi_name.find_first_of(",\n"));
  // A CUDA LibTorch says whether its CUDA backend is in this process (loaded
  // only where a CUDA driver is: cuda_libraries.hpp).
  const auto& cuda = distributed::load_cuda_libraries();
  const std::string torch_cuda = WANTRAIN_TORCH_HAS_CUDA
                                     ? fmt::format("{}, {}", WANTRAIN_TORCH_CUDA, cuda.loaded ? "loaded" : cuda.why_not)
                                     : std::string(WANTRAIN_TORCH_CUDA);
  return fmt::format(
      "{} {} (git {})\n  LibTorch {} ({}), {}, HDF5 {}, {}, {}\n", program, WANTRAIN_VERSION, git_commit(),
      WANTRAIN_TORCH_VERSION, torch_cuda, mpi_name, WANTRAIN_HDF5_VERSION,
      distributed::nccl_built() ? fmt::format("NCCL {}", WANTRAIN_NCCL_VERSION) : std::string("without NCCL"),
      malloc_name());
}

std::string help_or_version(OptionSet::Outcome outcome, const OptionSet& options) {
  return outcome == OptionSet::Outcome::Version ? version_text(options.program()) : options.help_text();
}

}  // namespace wt::app
