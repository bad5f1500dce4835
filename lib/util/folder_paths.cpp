#include "wantrain/util/folder_paths.hpp"

#include <fmt/format.h>

namespace wt {
namespace {

namespace fs = std::filesystem;

// `path` with `..` and symbolic links resolved as far as it exists.
fs::path resolved(const fs::path& path) {
  std::error_code error;
  const fs::path real = fs::weakly_canonical(path, error);
  return error ? fs::absolute(path).lexically_normal() : real;
}

bool inside(const fs::path& path, const fs::path& root) {
  const fs::path relative = path.lexically_relative(root);
  return !relative.empty() && *relative.begin() != "..";
}

}  // namespace

fs::path listing_root(const std::string& folder) {
  const fs::path real = resolved(folder.empty() ? "." : folder);
  for (fs::path p = real; p.has_relative_path(); p = p.parent_path())
    if (p.filename() == "snapshots" && p.parent_path().filename().string().rfind("models--", 0) == 0)
      return p.parent_path();
  return real;
}

std::string outside_folder_reason(const std::string& folder, const std::string& name) {
  if (fs::path(name).is_absolute()) return fmt::format("{} is an absolute path, not a name inside {}", name, folder);
  const fs::path root = listing_root(folder);
  const fs::path target = resolved(fs::path(folder.empty() ? "." : folder) / name);
  if (inside(target, root)) return {};
  return fmt::format("{} resolves to {}, outside {}", name, target.string(), root.string());
}

}  // namespace wt
