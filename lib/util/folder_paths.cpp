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

std::string outside_folder_reason(const std::string& folder, const std::string& name, const std::string& within) {
  fs::path base = fs::path(folder.empty() ? "." : folder).lexically_normal();
  if (!base.has_filename() && base.has_parent_path()) base = base.parent_path();  // "dir/model/"
  if (fs::path(name).is_absolute()) return fmt::format("{} is an absolute path, not a name inside {}", name, folder);
  if (!inside((base / name).lexically_normal(), base)) return fmt::format("{} leads out of {}", name, base.string());
  const fs::path root = listing_root(within.empty() ? base.string() : within);
  const fs::path target = resolved(base / name);
  if (inside(target, root)) return {};
  // A link into a hub cache's blob store: a downloaded model's own file.
  const fs::path store = target.parent_path();
  if (store.filename() == "blobs" && store.parent_path().filename().string().rfind("models--", 0) == 0) return {};
  return fmt::format("{} resolves to {}, outside {}", name, target.string(), root.string());
}

}  // namespace wt
