// What a benchmark row must not state as a figure: an interval too short for
// the clock and the page cache to resolve, a median of too few rounds, or a
// ratio outside what the measured thing can physically reach. Each broken
// rule becomes a note printed on the row (and in --json); with --strict any
// note makes the benchmark exit 1.
#pragma once

#include <string>
#include <vector>

namespace wt::bench {

// The shortest interval taken as a measurement: well above steady_clock's
// resolution and the jitter of a page-cache copy on a busy core.
constexpr double kMinResolvableSeconds = 0.02;
// The fewest rounds whose median is reported as a figure.
constexpr int kMinRounds = 3;

class Plausibility {
 public:
  // Notes unless `rounds` >= kMinRounds.
  void enough_rounds(int rounds);
  // Notes when `what` took less than kMinResolvableSeconds.
  void resolvable(const std::string& what, double seconds);
  // Notes when `value` (named `what`) lies outside [low, high]; `why` says
  // what bounds it.
  void within(const std::string& what, double value, double low, double high, const std::string& why);

  bool ok() const { return notes_.empty(); }
  const std::vector<std::string>& notes() const { return notes_; }
  // "" when ok, else "  UNRELIABLE: note; note" to append to a table row.
  std::string row_suffix() const;

 private:
  std::vector<std::string> notes_;
};

}  // namespace wt::bench
