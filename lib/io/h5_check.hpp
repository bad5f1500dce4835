// H5_CHECK(call): evaluates an HDF5 call once and throws wt::Error if it
// returned a negative value (herr_t or hid_t), with the innermost message of
// HDF5's error stack.
#pragma once

#include "wantrain/util/error.hpp"

namespace wt::io::detail {
[[noreturn]] void throw_h5_failure(const char* call, const char* file, int line);
}

#define H5_CHECK(call)                                                                \
  [&]() {                                                                             \
    const auto wt_h5_rc_ = (call);                                                    \
    if (wt_h5_rc_ < 0) ::wt::io::detail::throw_h5_failure(#call, __FILE__, __LINE__); \
    return wt_h5_rc_;                                                                 \
  }()
