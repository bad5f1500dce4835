// Reading back what wantrain runs leave in their output directories
// (metrics.jsonl, weights), for the launch tests.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../common/build_paths.hpp"
#include "../common/launch.hpp"
#include "wantrain/io/safetensors.hpp"

namespace wt::testing::train_runs {

using Json = nlohmann::json;

// Guards against a hang only.
inline constexpr double kHangGuardSeconds = 150;

inline std::string tiny_config() { return std::string(WANTRAIN_SOURCE_DIR) + "/data/configs/wan-tiny.json"; }

// A wantrain job as the launch tests run it: `ranks` processes under
// mpiexec on the MPI backend with one thread each, a model config (wan-tiny
// unless one is named), the data and output directory when given, and the
// options of the feature under test, as a user types them:
//   WantrainJob(2).data(data).output(dir).with("--steps 8 --zero 3").run()
class WantrainJob {
 public:
  explicit WantrainJob(int ranks = 2) : ranks_(ranks) {}
  WantrainJob& model(const std::string& config) {
    model_config_ = config;
    return *this;
  }
  WantrainJob& data(const std::string& dir) {
    data_ = dir;
    return *this;
  }
  WantrainJob& output(const std::string& dir) {
    output_dir_ = dir;
    return *this;
  }
  // More options (appended in order).
  WantrainJob& with(const std::string& options) {
    options_ += " " + options;
    return *this;
  }
  // What follows the program's name.
  std::string arguments() const {
    std::string out = "--model-config " + model_config_;
    if (!data_.empty()) out += " --data " + data_;
    if (!output_dir_.empty()) out += " --output-dir " + output_dir_;
    return out + " --threads 1 --backend mpi" + options_;
  }
  std::string command() const { return mpi_command(ranks_, WANTRAIN_WANTRAIN, arguments()); }
  // Launched and waited for; a job that outlasts kHangGuardSeconds fails the test.
  Job run() const {
    const Job job = launch(command());
    EXPECT_LT(job.seconds, kHangGuardSeconds) << command();
    return job;
  }

 private:
  int ranks_;
  std::string model_config_ = tiny_config(), data_, output_dir_, options_;
};

// A fresh synthetic dataset in wan-tiny's shape (one 8x8 latent frame, text
// 16 x 64) of `samples` samples in 2 shards, in fresh(name); its path.
inline std::string synth_tiny_data(const std::string& name, int samples, int seed) {
  const std::string dir = fresh(name);
  const Job synth =
      launch(std::string(WANTRAIN_WANDATA) + " synth --out " + dir + " --samples " + std::to_string(samples) +
             " --shards 2 --frames 1 --size 8x8 --text-len 16 --text-dim 64 " + "--seed " + std::to_string(seed));
  EXPECT_EQ(synth.status, 0) << synth.output;
  return dir;
}

// A wan-tiny teacher trained on `data` for 12 steps on 2 ranks (a
// checkpoint at step 6), in fresh(name); its directory.
inline std::string train_tiny_teacher(const std::string& name, const std::string& data) {
  const std::string dir = fresh(name);
  const Job teacher = WantrainJob(2)
                          .data(data)
                          .output(dir)
                          .with("--steps 12 --save-every 6 --keep 0 --batch-size 4 --lr 2e-3 --seed 3")
                          .run();
  EXPECT_EQ(teacher.status, 0) << teacher.output;
  return dir;
}

inline std::vector<Json> read_metrics(const std::string& dir) {
  std::vector<Json> lines;
  std::ifstream in(dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) lines.push_back(Json::parse(line));
  return lines;
}
inline std::vector<Json> training_lines(const std::string& dir) {
  std::vector<Json> out;
  for (auto& j : read_metrics(dir))
    if (j.contains("loss")) out.push_back(j);
  return out;
}
inline std::vector<Json> validation_lines(const std::string& dir) {
  std::vector<Json> out;
  for (auto& j : read_metrics(dir))
    if (j.contains("val_loss")) out.push_back(j);
  return out;
}

// Where train() put the output of run `name` (fresh() would empty it).
inline std::string run_dir(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / ("launch-" + name)).string();
}

// Two runs of `steps` steps logged the same losses, bit for bit.
inline void expect_same_losses(const std::string& a_dir, const std::string& b_dir, size_t steps) {
  const auto a = training_lines(a_dir), b = training_lines(b_dir);
  ASSERT_EQ(a.size(), steps) << a_dir;
  ASSERT_EQ(b.size(), steps) << b_dir;
  for (size_t i = 0; i < steps; ++i)
    EXPECT_EQ(a[i]["loss"].get<double>(), b[i]["loss"].get<double>()) << "step " << i + 1;
}

inline double relative(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-30); }

// |a - b| / |b| over all tensors of two weight files together (relative to
// the whole model: zero-initialised biases alone have no scale to be
// relative to, and Adam's normalised steps move them by ~lr whatever their
// gradient's size).
inline double weights_difference(const std::string& a_path, const std::string& b_path) {
  const auto a = wt::io::SafetensorsFile::open(a_path), b = wt::io::SafetensorsFile::open(b_path);
  EXPECT_EQ(a.entries().size(), b.entries().size());
  double diff = 0, norm = 0;
  for (const auto& entry : a.entries()) {
    const auto* other = b.find(entry.name);
    EXPECT_NE(other, nullptr) << entry.name;
    if (!other) continue;
    const auto x = a.read(entry).to(torch::kFloat64), y = b.read(*other).to(torch::kFloat64);
    diff += (x - y).square().sum().item<double>();
    norm += y.square().sum().item<double>();
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

}  // namespace wt::testing::train_runs
