// Error types, and the one formatter of a C library call that failed.
//
// Error       a runtime failure (I/O, communication, a rank died): exit 1.
// UsageError  the user's input is wrong (option, config, file found bad before
//             work starts): exit 2. Its message is one sentence a user can act
//             on, naming the option, file or field.
//
// The *_CHECK macros of each C library live beside the code that calls it
// (MPI_CHECK: distributed/mpi_check.hpp, H5_CHECK: io/h5_check.hpp, CUDA_CHECK
// and NCCL_CHECK: distributed/cuda_check.hpp); they all throw Error through
// throw_library_failure: the failed call, file:line, the rank and host, and
// the library's own description of the failure.
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
}  // namespace detail

}  // namespace wt
