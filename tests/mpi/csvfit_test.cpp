// csvfit: a second model family (an MLP regressor on a CSV file) trained by
// the same Engine, sampler, checkpoints and loop as wantrain, as whole jobs
// under mpiexec.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "../common/build_paths.hpp"
#include "../common/launch.hpp"
#include "../common/train_runs.hpp"
#include "wantrain/io/safetensors.hpp"

namespace {

using wt::testing::fresh;
using wt::testing::Job;
using wt::testing::launch;
using wt::testing::mpi_command;
using wt::testing::occurrences;
using namespace wt::testing::train_runs;

constexpr double kNoise = 0.1;  // standard deviation of the targets' noise

// y1 = 2 x1 - x2 + 0.5 x3 + 1 + e1, y2 = -x1 + 3 x3 + e2 with e ~ N(0, kNoise^2),
// x ~ U(-1, 1); returns the targets' variances (for the noise floor).
std::pair<double, double> write_linear_csv(const std::string& path, int rows, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> x(-1, 1);
  std::normal_distribution<double> noise(0, kNoise);
  std::ofstream out(path);
  out << "x1,x2,x3,y1,y2\n";
  double sum1 = 0, sq1 = 0, sum2 = 0, sq2 = 0;
  for (int i = 0; i < rows; ++i) {
    const double a = x(gen), b = x(gen), c = x(gen);
    const double y1 = 2 * a - b + 0.5 * c + 1 + noise(gen), y2 = -a + 3 * c + noise(gen);
    out << a << ',' << b << ',' << c << ',' << y1 << ',' << y2 << '\n';
    sum1 += y1, sq1 += y1 * y1, sum2 += y2, sq2 += y2 * y2;
  }
  return {sq1 / rows - (sum1 / rows) * (sum1 / rows), sq2 / rows - (sum2 / rows) * (sum2 / rows)};
}

class Csvfit : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fresh("csvfit-data");
    std::filesystem::create_directories(dir_);
    variances_ = write_linear_csv(dir_ + "/train.csv", 512, 1);
    write_linear_csv(dir_ + "/val.csv", 128, 2);
  }
  static Job fit(int ranks, const std::string& name, const std::string& options) {
    const Job job = launch(mpi_command(ranks, WANTRAIN_CSVFIT,
                                       "--data " + dir_ + "/train.csv --target-cols y1,y2 --output-dir " + fresh(name) +
                                           " --threads 1 --seed 3 " + options));
    EXPECT_LT(job.seconds, kHangGuardSeconds);
    return job;
  }
  static std::string dir_;
  static std::pair<double, double> variances_;
};
std::string Csvfit::dir_;
std::pair<double, double> Csvfit::variances_;

TEST_F(Csvfit, OneRankWithTwiceTheBatchIsTwoRanks) {
  const std::string common = "--steps 12 --log-every 1 --lr 3e-3 --schedule cosine --ema-decay 0.9 ";
  const Job one = fit(1, "csvfit-1x16", common + "--batch-size 16");
  const Job two = fit(2, "csvfit-2x8", common + "--batch-size 8");
  ASSERT_EQ(one.status, 0) << one.output;
  ASSERT_EQ(two.status, 0) << two.output;
  const auto a = training_lines(run_dir("csvfit-1x16")), b = training_lines(run_dir("csvfit-2x8"));
  ASSERT_EQ(a.size(), 12u);
  ASSERT_EQ(b.size(), 12u);
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i]["loss"].get<double>(), b[i]["loss"].get<double>(), 1e-5 * a[i]["loss"].get<double>()) << i;
  EXPECT_LT(
      weights_difference(run_dir("csvfit-2x8") + "/model.safetensors", run_dir("csvfit-1x16") + "/model.safetensors"),
      1e-5);
}

TEST_F(Csvfit, ResumeRepeatsTheUninterruptedRunBitForBit) {
  const std::string common = "--steps 10 --log-every 1 --batch-size 8 --ema-decay 0.9 ";
  const Job straight = fit(2, "csvfit-straight", common);
  ASSERT_EQ(straight.status, 0) << straight.output;
  // The same run stopped at step 6 (--steps 6 with its checkpoints), then resumed to 10.
  const Job first = fit(2, "csvfit-stopped", "--steps 6 --log-every 1 --batch-size 8 --ema-decay 0.9");
  ASSERT_EQ(first.status, 0) << first.output;
  const std::string stopped = run_dir("csvfit-stopped");
  const Job resumed = launch(mpi_command(2, WANTRAIN_CSVFIT,
                                         "--data " + dir_ + "/train.csv --target-cols y1,y2 --output-dir " + stopped +
                                             " --threads 1 --seed 3 --resume auto " + common));
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_EQ(occurrences(resumed.output, "resume: " + stopped + "/step-00000006.h5 (step 6"), 1u) << resumed.output;
  const auto a = training_lines(run_dir("csvfit-straight")), b = training_lines(stopped);
  ASSERT_EQ(a.size(), 10u);
  ASSERT_EQ(b.size(), 10u);
  // Step 6 was logged by the first run; 7..10 by the resumed one, bit for bit.
  for (size_t i = 6; i < a.size(); ++i) EXPECT_EQ(a[i]["loss"].get<double>(), b[i]["loss"].get<double>()) << i;
  EXPECT_EQ(weights_difference(stopped + "/model.safetensors", run_dir("csvfit-straight") + "/model.safetensors"), 0.0);
}

