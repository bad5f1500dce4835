#include "plausibility.hpp"

#include <fmt/format.h>

namespace wt::bench {

void Plausibility::enough_rounds(int rounds) {
  if (rounds < kMinRounds)
    notes_.push_back(
        fmt::format("{} round{}: a median needs --rounds {} or more", rounds, rounds == 1 ? "" : "s", kMinRounds));
}

void Plausibility::resolvable(const std::string& what, double seconds) {
  if (seconds < kMinResolvableSeconds)
    notes_.push_back(fmt::format("{} took {:.1f} ms, below the {:.0f} ms the clock and page cache resolve", what,
                                 seconds * 1e3, kMinResolvableSeconds * 1e3));
}

void Plausibility::within(const std::string& what, double value, double low, double high, const std::string& why) {
  if (!(value >= low && value <= high))
    notes_.push_back(fmt::format("{} {:.3g} is outside {:.3g}..{:.3g} ({})", what, value, low, high, why));
}

std::string Plausibility::row_suffix() const {
  if (notes_.empty()) return {};
  std::string out = "  UNRELIABLE: ";
  for (size_t i = 0; i < notes_.size(); ++i) out += (i ? "; " : "") + notes_[i];
  return out;
}

}  // namespace wt::bench
