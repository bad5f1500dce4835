#include "wantrain/ckpt/directory.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <regex>

#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/util/reporter.hpp"

namespace wt::ckpt {
namespace fs = std::filesystem;
namespace {

const std::regex kComplete(R"(step-(\d{8,})\.h5)");
const std::regex kPartial(R"(step-(\d{8,})(\.zero-\d+-of-\d+)?\.h5\.tmp)");
const std::regex kShard(R"(step-(\d{8,})\.zero-\d+-of-\d+\.h5)");

// The ZeRO shard files of step `step` in `directory`.
std::vector<fs::path> shard_files_of(const std::string& directory, const std::string& step) {
  std::vector<fs::path> out;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(directory, error)) {
    std::smatch match;
    const auto name = entry.path().filename().string();
    if (std::regex_match(name, match, kShard) && match[1] == step) out.push_back(entry.path());
  }
  return out;
}

}  // namespace

std::string checkpoint_file_name(int64_t step) { return fmt::format("step-{:08d}.h5", step); }

std::vector<std::string> list_checkpoints(const std::string& directory) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(directory, error)) {
    const auto name = entry.path().filename().string();
    std::smatch match;
    if (std::regex_match(name, match, kComplete) && entry.is_regular_file())
      found.emplace_back(std::stoll(match[1]), entry.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& item : found) out.push_back(std::move(item.second));
  return out;
}

std::optional<std::string> linked_checkpoint(const std::string& directory, const std::string& link) {
  const fs::path path = fs::path(directory) / link;
  std::error_code error;
  if (!fs::is_symlink(fs::symlink_status(path, error))) return std::nullopt;
  const fs::path target = fs::read_symlink(path, error);
  // The writer names a checkpoint of the directory itself; any other target is not a run's link.
  if (error || !std::regex_match(target.string(), kComplete)) return std::nullopt;
  const fs::path resolved = fs::path(directory) / target;
  if (!fs::exists(resolved, error)) return std::nullopt;
  return resolved.string();
}

namespace {

// The checkpoint a run directory's `latest` names, checked: nullopt when the
// directory has neither `latest` nor checkpoints (a run not begun). What a
// copy or a stray file leaves is one line, never a silent fresh start (which
// would write over the run's checkpoints and metrics).
std::optional<std::string> latest_of_run(const std::string& directory) {
  const fs::path link = fs::path(directory) / "latest";
  std::error_code error;
  const auto status = fs::symlink_status(link, error);
  if (!fs::exists(status)) {
    // The writer links `latest` after renaming the file into place: a kill between leaves the newest complete
    // checkpoint unlinked (as does a copy that skipped links), and that is what `latest` would name.
    const auto found = list_checkpoints(directory);
    if (found.empty()) return std::nullopt;
    report_warning("{} has checkpoints but no 'latest' link: resuming from the newest, {}", directory, found.back());
    return found.back();
  }
  if (!fs::is_symlink(status))
    throw SettingError("resume", fmt::format("{} is not a link to a checkpoint (a copy that followed links, e.g. "
                                             "cp -L or rsync -L?): give the checkpoint file to resume from",
                                             link.string()));
  const fs::path target = fs::read_symlink(link, error);
  if (!std::regex_match(target.string(), kComplete))
    throw SettingError("resume", fmt::format("{} names {}: a run's 'latest' names one of its own checkpoints "
                                             "(step-NNNNNNNN.h5 beside it)",
                                             link.string(), target.string()));
  if (!fs::exists(fs::path(directory) / target, error))
    throw SettingError("resume", fmt::format("{} names {}, which does not exist", link.string(), target.string()));
  return (fs::path(directory) / target).string();
}

}  // namespace

std::optional<std::string> resolve_resume(const std::string& resume, const std::string& output_dir) {
  std::error_code error;
  if (resume == "auto") return latest_of_run(output_dir);
  if (fs::is_directory(resume, error)) {
    if (auto latest = latest_of_run(resume)) return latest;
    throw SettingError("resume", fmt::format("directory {} has no 'latest' checkpoint", resume));
  }
  if (!fs::exists(resume, error)) throw SettingError("resume", fmt::format("{} does not exist", resume));
  return resume;
}

