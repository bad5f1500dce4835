#include "wantrain/io/h5_check.hpp"

#include <hdf5.h>

#include <string>

namespace wt::io::detail {

namespace {
herr_t keep_innermost(unsigned n, const H5E_error2_t* err, void* out) {
  if (n == 0 && err->desc) {
    std::string desc = err->desc;  // HDF5's I/O errors span lines: an error is one line here
    for (auto& c : desc)
      if (c == '\n' || c == '\r') c = ' ';
    *static_cast<std::string*>(out) = desc;
  }
  return 0;
}
}  // namespace

void throw_h5_failure(const char* call, const char* file, int line) {
  std::string reason;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, keep_innermost, &reason);
  H5Eclear2(H5E_DEFAULT);
  ::wt::detail::throw_library_failure("HDF5", call, reason.empty() ? "no detail on HDF5's error stack" : reason, file,
                                      line);
}

}  // namespace wt::io::detail
