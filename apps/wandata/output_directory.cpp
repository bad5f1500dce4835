#include "output_directory.hpp"

#include <fmt/format.h>

#include <filesystem>

#include "wantrain/util/error.hpp"

namespace wt {

void prepare_output_directory(const std::string& directory) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(directory, ec);
  if (ec) throw UsageError(fmt::format("option --out: cannot create {}: {}", directory, ec.message()));
  for (const auto& entry : fs::directory_iterator(directory, ec))
    if (entry.path().extension() == ".h5")
      throw UsageError(fmt::format("option --out: {} already holds shards ({}); choose an empty directory", directory,
                                   entry.path().filename().string()));
}

}  // namespace wt
