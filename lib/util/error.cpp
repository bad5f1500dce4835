#include "util/error.hpp"

#include <fmt/format.h>
#include <hdf5.h>
#include <mpi.h>

#include <cstring>

#include "util/process.hpp"

namespace wt::detail {

namespace {
const char* base_name(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}
}  // namespace

void throw_library_failure(const char* library, const char* call, const std::string& reason, const char* file,
                           int line) {
  throw Error(
      fmt::format("{} call {} failed: {} ({}:{}, {})", library, call, reason, base_name(file), line, process_label()));
}

void throw_mpi_failure(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  // Checked by hand, not with assert: the message must exist in release builds.
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) std::snprintf(text, sizeof text, "MPI error %d", code);
  throw_library_failure("MPI", call, text, file, line);
}

namespace {
herr_t keep_innermost(unsigned n, const H5E_error2_t* err, void* out) {
  if (n == 0 && err->desc) *static_cast<std::string*>(out) = err->desc;
  return 0;
}
}  // namespace

void throw_h5_failure(const char* call, const char* file, int line) {
  std::string reason;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, keep_innermost, &reason);
  H5Eclear2(H5E_DEFAULT);
  throw_library_failure("HDF5", call, reason.empty() ? "no detail on HDF5's error stack" : reason, file, line);
}

}  // namespace wt::detail
