// The one format of a fatal error line (distributed/abort.hpp ends the job
// after printing it).
#pragma once

#include <string_view>

namespace wt {

// Writes "<program> [rank r/n on host]: error: <message>" to stderr as one line.
void print_error_line(std::string_view message);

}  // namespace wt
