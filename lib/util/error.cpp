#include "wantrain/util/error.hpp"

#include <fmt/format.h>

#include <cstring>

#include "wantrain/util/process.hpp"

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

}  // namespace wt::detail
