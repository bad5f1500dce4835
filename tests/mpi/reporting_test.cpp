// What a run reports reaches the Reporter the program installed (here one
// that captures), not a stream: the library can be embedded, and a test can
// read what a run said.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "mpi_test_env.hpp"
#include "wantrain/train/fit.hpp"
#include "wantrain/util/reporter.hpp"

namespace {

class Capture : public wt::Reporter {
 public:
  void report(wt::Severity severity, const std::string& message) override { lines.emplace_back(severity, message); }
  std::vector<std::pair<wt::Severity, std::string>> lines;
};

TEST(Reporting, StartRunReportsWhereTheRunStartsOnRankZeroOnly) {
  auto& world = test_world();
  std::string dir = std::filesystem::temp_directory_path() / "wantrain-reporting-test";
  if (world.is_root()) std::filesystem::remove_all(dir);
  world.barrier();

  wt::train::FitOptions options;
  options.output_dir = dir;
  Capture capture;
  {
    const wt::ScopedReporter installed(capture);
    const auto start = wt::train::start_run(world, options, "auto", "the test's model");
    EXPECT_FALSE(start.checkpoint);
  }
  if (world.is_root()) {
    ASSERT_EQ(capture.lines.size(), 1u);
    EXPECT_EQ(capture.lines[0].first, wt::Severity::Info);
    EXPECT_EQ(capture.lines[0].second, "resume: auto: no checkpoint in " + dir + "; starting fresh");
  } else {
    EXPECT_TRUE(capture.lines.empty());
  }
  // Out of scope, the reporter is gone: nothing more reaches it.
  wt::report_info("after the scope");
  EXPECT_EQ(capture.lines.size(), world.is_root() ? 1u : 0u);
  world.barrier();
  if (world.is_root()) std::filesystem::remove_all(dir);
}

TEST(Reporting, ScopedReportersNestAndRestoreTheOneBefore) {
  Capture outer, inner;
  {
    const wt::ScopedReporter a(outer);
    wt::report_warning("to the outer {}", 1);
    {
      const wt::ScopedReporter b(inner);
      wt::report_error("to the inner {}", 2);
    }
    wt::report_info("to the outer again");
  }
  wt::report_info("to the log");  // the binary's own reporter (log::init), restored
  ASSERT_EQ(outer.lines.size(), 2u);
  EXPECT_EQ(outer.lines[0], std::make_pair(wt::Severity::Warning, std::string("to the outer 1")));
  EXPECT_EQ(outer.lines[1], std::make_pair(wt::Severity::Info, std::string("to the outer again")));
  ASSERT_EQ(inner.lines.size(), 1u);
  EXPECT_EQ(inner.lines[0], std::make_pair(wt::Severity::Error, std::string("to the inner 2")));
}

}  // namespace
