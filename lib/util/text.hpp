// Small text helpers shared by tools' option handling and reports.
#pragma once

#include <string>
#include <vector>

namespace wt {

// "a,b,,c" -> {"a", "b", "", "c"}; "" -> {}.
std::vector<std::string> split_list(const std::string& text, char separator = ',');

// Seconds as "M:SS", or "H:MM:SS" from an hour on (rounded to the second).
std::string format_duration(double seconds);

}  // namespace wt
