#include "wantrain/util/progress.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace wt {

bool is_terminal(std::FILE* stream) {
  const int fd = fileno(stream);
  if (isatty(fd) != 1) return false;
  // mpirun hands each rank a pseudo-terminal even when its own output goes to
  // a file (a SLURM log): then what counts is where the parent writes.
  struct stat parent {};
  if (stat(("/proc/" + std::to_string(getppid()) + "/fd/" + std::to_string(fd)).c_str(), &parent) != 0)
    return true;  // cannot tell: trust isatty
  const unsigned major_number = major(parent.st_rdev);
  // Terminals: the console and serial ttys (4, 5), pseudo-terminal ends (136-143).
  return S_ISCHR(parent.st_mode) &&
         (major_number == 4 || major_number == 5 || (major_number >= 136 && major_number <= 143));
}

bool shows_live_output(std::FILE* stream) {
  return stream && std::getenv("SLURM_JOB_ID") == nullptr && is_terminal(stream);
}

Progress::Progress(std::string label, int64_t total, std::FILE* stream)
    : label_(std::move(label)), stream_(stream), total_(total), enabled_(shows_live_output(stream)) {}

void Progress::interrupt() {
  if (!enabled_) return;
  std::fputc('\n', stream_);
  std::fflush(stream_);
  last_draw_ = {};  // draw again at once
}

Progress::~Progress() {
  if (!enabled_) return;
  done_ = total_;
  draw();
  std::fputc('\n', stream_);
}

void Progress::advance(int64_t n) {
  done_ += n;
  const auto now = std::chrono::steady_clock::now();
  if (enabled_ && now - last_draw_ > std::chrono::milliseconds(100)) {
    last_draw_ = now;
    draw();
  }
}

void Progress::draw() {
  constexpr int kWidth = 30;
  const int filled = total_ > 0 ? static_cast<int>(kWidth * done_ / total_) : kWidth;
  // \033[K clears what a longer previous status left on the line.
  std::fprintf(stream_, "\r%s [%s%s] %lld/%lld %s\033[K", label_.c_str(), std::string(filled, '#').c_str(),
               std::string(kWidth - filled, ' ').c_str(), static_cast<long long>(done_), static_cast<long long>(total_),
               status_.c_str());
  std::fflush(stream_);
}

}  // namespace wt
