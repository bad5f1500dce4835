#include "util/progress.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace wt {

Progress::Progress(std::string label, int64_t total)
    : label_(std::move(label)), total_(total), enabled_(isatty(STDERR_FILENO) == 1) {}

Progress::~Progress() {
  if (!enabled_) return;
  done_ = total_;
  draw();
  std::fputc('\n', stderr);
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
  std::fprintf(stderr, "\r%s [%s%s] %lld/%lld", label_.c_str(), std::string(filled, '#').c_str(),
               std::string(kWidth - filled, ' ').c_str(), static_cast<long long>(done_),
               static_cast<long long>(total_));
  std::fflush(stderr);
}

}  // namespace wt
