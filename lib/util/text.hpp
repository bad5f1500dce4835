// Small text helpers shared by tools' option handling.
#pragma once

#include <string>
#include <vector>

namespace wt {

// "a,b,,c" -> {"a", "b", "", "c"}; "" -> {}.
std::vector<std::string> split_list(const std::string& text, char separator = ',');

}  // namespace wt
