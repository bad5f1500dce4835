// wantrain's options as a user gives them: the names fixed by the design
// (in --help), and each bad value one line naming the option, status 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>

#include "../common/build_paths.hpp"
#include "../common/launch.hpp"

namespace {

using wt::testing::Job;
using wt::testing::launch;

const std::string kWantrain = WANTRAIN_WANTRAIN;

// `wantrain args` fails with status 2 and exactly the one line `expected`.
void expect_refused(const std::string& args, const std::string& expected) {
  SCOPED_TRACE(args);
  const Job job = launch(kWantrain + " " + args);
  EXPECT_EQ(job.status, 2) << job.output;
  EXPECT_EQ(std::count(job.output.begin(), job.output.end(), '\n'), 1) << job.output;
  EXPECT_NE(job.output.find("error: " + expected + "\n"), std::string::npos) << job.output;
}

// `wantrain --dry-run args` (no data, no model: the banner alone) succeeds.
Job dry_run(const std::string& args) {
  const Job job = launch(kWantrain + " --dry-run --output-dir " + wt::testing::fresh("wantrain-options") + " " + args);
  EXPECT_EQ(job.status, 0) << args << "\n" << job.output;
  return job;
}

// The value the banner's table resolved `name` to ("    name   value   (source)").
std::string resolved(const std::string& banner, const std::string& name) {
  std::istringstream lines(banner);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line.substr(std::min(line.find("info] "), line.size())));
    std::string tag, option, value;
    if (words >> tag >> option >> value && option == name) return value;
  }
  return "(not in the banner)";
}

}  // namespace

TEST(WantrainOptions, HelpNamesEveryOptionOfTheDesign) {
  const Job help = launch(kWantrain + " --help");
  ASSERT_EQ(help.status, 0) << help.output;
  // The command-line names that scripts, docs and users rely on (design.md).
  for (const char* name : {"config",
                           "output-dir",
                           "mode",
                           "seed",
                           "dry-run",
                           "log-every",
                           "threads",
                           "help",
                           "version",
                           "data",
                           "batch-size",
                           "prefetch",
                           "no-drop-last",
                           "shard-affinity",
                           "val-data",
                           "val-every",
                           "model-config",
                           "init",
                           "timestep-sampling",
                           "logit-mean",
                           "logit-std",
                           "shift",
                           "steps",
                           "epochs",
                           "lr",
                           "betas",
                           "weight-decay",
                           "schedule",
                           "warmup-steps",
                           "scale-lr",
                           "clip",
                           "ema-decay",
                           "grad-accum",
                           "precision",
                           "backend",
                           "bucket-mb",
                           "comm-timeout",
                           "allow-unused",
                           "save-every",
                           "keep",
                           "keep-best",
                           "resume",
                           "on-ckpt-error",
                           "teacher",
                           "teacher-config",
                           "student-init",
                           "teacher-precision",
                           "distill-target-weight",
                           "max-skipped"})
    EXPECT_NE(help.output.find(std::string("--") + name + " "), std::string::npos) << "--" << name;
}

TEST(WantrainOptions, DefaultsAreValid) { dry_run(""); }

TEST(WantrainOptions, RangesAndExclusiveOptionsAreOneLineNamingTheOption) {
  expect_refused("--steps 10 --epochs 2", "option --steps: give --steps or --epochs, not both");
  expect_refused("--batch-size 0", "option --batch-size: must be at least 1");
  expect_refused("--ema-decay 1.0", "option --ema-decay: must be in [0, 1)");
  expect_refused("--comm-timeout 0", "option --comm-timeout: must be a positive number of seconds");
  expect_refused("--mode distill", "option --teacher: --mode distill needs a teacher");
  // Given, but --mode is train: refused rather than ignored.
  expect_refused("--teacher teacher.safetensors", "option --teacher: only used with --mode distill");
}

// --attention-chunk: fused by default, auto, 0 or a number of queries;
// anything else one line naming the option.
TEST(WantrainOptions, AttentionChunkIsFusedAutoZeroOrQueries) {
  EXPECT_EQ(resolved(dry_run("").output, "attention-chunk"), "fused");
  for (const char* chunk : {"auto", "0", "512"}) dry_run(std::string("--attention-chunk ") + chunk);
  for (const std::string bad : {"-1", "none", "256q"})
    expect_refused("--attention-chunk " + bad,
                   "option --attention-chunk: expected fused, auto, 0 (the whole score matrix) or a number of "
                   "queries, got '" +
                       bad + "'");
}

TEST(WantrainOptions, BetasAreACommaSeparatedPairInTheUnitInterval) {
  EXPECT_EQ(resolved(dry_run("--betas 0.8,0.95").output, "betas"), "0.8,0.95");
  for (const char* bad : {"0.9", "0.9;0.99", "1.2,0.9", "0.9,-0.1"}) {
    const Job job = launch(kWantrain + " --betas '" + bad + "'");
    EXPECT_EQ(job.status, 2) << bad << "\n" << job.output;
    EXPECT_NE(job.output.find("--betas"), std::string::npos) << bad << "\n" << job.output;
  }
}
