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
// The rank group's name ("high expert group"); set once, never freed, so a
// thread that read the pointer keeps a valid string.
std::atomic<const std::string*> g_group{nullptr};
}  // namespace

std::string host_name() {
  std::array<char, 256> buf{};
  if (gethostname(buf.data(), buf.size() - 1) != 0) return "unknown-host";
  return buf.data();
}

void set_process_rank(int rank, int size) { g_rank_and_size = (int64_t(rank) << 32) | uint32_t(size); }

void clear_process_rank() { g_rank_and_size = -1; }

void set_process_group(const std::string& group) { g_group = new std::string(group); }

std::string process_label() {
  const int64_t packed = g_rank_and_size.load();
  if (packed < 0) return host_name();
  const std::string* group = g_group.load();
  return fmt::format("rank {}/{}{} on {}", int(packed >> 32), int(uint32_t(packed)), group ? ", " + *group : "",
                     host_name());
}

}  // namespace wt
