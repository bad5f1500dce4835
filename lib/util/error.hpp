// Error types and the *_CHECK macros for the C libraries wantrain calls.
//
// Error       a runtime failure (I/O, communication, a rank died): exit 1.
// UsageError  the user's input is wrong (option, config, file found bad before
//             work starts): exit 2. Its message is one sentence a user can act
//             on, naming the option, file or field.
//
// MPI_CHECK(call), H5_CHECK(call) (and CUDA_CHECK / NCCL_CHECK in
// dist/cuda_check.hpp) throw Error with the failed call, file:line, the rank and
// host, and the library's own description of the failure.
#pragma once

#include <stdexcept>
#include <string>

namespace wt {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class UsageError : public Error {
 public:
  using Error::Error;
};

namespace detail {
[[noreturn]] void throw_library_failure(const char* library, const char* call, const std::string& reason,
                                        const char* file, int line);
[[noreturn]] void throw_mpi_failure(int code, const char* call, const char* file, int line);
[[noreturn]] void throw_h5_failure(const char* call, const char* file, int line);
}  // namespace detail

}  // namespace wt

// Evaluates an MPI call once; throws wt::Error unless it returned MPI_SUCCESS.
// Only meaningful on communicators whose error handler is MPI_ERRORS_RETURN.
#define MPI_CHECK(call)                                                                                    \
  do {                                                                                                     \
    const int wt_mpi_rc_ = (call);                                                                         \
    if (wt_mpi_rc_ != MPI_SUCCESS) ::wt::detail::throw_mpi_failure(wt_mpi_rc_, #call, __FILE__, __LINE__); \
  } while (0)

// Evaluates an HDF5 call once; throws wt::Error if it returned a negative
// value (herr_t or hid_t), with the innermost message of HDF5's error stack.
#define H5_CHECK(call)                                                            \
  [&]() {                                                                         \
    const auto wt_h5_rc_ = (call);                                                \
    if (wt_h5_rc_ < 0) ::wt::detail::throw_h5_failure(#call, __FILE__, __LINE__); \
    return wt_h5_rc_;                                                             \
  }()
