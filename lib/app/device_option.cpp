#include "wantrain/app/device_option.hpp"

#include <fmt/format.h>

#include "wantrain/util/error.hpp"

namespace wt::app {

distributed::DeviceRequest parse_device(const std::string& text, const char* option) {
  using Kind = distributed::DeviceRequest::Kind;
  if (text == "auto") return {Kind::Auto, 0};
  if (text == "cpu") return {Kind::Cpu, 0};
  if (text == "cuda") return {Kind::Cuda, 0};
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5 && text.size() < 9 &&
      text.find_first_not_of("0123456789", 5) == std::string::npos)
    return {Kind::Cuda, std::stoi(text.substr(5))};
  throw UsageError(fmt::format("option --{}: '{}' is not one of auto|cpu|cuda|cuda:N", option, text));
}

}  // namespace wt::app