void replace_link(const std::string& directory, const std::string& link, const std::string& target) {
  const fs::path final_path = fs::path(directory) / link;
  const fs::path temporary = fs::path(directory) / (link + ".tmp");
  std::error_code error;
  fs::remove(temporary, error);
  if (::symlink(target.c_str(), temporary.c_str()) != 0)
    throw Error(fmt::format("{}: cannot create link: {}", temporary.string(), std::strerror(errno)));
  if (::rename(temporary.c_str(), final_path.c_str()) != 0)
    throw Error(fmt::format("{}: cannot replace link: {}", final_path.string(), std::strerror(errno)));
  sync_directory(directory);
}

std::vector<std::string> prune(const std::string& directory, int keep) {
  if (keep <= 0) return {};  // --keep 0: keep all
  auto all = list_checkpoints(directory);
  std::vector<std::string> protect;
  for (const char* link : {"latest", "best"})
    if (auto target = linked_checkpoint(directory, link)) {
      std::error_code error;
      protect.push_back(fs::canonical(*target, error).string());
    }
  std::vector<std::string> removed;
  const int64_t excess = int64_t(all.size()) - keep;
  for (int64_t i = 0; i < excess; ++i) {
    std::error_code error;
    const auto canonical = fs::canonical(all[i], error).string();
    if (error || std::find(protect.begin(), protect.end(), canonical) != protect.end()) continue;
    if (!fs::remove(all[i], error)) continue;
    removed.push_back(all[i]);
    std::smatch match;
    const auto name = fs::path(all[i]).filename().string();
    if (std::regex_match(name, match, kComplete))
      for (const auto& shard : shard_files_of(directory, match[1])) fs::remove(shard, error);
  }
  return removed;
}

std::vector<std::string> remove_partial_writes(const std::string& directory) {
  std::vector<std::string> removed;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(directory, error)) {
    const auto name = entry.path().filename().string();
    std::smatch match;
    // A shard whose checkpoint was never completed (a write that failed or
    // died between the shards and the main file) is partial too.
    const bool orphan = std::regex_match(name, match, kShard) &&
                        !fs::exists(fs::path(directory) / fmt::format("step-{}.h5", match[1].str()));
    if (!orphan && !std::regex_match(name, kPartial)) continue;
    std::error_code remove_error;
    if (fs::remove_all(entry.path(), remove_error) > 0) removed.push_back(entry.path().string());
  }
  return removed;
}

DirectoryLock::DirectoryLock(const std::string& directory) {
  const std::string path = (fs::path(directory) / ".wantrain.lock").string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw SettingError("output_dir", fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    char holder[256] = {};
    const ssize_t n = ::pread(fd_, holder, sizeof holder - 1, 0);
    ::close(fd_);
    fd_ = -1;
    std::string who = n > 0 ? std::string(holder, size_t(n)) : std::string("unknown");
    while (!who.empty() && (who.back() == '\n' || who.back() == ' ')) who.pop_back();
    if (error == EWOULDBLOCK)
      throw SettingError("output_dir", fmt::format("{} is in use by another job ({}); give each job its own "
                                                   "output directory",
                                                   directory, who));
    throw SettingError("output_dir", fmt::format("cannot lock {}: {}", path, std::strerror(error)));
  }
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const std::string holder = fmt::format("host {} pid {}\n", host, ::getpid());
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, holder.data(), holder.size(), 0) != ssize_t(holder.size())) {
    const int error = errno;
    ::close(fd_);  // the destructor does not run for a constructor that throws
    fd_ = -1;
    throw SettingError("output_dir", fmt::format("cannot write {}: {}", path, std::strerror(error)));
  }
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

}  // namespace wt::ckpt
