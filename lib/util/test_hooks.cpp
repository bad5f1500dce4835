#include "wantrain/util/test_hooks.hpp"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "wantrain/util/error.hpp"
#include "wantrain/util/text.hpp"

namespace wt {
namespace {

// The number after "point:" in the environment variable `variable`, or 0.
double value_for(const char* variable, std::string_view point) {
  const char* spec = std::getenv(variable);
  if (!spec) return 0;
  for (const auto& item : split_list(spec)) {
    const auto colon = item.find(':');
    if (colon != std::string::npos && std::string_view(item).substr(0, colon) == point)
      return std::strtod(item.c_str() + colon + 1, nullptr);
  }
  return 0;
}

}  // namespace

void test_delay(std::string_view point) {
  if (const double seconds = value_for("WANTRAIN_TEST_DELAY", point); seconds > 0)
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

void test_failure(std::string_view point) {
  // Called per sample read: the environment is looked up once, and nothing
  // more is done when the variable is unset.
  static const bool armed = std::getenv("WANTRAIN_TEST_FAIL") != nullptr;
  if (!armed) return;
  static std::atomic<long> calls{0};  // one point per process is enough for the tests
  const double nth = value_for("WANTRAIN_TEST_FAIL", point);
  if (nth > 0 && ++calls == long(nth))
    throw Error(fmt::format("injected failure at {} (WANTRAIN_TEST_FAIL={}:{})", point, point, long(nth)));
}

}  // namespace wt
