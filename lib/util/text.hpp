// Small text helpers shared by tools' option handling and reports.
#pragma once

#include <string>
#include <vector>

namespace wt {

// "a,b,,c" -> {"a", "b", "", "c"}; "" -> {}.
std::vector<std::string> split_list(const std::string& text, char separator = ',');

// Seconds as "M:SS", or "H:MM:SS" from an hour on (rounded to the second).
std::string format_duration(double seconds);

// " (did you mean 'x'?)" naming the candidate closest to `word` by edit
// distance (insertions, deletions, substitutions, swaps of neighbours), when
// it is close enough to be a typo: at most a third of the word's length, and
// at least 1. Empty when nothing is that close.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates,
                         const std::string& quote = "'");

}  // namespace wt
