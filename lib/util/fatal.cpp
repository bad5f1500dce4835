#include "wantrain/util/fatal.hpp"

#include <errno.h>
#include <fmt/format.h>

#include <cstdio>

#include "wantrain/util/process.hpp"

namespace wt {

void print_error_line(std::string_view message) {
  // One write of the whole line, so lines of different ranks do not interleave.
  const std::string line = fmt::format("{} [{}]: error: {}\n", program_invocation_short_name, process_label(), message);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace wt
