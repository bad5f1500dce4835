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

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace wt {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class UsageError : public Error {
 public:
  using Error::Error;
};

// A usage error in one setting of a library's typed options, which the
// library names as it knows it ("shard_affinity"): libraries never name a
// tool's command-line options. A tool maps the settings it exposes to its
// option names once, at start-up (set_option_names), so that the line its
// user reads names the option: "option --shard-affinity: <message>".
// Unmapped: "<setting>: <message>". A message about several settings at
// once names them all (SettingNames{"frames", "size"}): "options --frames,
// --size: <message>".
using SettingNames = std::vector<std::string>;
class SettingError : public UsageError {
 public:
  SettingError(const std::string& setting, const std::string& message);
  SettingError(const SettingNames& settings, const std::string& message);
  const std::string& setting() const { return setting_; }  // the first
  const std::string& message() const { return message_; }

 private:
  std::string setting_, message_;
};

// Setting -> option name without dashes ({"shard_affinity", "shard-affinity"}).
// Called by a tool's main before any library code runs.
void set_option_names(std::map<std::string, std::string> setting_to_option);

// How a message refers to a setting: "--comm-timeout" where the tool maps
// it, "the comm_timeout setting" otherwise.
std::string setting_reference(const std::string& setting);

// The tool's name of a setting, without dashes ("comm-timeout"), or the
// setting itself where the tool does not map it: the key a record of the
// tool's options (run.json, a checkpoint) holds it under.
std::string option_name(const std::string& setting);

namespace detail {
[[noreturn]] void throw_library_failure(const char* library, const char* call, const std::string& reason,
                                        const char* file, int line);
}  // namespace detail

}  // namespace wt
