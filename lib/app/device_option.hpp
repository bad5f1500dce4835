// The tools' --device option: auto|cpu|cuda|cuda:N, as the library's request.
#pragma once

#include <string>

#include "wantrain/distributed/device_placement.hpp"

namespace wt::app {

// UsageError naming `option` for any other text.
distributed::DeviceRequest parse_device(const std::string& text, const char* option = "device");

}  // namespace wt::app
