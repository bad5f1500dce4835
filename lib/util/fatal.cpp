#include "wantrain/util/fatal.hpp"

#include <errno.h>
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "wantrain/util/process.hpp"

namespace wt {

void print_error_line(std::string_view message) {
  // One write of the whole line, so lines of different ranks do not interleave.
  const std::string line = fmt::format("{} [{}]: error: {}\n", program_invocation_short_name, process_label(), message);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

namespace {

std::mutex g_hook_mutex;
std::function<void(std::string_view)> g_hook;
std::atomic<bool> g_hook_ran{false};

}  // namespace

FatalHookScope::FatalHookScope(std::function<void(std::string_view message)> hook) {
  const std::lock_guard<std::mutex> lock(g_hook_mutex);
  g_hook = std::move(hook);
}

FatalHookScope::~FatalHookScope() {
  const std::lock_guard<std::mutex> lock(g_hook_mutex);
  g_hook = nullptr;
}

void run_fatal_hook(std::string_view message) {
  if (g_hook_ran.exchange(true)) return;
  std::function<void(std::string_view)> hook;
  {
    const std::lock_guard<std::mutex> lock(g_hook_mutex);
    hook = g_hook;
  }
  if (!hook) return;
  // On a thread of its own, waited for a bounded time: the job ends anyway.
  auto done = std::make_shared<std::promise<void>>();
  auto finished = done->get_future();
  std::thread([hook, text = std::string(message), done] {
    try {
      hook(text);
    } catch (...) {
    }
    done->set_value();
  }).detach();
  finished.wait_for(std::chrono::seconds(5));
}

}  // namespace wt
