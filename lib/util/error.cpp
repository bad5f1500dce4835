#include "wantrain/util/error.hpp"

#include <fmt/format.h>

#include <cstring>

namespace wt {

namespace {
// Written once by a tool's main before any other thread exists; read-only after.
std::map<std::string, std::string>& option_names() {
  static std::map<std::string, std::string> names;
  return names;
}
std::string describe_settings(const std::vector<std::string>& settings, const std::string& message) {
  std::string named;
  bool mapped = true;
  for (const auto& setting : settings) mapped = mapped && option_names().count(setting);
  for (const auto& setting : settings)
    named += (named.empty() ? "" : ", ") + (mapped ? "--" + option_names().at(setting) : setting);
  if (!mapped) return fmt::format("{}: {}", named, message);
  return fmt::format("option{} {}: {}", settings.size() > 1 ? "s" : "", named, message);
}
}  // namespace

SettingError::SettingError(const std::string& setting, const std::string& message)
    : SettingError(SettingNames{setting}, message) {}

SettingError::SettingError(const SettingNames& settings, const std::string& message)
    : UsageError(describe_settings(settings, message)),
      setting_(settings.empty() ? std::string() : settings.front()),
      message_(message) {}

std::string setting_reference(const std::string& setting) {
  const auto it = option_names().find(setting);
  return it == option_names().end() ? fmt::format("the {} setting", setting) : "--" + it->second;
}

std::string option_name(const std::string& setting) {
  const auto it = option_names().find(setting);
  return it == option_names().end() ? setting : it->second;
}

void set_option_names(std::map<std::string, std::string> setting_to_option) {
  option_names() = std::move(setting_to_option);
}

}  // namespace wt

namespace wt::detail {

namespace {
const char* base_name(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}
}  // namespace

void throw_library_failure(const char* library, const char* call, const std::string& reason, const char* file,
                           int line) {
  // The function's name only: the C++ expression around its arguments means nothing to a user.
  const std::string call_text = call;
  const std::string function = call_text.substr(0, call_text.find('('));
  throw Error(fmt::format("{} {} failed: {} ({}:{})", library, function, reason, base_name(file), line));
}

}  // namespace wt::detail
