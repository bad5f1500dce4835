#include "wantrain/nn/parameter_units.hpp"

namespace wt::nn {

std::string parameter_unit(const std::string& name) {
  const std::string prefix = "blocks.";
  if (name.compare(0, 5, "head.") == 0) return "head";
  if (name.compare(0, prefix.size(), prefix) != 0) return {};
  const auto end = name.find('.', prefix.size());
  return name.substr(0, end);
}

bool root_unit(const std::string& unit) { return unit.empty() || unit == "head"; }

}  // namespace wt::nn
