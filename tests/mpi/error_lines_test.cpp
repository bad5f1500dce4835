// Every tool's errors, as a user meets them without a launcher: exactly one
// line (no MPI_ABORT banner after it, no configuration table before it),
// naming the option, file or key at fault, and status 2.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "../common/build_paths.hpp"
#include "../common/launch.hpp"

namespace {

using wt::testing::fresh;
using wt::testing::Job;
using wt::testing::launch;

size_t lines(const std::string& text) { return size_t(std::count(text.begin(), text.end(), '\n')); }

// Runs `tool args`, which must fail with status 2 and print exactly one line holding `expected`.
void expect_one_line(const std::string& tool, const std::string& args, const std::string& expected) {
  SCOPED_TRACE(tool + " " + args);
  const Job job = launch(tool + " " + args);
  EXPECT_EQ(job.status, 2) << job.output;
  EXPECT_EQ(lines(job.output), 1u) << job.output;
  EXPECT_NE(job.output.find("error: " + expected), std::string::npos) << job.output;
  EXPECT_EQ(job.output.find("MPI_ABORT"), std::string::npos) << job.output;
}

const std::string kWantrain = WANTRAIN_WANTRAIN, kWandata = WANTRAIN_WANDATA, kWansample = WANTRAIN_WANSAMPLE,
                  kWanbench = WANTRAIN_WANBENCH, kCsvfit = WANTRAIN_CSVFIT;
const std::string kSource = WANTRAIN_SOURCE_DIR;

}  // namespace

TEST(ErrorLines, MisspelledOptionsAreNamedWithTheClosestOne) {
  expect_one_line(kWantrain, "--lrr 3", "unrecognised option '--lrr' (did you mean '--lr'?)");
  expect_one_line(kWantrain, "--bach-size 3", "unrecognised option '--bach-size' (did you mean '--batch-size'?)");
  expect_one_line(kWansample, "--stpes 3", "unrecognised option '--stpes' (did you mean '--steps'?)");
  expect_one_line(kWandata, "synth --out x --sampels 3", "unrecognised option '--sampels' (did you mean '--samples'?)");
  expect_one_line(kCsvfit, "--epohcs 3", "unrecognised option '--epohcs' (did you mean '--epochs'?)");
  // Nothing close: no guess.
  const Job job = launch(kWantrain + " --zzzzzzzz 1");
  EXPECT_EQ(job.status, 2) << job.output;
  EXPECT_EQ(job.output.find("did you mean"), std::string::npos) << job.output;
}

TEST(ErrorLines, MisspelledIniKeysAndModelConfigKeysAreNamed) {
  const auto dir = fresh("error-lines-keys");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/run.ini") << "lr = 1e-3\nwarmup_steps = 3\n";
  expect_one_line(kWantrain, "--config " + dir + "/run.ini",
                  "--config " + dir + "/run.ini: unrecognised option 'warmup_steps' (did you mean 'warmup-steps'?)");
  // The unknown key is named, not the known key it was meant to be.
  std::ifstream in(kSource + "/data/configs/wan-tiny.json");
  std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto at = config.find("\"num_heads\"");
  ASSERT_NE(at, std::string::npos);
  config.replace(at, 11, "\"num_head\"");
  std::ofstream(dir + "/model.json") << config;
  expect_one_line(kWantrain, "--dry-run --model-config " + dir + "/model.json",
                  "model config " + dir + "/model.json: unknown key 'num_head' (did you mean 'num_heads'?)");
}

TEST(ErrorLines, AMissingFileSaysSoAndNamesIt) {
  const auto dir = fresh("error-lines-missing");
  const std::string missing = dir + "/nothing-here";
  expect_one_line(kWantrain, "export --checkpoint " + missing + " --out " + dir + "/x.safetensors",
                  "checkpoint " + missing + ": no such file");
  expect_one_line(kWantrain, "--dry-run --model-config " + missing, "model config " + missing + ": no such file");
  expect_one_line(kWantrain, "--config " + missing, "--config " + missing + ": no such file");
  expect_one_line(kWansample,
                  "--weights " + missing + " --model-config " + kSource +
                      "/data/configs/wan-tiny.json --text x --frames 1 --size 8x8",
                  "option --weights: " + missing + ": no such file");
  expect_one_line(kWansample, "--checkpoint " + missing + " --text x --frames 1 --size 8x8",
                  "option --checkpoint: " + missing + ": no such file");
  expect_one_line(kWandata, "verify " + missing, "data: " + missing + " does not exist");
  // No C++ of ours in a user's message: HDF5's failure is named by its function only.
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/not-hdf5") << "plain text\n";
  const Job job = launch(kWantrain + " export --checkpoint " + dir + "/not-hdf5 --out " + dir + "/x.safetensors");
  EXPECT_EQ(job.status, 2) << job.output;
  EXPECT_EQ(lines(job.output), 1u) << job.output;
  EXPECT_EQ(job.output.find("c_str"), std::string::npos) << job.output;
}

TEST(ErrorLines, WhatATrainingRunLacksComesBeforeTheConfigurationTable) {
  // run.ini names its model config relative to the repository, as the README runs it.
  expect_one_line("cd " + kSource + " && " + kWantrain, "--config data/run.ini",
                  "option --data: a training dataset is needed (or --dry-run)");
}

TEST(ErrorLines, EveryToolsUsageErrorIsOneLineWithoutABanner) {
  expect_one_line(kWansample, "--text x --frames 1 --size 8x8",
                  "options --weights, --checkpoint: give exactly one (the model weights to sample with)");
  expect_one_line(kWandata, "synth", "option --out");
  expect_one_line(kWanbench, "io --rounds 0", "options --rounds, --batch-size, --prefetch: must be at least 1");
  expect_one_line(kCsvfit, "--target-cols y", "option --data");
}
