#include "wantrain/util/files.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "wantrain/util/error.hpp"

namespace wt {
namespace {

void fsync_path(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("{}: cannot open to sync: {}", path, std::strerror(errno)));
  const int rc = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (rc != 0) throw Error(fmt::format("{}: fsync failed: {}", path, std::strerror(error)));
}

}  // namespace

void sync_file(const std::string& path) {
  fsync_path(path, O_RDONLY);
  sync_directory(std::filesystem::path(path).parent_path().string());
}

void sync_directory(const std::string& directory) {
  fsync_path(directory.empty() ? "." : directory, O_RDONLY | O_DIRECTORY);
}

void write_file_durably(const std::string& path, const std::string& text, const std::string& temporary) {
  const std::string tmp = temporary.empty() ? path + ".tmp" : temporary;
  try {
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out << text;
      out.close();
      if (!out) throw Error(fmt::format("{}: cannot write (disk full or no permission?)", tmp));
    }
    fsync_path(tmp, O_RDONLY);
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      throw Error(fmt::format("{}: cannot rename {} into place: {}", path, tmp, std::strerror(errno)));
    sync_directory(std::filesystem::path(path).parent_path().string());
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
}

std::string unreadable_file_reason(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (status.type() == std::filesystem::file_type::not_found) return "no such file";
  if (status.type() == std::filesystem::file_type::directory) return "is a directory, not a file";
  if (::access(path.c_str(), R_OK) != 0) return fmt::format("cannot be read: {}", std::strerror(errno));
  return {};
}

std::string read_whole_file(const std::string& path) {
  if (const auto reason = unreadable_file_reason(path); !reason.empty())
    throw UsageError(fmt::format("{}: {}", path, reason));
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw UsageError(fmt::format("{}: cannot be read", path));
  return text.str();
}

}  // namespace wt
