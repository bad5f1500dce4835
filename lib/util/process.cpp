#include "wantrain/util/process.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <atomic>

namespace wt {

namespace {
// rank and size packed in one word, so that any thread reads a consistent
// pair (error lines come from watchdog and worker threads too); -1: unset.
std::atomic<int64_t> g_rank_and_size{-1};
}  // namespace

std::string host_name() {
  std::array<char, 256> buf{};
  if (gethostname(buf.data(), buf.size() - 1) != 0) return "unknown-host";
  return buf.data();
}

void set_process_rank(int rank, int size) { g_rank_and_size = (int64_t(rank) << 32) | uint32_t(size); }

void clear_process_rank() { g_rank_and_size = -1; }

std::string process_label() {
  const int64_t packed = g_rank_and_size.load();
  if (packed < 0) return host_name();
  return fmt::format("rank {}/{} on {}", int(packed >> 32), int(uint32_t(packed)), host_name());
}

}  // namespace wt