TEST_F(Csvfit, LearnsALinearTargetToNearItsNoiseFloor) {
  const Job job = fit(2, "csvfit-learn",
                      "--epochs 40 --batch-size 16 --lr 3e-3 --schedule cosine --warmup-steps 20 --log-every 100 "
                      "--val-data " +
                          dir_ + "/val.csv");
  ASSERT_EQ(job.status, 0) << job.output;
  const auto val = validation_lines(run_dir("csvfit-learn"));
  ASSERT_FALSE(val.empty()) << job.output;
  // The validation loss is the mean squared error in standardised units:
  // with a perfect fit, the noise's variance over each target's variance.
  const double floor = 0.5 * (kNoise * kNoise / variances_.first + kNoise * kNoise / variances_.second);
  const double reached = val.back()["val_loss"].get<double>();
  EXPECT_LT(reached, 2 * floor) << "floor " << floor << "\n" << job.output;
  EXPECT_GT(reached, 0.5 * floor) << "below the noise floor: the validation set leaked?";
}

TEST_F(Csvfit, BadCsvsAreOneLineAndStatus2) {
  const std::string bad = fresh("csvfit-bad");
  std::filesystem::create_directories(bad);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(bad + "/" + name) << text;
    return bad + "/" + name;
  };
  const struct {
    std::string file, expected;
  } cases[] = {
      {write("ragged.csv", "x1,x2,x3,y1,y2\n1,2,3,4,5\n1,2,3,4\n"),
       "ragged.csv: line 3 has 4 fields, the header has 5"},
      {write("text.csv", "x1,x2,x3,y1,y2\n1,2,3,4,5\n1,two,3,4,5\n"),
       "text.csv: line 3, column 2 (x2): 'two' is not a number"},
      {write("empty.csv", ""), "empty.csv: empty file: expected a header row of column names"},
      {write("no-target.csv", "x1,x2,x3,y1\n1,2,3,4\n"), "no-target.csv: no column 'y2'"},
      {write("one-row.csv", "x1,x2,x3,y1,y2\n1,2,3,4,5\n"),
       "one-row.csv: one data row; the standardisation needs at least 2"},
  };
  for (const auto& c : cases) {
    const Job job = launch(
        mpi_command(2, WANTRAIN_CSVFIT,
                    "--data " + c.file + " --target-cols y1,y2 --steps 1 --output-dir " + bad + "/out --threads 1"));
    EXPECT_EQ(job.status, 2) << job.output;
    EXPECT_EQ(occurrences(job.output, "error: " + bad + "/" + c.expected), 1u) << job.output;
    EXPECT_EQ(occurrences(job.output, "error:"), 1u) << job.output;
  }
}

TEST_F(Csvfit, BadOptionsAndAMisfittingCheckpointAreOneLineAndStatus2) {
  const Job zero = fit(2, "csvfit-bad-option", "--steps 2 --log-every 0");
  EXPECT_EQ(zero.status, 2) << zero.output;
  EXPECT_EQ(occurrences(zero.output, "error: option --log-every: must be at least 1"), 1u) << zero.output;
  // A checkpoint without EMA cannot continue a run that keeps one: refused on every rank alike, before training.
  const Job first = fit(2, "csvfit-no-ema", "--steps 2 --batch-size 8");
  ASSERT_EQ(first.status, 0) << first.output;
  const std::string dir = run_dir("csvfit-no-ema");
  const Job resumed = launch(mpi_command(2, WANTRAIN_CSVFIT,
                                         "--data " + dir_ + "/train.csv --target-cols y1,y2 --output-dir " + dir +
                                             " --threads 1 --seed 3 --steps 4 --batch-size 8 --ema-decay 0.9 "
                                             "--resume auto"));
  EXPECT_EQ(resumed.status, 2) << resumed.output;
  EXPECT_EQ(occurrences(resumed.output, "error: checkpoint " + dir + "/step-00000002.h5: has no /ema"), 1u)
      << resumed.output;
  EXPECT_EQ(occurrences(resumed.output, "error:"), 1u) << resumed.output;
}

TEST_F(Csvfit, DryRunPrintsThePlan) {
  const Job job = fit(2, "csvfit-dry", "--epochs 3 --batch-size 16 --grad-accum 2 --dry-run");
  ASSERT_EQ(job.status, 0) << job.output;
  // 512 rows, global batch 16 x 2 ranks x 2 = 64: 8 steps an epoch.
  EXPECT_EQ(occurrences(job.output, "8 steps per epoch; 512 samples per epoch (all)"), 1u) << job.output;
  EXPECT_EQ(occurrences(job.output, "effective batch: 16 per rank x 2 ranks x 2 accumulation steps = 64"), 1u);
  EXPECT_EQ(occurrences(job.output, "steps: 24 (3 epochs)"), 1u) << job.output;
  EXPECT_FALSE(std::filesystem::exists(run_dir("csvfit-dry") + "/metrics.jsonl"));
}

}  // namespace
