// wantrain trains: whole jobs under mpiexec on small synthetic datasets, read
// back through metrics.jsonl and the weights they write.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../common/build_paths.hpp"
#include "../common/launch.hpp"
#include "../common/shards.hpp"
#include "../common/train_runs.hpp"
#include "wantrain/data/shard.hpp"
#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/io/safetensors.hpp"

namespace {

using wt::testing::fresh;
using wt::testing::Job;
using wt::testing::launch;
using wt::testing::mpi_command;
using wt::testing::occurrences;
using Json = nlohmann::json;
using namespace wt::testing::train_runs;

// One shard of `samples` samples in the wan-tiny shape, in a fresh
// directory; the samples for which `has_nan(row)` hold a NaN in their latents.
std::string nan_data(const std::string& name, int64_t samples, const std::function<bool(int64_t)>& has_nan) {
  const std::string dir = wt::testing::fresh_directory(name);
  wt::data::SampleShape s;
  s.channels = 16, s.frames = 1, s.height = 8, s.width = 8, s.text_len = 16, s.text_dim = 64;
  wt::data::ShardWriter writer(dir + "/shard-00000.h5", s, samples, false);
  for (int64_t row = 0; row < samples; ++row) {
    auto latents = wt::testing::expected_latents(s, 1, row);
    if (has_nan(row)) latents[0][0][3][3] = std::nan("");
    writer.write(row, latents, wt::testing::expected_text(s, 1, row), wt::testing::expected_text_len(s, row));
  }
  writer.close();
  return dir;
}

class Train : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { data_ = synth_tiny_data("train-data", 32, 5); }

  // wantrain on `ranks` ranks with the common options and `options`; its output dir is fresh(name).
  static Job train(int ranks, const std::string& name, const std::string& options) {
    const Job job = launch(mpi_command(ranks, WANTRAIN_WANTRAIN,
                                       "--model-config " + tiny_config() + " --data " + data_ + " --output-dir " +
                                           fresh(name) + " --seed 7 --threads 1 --backend mpi " + options));
    EXPECT_LT(job.seconds, kHangGuardSeconds);
    return job;
  }

  static std::string data_;
};
std::string Train::data_;

// 1 rank x batch 4, 2 ranks x batch 2 and 1 rank x batch 2 x 2 accumulation
// steps are the same optimisation: same samples, noise and averaged gradient.
TEST_F(Train, WorldSizeBatchAndAccumulationSplitsGiveTheSameRun) {
  const std::string common =
      "--steps 20 --log-every 1 --lr 1e-3 --schedule cosine --warmup-steps 3 --clip 0.5 --ema-decay 0.9 "
      "--text-drop 0.3 ";
  const Job one = train(1, "inv-1x4", common + "--batch-size 4");
  const Job two = train(2, "inv-2x2", common + "--batch-size 2");
  const Job accum = train(1, "inv-1x2x2", common + "--batch-size 2 --grad-accum 2");
  ASSERT_EQ(one.status, 0) << one.output;
  ASSERT_EQ(two.status, 0) << two.output;
  ASSERT_EQ(accum.status, 0) << accum.output;

  const auto reference = training_lines(run_dir("inv-1x4"));
  ASSERT_EQ(reference.size(), 20u);
  for (const std::string other : {"inv-2x2", "inv-1x2x2"}) {
    const auto lines = training_lines(run_dir(other));
    ASSERT_EQ(lines.size(), 20u) << other;
    for (size_t i = 0; i < lines.size(); ++i) {
      EXPECT_EQ(lines[i]["step"], i + 1);
      EXPECT_LT(relative(lines[i]["loss"], reference[i]["loss"]), 1e-5) << other << " step " << i + 1;
      EXPECT_LT(relative(lines[i]["grad_norm"], reference[i]["grad_norm"]), 1e-5) << other << " step " << i + 1;
    }
    EXPECT_LT(weights_difference(run_dir(other) + "/model.safetensors", run_dir("inv-1x4") + "/model.safetensors"),
              1e-5)
        << other;
    EXPECT_LT(weights_difference(run_dir(other) + "/ema.safetensors", run_dir("inv-1x4") + "/ema.safetensors"), 1e-5)
        << other;
  }

  // The schedule as documented: linear warm-up to 1e-3 over 3 steps, then a
  // cosine to 0 over the remaining 17.
  for (int s = 1; s <= 20; ++s) {
    const double expected = s <= 3 ? 1e-3 * s / 3 : 0.5e-3 * (1 + std::cos(M_PI * (s - 1 - 3) / 17.0));
    EXPECT_NEAR(reference[s - 1]["lr"].get<double>(), expected, 1e-12) << "step " << s;
  }
  // Training moved the weights away from the EMA's slower average.
  EXPECT_GT(weights_difference(run_dir("inv-1x4") + "/model.safetensors", run_dir("inv-1x4") + "/ema.safetensors"),
            1e-4);
}

// --grad-checkpoint recomputes blocks in backward and changes nothing else:
// 2 ranks x B with every block recomputed, 1 rank x 2B with every second
// one, 1 rank x B x 2 accumulation steps, 2 ranks with chunked attention
// as well, and 2 ranks without take the same steps (the Reducer's hooks fire for
// recomputed blocks too: the ranks' gradients are averaged).
TEST_F(Train, GradCheckpointingTakesTheSameStepsOnAnyWorldSize) {
  const std::string common = "--steps 12 --log-every 1 --lr 1e-3 --clip 0.5 --text-drop 0.3 ";
  const Job plain = train(2, "gc-plain", common + "--batch-size 2");
  const Job blocks = train(2, "gc-blocks", common + "--batch-size 2 --grad-checkpoint blocks");
  const Job every2 = train(1, "gc-every2", common + "--batch-size 4 --grad-checkpoint every-2");
  const Job accum = train(1, "gc-accum", common + "--batch-size 2 --grad-accum 2 --grad-checkpoint blocks");
  ASSERT_EQ(accum.status, 0) << accum.output;
  // Chunked attention (5 queries at a time: wan-tiny's 16 tokens do not divide) too.
  const Job chunked = train(2, "gc-chunked", common + "--batch-size 2 --grad-checkpoint blocks --attention-chunk 5");
  ASSERT_EQ(chunked.status, 0) << chunked.output;
  ASSERT_EQ(plain.status, 0) << plain.output;
  ASSERT_EQ(blocks.status, 0) << blocks.output;
  ASSERT_EQ(every2.status, 0) << every2.output;
  const auto reference = training_lines(run_dir("gc-plain"));
  ASSERT_EQ(reference.size(), 12u);
  for (const std::string other : {"gc-blocks", "gc-every2", "gc-accum", "gc-chunked"}) {
    const auto lines = training_lines(run_dir(other));
    ASSERT_EQ(lines.size(), 12u) << other;
    for (size_t i = 0; i < lines.size(); ++i) {
      EXPECT_LT(relative(lines[i]["loss"], reference[i]["loss"]), 1e-5) << other << " step " << i + 1;
      EXPECT_LT(relative(lines[i]["grad_norm"], reference[i]["grad_norm"]), 1e-5) << other << " step " << i + 1;
    }
    EXPECT_LT(weights_difference(run_dir(other) + "/model.safetensors", run_dir("gc-plain") + "/model.safetensors"),
              1e-5)
        << other;
  }
  const Job negative = train(2, "gc-bad", "--steps 2 --attention-chunk -1");
  EXPECT_EQ(negative.status, 2) << negative.output;
  EXPECT_EQ(occurrences(negative.output,
                        "option --attention-chunk: expected fused, auto, 0 (the whole score matrix) or a number of "
                        "queries, got '-1'"),
            1u)
      << negative.output;
  for (const std::string bad : {"every-0", "some", "every-x"}) {
    const Job job = train(2, "gc-bad", "--steps 2 --grad-checkpoint " + bad);
    EXPECT_EQ(job.status, 2) << job.output;
    EXPECT_EQ(occurrences(job.output,
                          "option --grad-checkpoint: expected none, blocks or every-N with N >= 1, got '" + bad + "'"),
              1u)
        << job.output;
  }
}

TEST_F(Train, TheSameCommandTwiceGivesTheSameLossTrace) {
  const std::string options = "--steps 6 --log-every 1 --batch-size 2 --lr 1e-3";
  const Job first = train(2, "twice-a", options), second = train(2, "twice-b", options);
  ASSERT_EQ(first.status, 0) << first.output;
  ASSERT_EQ(second.status, 0) << second.output;
  const auto a = training_lines(run_dir("twice-a")), b = training_lines(run_dir("twice-b"));
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 6u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i]["loss"].get<double>(), b[i]["loss"].get<double>());
  EXPECT_EQ(weights_difference(run_dir("twice-a") + "/model.safetensors", run_dir("twice-b") + "/model.safetensors"),
            0);
}

TEST_F(Train, TwoRankRunLearnsAndReportsFromRankZeroOnly) {
  const Job job = train(2, "learns", "--steps 60 --log-every 10 --batch-size 4 --lr 3e-3 --warmup-steps 5");
  ASSERT_EQ(job.status, 0) << job.output;
  const std::string dir = run_dir("learns");
  const auto lines = training_lines(dir);
  ASSERT_EQ(lines.size(), 6u);
  // Mean loss of steps 51-60 well below that of steps 1-10.
  EXPECT_LT(lines.back()["loss"].get<double>(), 0.7 * lines.front()["loss"].get<double>()) << job.output;
  for (const char* key : {"step", "epoch", "loss", "lr", "grad_norm", "samples_per_s", "step_s", "data_s", "forward_s",
                          "backward_s", "comm_s", "optimizer_s", "skipped_steps", "eta_s"})
    EXPECT_TRUE(lines.front().contains(key)) << key;
  // 32 samples, global batch 8: 4 steps per epoch, so step 60 is in epoch 14.
  EXPECT_EQ(lines.back()["epoch"], 14);
  EXPECT_EQ(lines.back()["skipped_steps"], 0);
  // Rank 0's peak RSS on each logged step; every rank's in the closing
  // record, which the closing line prints too.
  EXPECT_GT(lines.back()["peak_rss_mib"].get<double>(), 10.0);
  const auto summary = read_metrics(dir).back();
  EXPECT_EQ(summary["step"], 60);
  EXPECT_EQ(summary["run_steps"], 60);
  ASSERT_EQ(summary["peak_rss_mib_per_rank"].size(), 2u) << summary.dump();
  std::vector<std::string> per_rank;
  for (const auto& mib : summary["peak_rss_mib_per_rank"]) {
    EXPECT_GT(mib.get<double>(), 10.0);  // LibTorch alone is more
    EXPECT_LT(mib.get<double>(), 24.0 * 1024);
    per_rank.push_back(fmt::format("{:.0f}", mib.get<double>()));
  }
  EXPECT_GE(summary["peak_rss_mib_per_rank"][0].get<double>(), lines.back()["peak_rss_mib"].get<double>());
  EXPECT_EQ(occurrences(job.output, fmt::format("peak RSS per rank {}, {} MiB\n", per_rank[0], per_rank[1])), 1u)
      << job.output;

  // One line per logged step, from rank 0 only, with the step-time split.
  EXPECT_EQ(occurrences(job.output, "step 10/60  epoch 2  loss "), 1u) << job.output;
  EXPECT_EQ(occurrences(job.output, " = data "), 6u) << job.output;
  EXPECT_EQ(occurrences(job.output, "resolved configuration"), 1u) << job.output;
  EXPECT_EQ(occurrences(job.output, "trained 60 steps in "), 1u) << job.output;
  EXPECT_EQ(occurrences(job.output, "[rank 1/2"), 0u) << job.output;
  // Its output went to a pipe, not a terminal: no colour codes in the log.
  EXPECT_EQ(job.output.find("\x1b["), std::string::npos) << job.output;
  EXPECT_NE(job.output.find("] [info] checkpoint "), std::string::npos) << job.output;
  EXPECT_NE(job.output.find("optimizer: AdamW, lr 0.003, constant schedule, 5 warm-up steps, precision fp32"),
            std::string::npos)
      << job.output;
  EXPECT_NE(job.output.find("steps: 60\n"), std::string::npos) << job.output;
  EXPECT_TRUE(std::filesystem::exists(dir + "/model.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/model-config.json"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/ema.safetensors"));
}

TEST_F(Train, ValidationLossOnTwoRanksEqualsOneRank) {
  const std::string val = fresh("val-data");
  const Job synth = launch(std::string(WANTRAIN_WANDATA) + " synth --out " + val +
                           " --samples 5 --shards 1 --frames 1 --size 8x8 --text-len 16 --text-dim 64 --seed 11");
  ASSERT_EQ(synth.status, 0) << synth.output;
  const std::string common = "--steps 3 --val-every 2 --lr 1e-3 --val-data " + val + " ";
  const Job one = train(1, "val-1", common + "--batch-size 4");
  const Job two = train(2, "val-2", common + "--batch-size 2");
  ASSERT_EQ(one.status, 0) << one.output;
  ASSERT_EQ(two.status, 0) << two.output;
  const auto a = validation_lines(run_dir("val-1")), b = validation_lines(run_dir("val-2"));
  // Every --val-every steps and at the end.
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(a[0]["step"], 2);
  EXPECT_EQ(a[1]["step"], 3);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["step"], b[i]["step"]);
    EXPECT_LT(relative(b[i]["val_loss"], a[i]["val_loss"]), 1e-5);
  }
  EXPECT_NE(a[0]["val_loss"].get<double>(), a[1]["val_loss"].get<double>());  // the model changed in between
  EXPECT_EQ(occurrences(two.output, "step 2  validation loss "), 1u) << two.output;
}

TEST_F(Train, NonFiniteLossSkipsTheStepOnEveryRank) {
  // 16 samples in the wan-tiny shape, sample 5 holding a NaN.
  const std::string dir = nan_data("train-nan-data", 16, [](int64_t row) { return row == 5; });
  // Global batch 4: 4 steps per epoch, so 8 steps meet sample 5 twice.
  const Job job = launch(mpi_command(2, WANTRAIN_WANTRAIN,
                                     "--model-config " + tiny_config() + " --data " + dir + " --output-dir " +
                                         fresh("nan-run") + " --steps 8 --log-every 4 --batch-size 2 --threads 1"));
  ASSERT_EQ(job.status, 0) << job.output;
  EXPECT_EQ(occurrences(job.output, "non-finite loss; the step is skipped on every rank"), 2u) << job.output;
  const auto lines = training_lines(run_dir("nan-run"));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines.back()["skipped_steps"], 2);
  const auto weights = wt::io::SafetensorsFile::open(run_dir("nan-run") + "/model.safetensors");
  for (const auto& entry : weights.entries())
    EXPECT_TRUE(torch::isfinite(weights.read(entry)).all().item<bool>()) << entry.name;
}

TEST_F(Train, ARunThatCanOnlySkipStopsAfterMaxSkippedSteps) {
  // Every sample holds a NaN: every step is skipped.
  const std::string dir = nan_data("train-all-nan-data", 8, [](int64_t) { return true; });
  const auto run = [&](const std::string& name, const std::string& options) {
    return launch(mpi_command(2, WANTRAIN_WANTRAIN,
                              "--model-config " + tiny_config() + " --data " + dir + " --output-dir " + fresh(name) +
                                  " --steps 50 --log-every 1 --batch-size 2 --threads 1 " + options));
  };
  const Job limited = run("all-nan-3", "--max-skipped 3");
  EXPECT_EQ(limited.status, 1) << limited.output;
  EXPECT_EQ(occurrences(limited.output,
                        "error: stopping at step 3: 3 steps in a row had a non-finite loss or gradient "
                        "and were skipped (--max-skipped 3)"),
            1u)
      << limited.output;
  EXPECT_EQ(occurrences(limited.output, "error:"), 1u) << limited.output;
  const auto lines = training_lines(run_dir("all-nan-3"));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines.back()["skipped_steps"], 3);
  // The default stops such a run at 20 steps.
  const Job by_default = run("all-nan-default", "");
  EXPECT_EQ(by_default.status, 1) << by_default.output;
  EXPECT_EQ(training_lines(run_dir("all-nan-default")).size(), 20u);
}

TEST_F(Train, EpochsCountWholePassesOverTheData) {
  // 32 samples, 2 ranks x 2 x 2 accumulation = 8 per step: 4 steps per epoch.
  const Job job = train(2, "epochs", "--epochs 2 --log-every 1 --batch-size 2 --grad-accum 2");
  ASSERT_EQ(job.status, 0) << job.output;
  const auto lines = training_lines(run_dir("epochs"));
  ASSERT_EQ(lines.size(), 8u);
  EXPECT_EQ(lines[3]["epoch"], 0);
  EXPECT_EQ(lines[4]["epoch"], 1);
  EXPECT_NE(job.output.find("steps: 8 (2 epochs)"), std::string::npos) << job.output;
}

TEST_F(Train, OptionsThatCannotTrainAreOneLineAndStatus2) {
  const struct {
    std::string options, line;
  } cases[] = {
      {"--steps 2 --precision fp16",
       "error: option --precision: fp16 needs CUDA devices (dynamic loss scaling); "
       "on CPU use bf16"},
      {"", "error: option --steps: give --steps N or --epochs N to train"},
      {"--steps 2 --mode distill --teacher t.safetensors", "error: option --teacher: t.safetensors does not exist"},
  };
  for (const auto& c : cases) {
    const Job job = train(2, "bad", c.options);
    EXPECT_EQ(job.status, 2) << c.options << "\n" << job.output;
    EXPECT_EQ(occurrences(job.output, c.line), 1u) << c.options << "\n" << job.output;
  }
  const Job no_data = launch(mpi_command(2, WANTRAIN_WANTRAIN, "--model-config " + tiny_config() + " --steps 2"));
  EXPECT_EQ(no_data.status, 2) << no_data.output;
  EXPECT_EQ(occurrences(no_data.output, "error: option --data: a training dataset is needed (or --dry-run)"), 1u)
      << no_data.output;
}

TEST_F(Train, Bf16AutocastComputesInBf16) {
  const std::string options = "--steps 4 --log-every 1 --batch-size 2 --precision ";
  const Job bf16 = train(2, "bf16", options + "bf16"), fp32 = train(2, "fp32", options + "fp32");
  ASSERT_EQ(bf16.status, 0) << bf16.output;
  ASSERT_EQ(fp32.status, 0) << fp32.output;
  const auto a = training_lines(run_dir("bf16")), b = training_lines(run_dir("fp32"));
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  // The same start; bf16 products round differently, so the gradients and
  // the weights drift apart, but only at bf16's precision (8 mantissa bits).
  // (Wan's head starts at zero, so the first prediction is 0 in any precision.)
  for (size_t i = 0; i < a.size(); ++i) EXPECT_LT(relative(a[i]["loss"], b[i]["loss"]), 2e-2) << "step " << i + 1;
  const double drift =
      weights_difference(run_dir("bf16") + "/model.safetensors", run_dir("fp32") + "/model.safetensors");
  EXPECT_GT(drift, 1e-7);
  EXPECT_LT(drift, 1e-2);
}

// --grad-comm-dtype bf16 and fp16 against fp32 over 50 steps. The tolerance
// is derived, not measured (docs/training.md, "16-bit gradient reduction"):
// - each element of the averaged gradient carries a relative error of at
//   most 2u (a rank's gradient rounded to 16 bits, then their sum rounded
//   once): u = 2^-8 for bf16, 2^-11 for fp16;
// - Adam's m/sqrt(v) then moves by at most 2 K rho for a relative gradient
//   error rho, where K = sqrt((1-b1)^2 / (1-b2) / (1 - b1^2/b2)) bounds
//   sum |m terms| / sqrt(v) (Cauchy-Schwarz over the moments' weights);
// - so after the updates of steps s < t each weight has moved by an error of
//   at most 4 K u * sum(lr_s), and rounding errors, being independent and of
//   mean zero, add up in the loss's first-order change grad . delta with a
//   standard deviation of at most |grad|_2 times that over sqrt(3) (a
//   rounding error is uniform within its half-ulp);
// - five such standard deviations, with |grad|_2 the fp32 run's grad_norm.
// Its premises: the ranks' gradients of an element do not cancel (the sum's
// error is bounded by u times their magnitudes, not the sum's), and they stay
// in the format's normal range (fp16's ends at 6e-5; below it digits are
// lost, which is why fp16 uses more of its tolerance than bf16).
// The first step's loss is the same bits in every run: no reduction has yet acted.
TEST_F(Train, SixteenBitGradientReductionStaysWithinItsDerivedToleranceOfFp32) {
  const std::string options = "--steps 50 --log-every 1 --batch-size 2 --lr 1e-3 --grad-comm-dtype ";
  const Job fp32 = train(2, "comm-fp32", options + "fp32");
  ASSERT_EQ(fp32.status, 0) << fp32.output;
  const auto reference = training_lines(run_dir("comm-fp32"));
  ASSERT_EQ(reference.size(), 50u);
  const double b1 = 0.9, b2 = 0.999;  // wantrain's AdamW betas (training.md)
  const double k = std::sqrt((1 - b1) * (1 - b1) / (1 - b2) / (1 - b1 * b1 / b2));
  for (const auto& [dtype, u] :
       {std::pair<std::string, double>{"bf16", std::ldexp(1.0, -8)}, {"fp16", std::ldexp(1.0, -11)}}) {
    SCOPED_TRACE(dtype);
    const Job job = train(2, "comm-" + dtype, options + dtype);
    ASSERT_EQ(job.status, 0) << job.output;
    const auto lines = training_lines(run_dir("comm-" + dtype));
    ASSERT_EQ(lines.size(), 50u);
    EXPECT_EQ(lines[0]["loss"].get<double>(), reference[0]["loss"].get<double>());
    double lr_sum = 0, largest = 0, closest = 0;  // |difference| and its share of the tolerance
    for (size_t i = 1; i < lines.size(); ++i) {
      lr_sum += reference[i - 1]["lr"].get<double>();
      const double tolerance = 5 * reference[i]["grad_norm"].get<double>() * 4 * k * u / std::sqrt(3.0) * lr_sum;
      const double difference = std::abs(lines[i]["loss"].get<double>() - reference[i]["loss"].get<double>());
      EXPECT_LE(difference, tolerance) << "step " << i + 1;
      largest = std::max(largest, difference);
      closest = std::max(closest, difference / tolerance);
    }
    EXPECT_GT(largest, 0) << "the 16-bit reduction changed nothing: was it used?";
    std::cout << fmt::format("{}: largest loss difference {:.3g}, at most {:.3g} of the tolerance\n", dtype, largest,
                             closest);
  }
}

}  // namespace

namespace {

TEST(WanbenchStep, ReportsTheStepWithAndWithoutCommunicationAndTheSync) {
  const Job job =
      launch(mpi_command(2, WANTRAIN_WANBENCH,
                         "step --json --model-config " + tiny_config() +
                             " --size 8x8 --batch-size 2 --iters 2 --rounds 1 --warmup 1 --sync-iters 2 --threads 1"));
  ASSERT_EQ(job.status, 0) << job.output;
  const auto report = Json::parse(job.output.substr(job.output.find('{')));
  EXPECT_EQ(report["ranks"], 2);
  EXPECT_EQ(report["parameters"], wt::wan::parameter_count(wt::wan::load_model_config(tiny_config())));
  EXPECT_EQ(report["sync"]["bytes"].get<double>(), 4.0 * report["parameters"].get<double>());
  for (const char* variant : {"with_reducer", "comm_skipped"}) {
    const auto& v = report[variant];
    EXPECT_GT(v["step_s"].get<double>(), 0) << variant;
    // The phases are parts of the step.
    EXPECT_LE(v["data_s"].get<double>() + v["forward_s"].get<double>() + v["backward_s"].get<double>() +
                  v["comm_s"].get<double>() + v["optimizer_s"].get<double>(),
              v["step_s"].get<double>() * 1.0001)
        << variant;
    EXPECT_NEAR(v["samples_per_s"].get<double>(), 4 / v["step_s"].get<double>(), 1e-9) << variant;
  }
  EXPECT_NEAR(report["exposed_comm_s"].get<double>(),
              report["with_reducer"]["step_s"].get<double>() - report["comm_skipped"]["step_s"].get<double>(), 1e-12);
  EXPECT_EQ(report["comm_skipped"]["comm_s"].get<double>(), 0.0);  // nothing was communicated
}

// --zero N adds a ZeRO-N Engine: its step, and AdamW's moments per rank
// measured on its tensors: half of the Reducer Engine's on 2 ranks, up to
// the padding of its bucket (16 elements per rank); with ZeRO-2 the
// gradients it keeps between steps are halved too, ZeRO-1's are whole plus
// the slice.
TEST(WanbenchStep, ZeroReportsTheShardedStepAndHalfTheMoments) {
  // ZeRO-3's buckets are its units: each block, the head and the embeddings.
  std::ifstream config_file(tiny_config());
  const int64_t buckets = Json::parse(config_file)["num_layers"].get<int64_t>() + 2;
  for (const int stage : {1, 2, 3}) {
    SCOPED_TRACE("ZeRO-" + std::to_string(stage));
    const Job job =
        launch(mpi_command(2, WANTRAIN_WANBENCH,
                           "step --json --zero " + std::to_string(stage) + " --model-config " + tiny_config() +
                               " --size 8x8 --batch-size 2 --iters 2 --rounds 1 --warmup 1 "
                               "--sync-iters 2 --threads 1"));
    ASSERT_EQ(job.status, 0) << job.output;
    const auto report = Json::parse(job.output.substr(job.output.find('{')));
    const double parameters = report["parameters"].get<double>();
    EXPECT_DOUBLE_EQ(report["optimizer_state_MB_per_rank"].get<double>(), 8 * parameters / 1e6);
    EXPECT_DOUBLE_EQ(report["gradient_MB_per_rank"].get<double>(), 4 * parameters / 1e6);
    const auto& z = report["zero"];
    EXPECT_EQ(z["stage"].get<int>(), stage);
    const double sharded = z["optimizer_state_MB_per_rank"].get<double>();
    EXPECT_GE(sharded, 8 * parameters / 2 / 1e6);
    EXPECT_LE(sharded, 8 * (parameters / 2 + 16) / 1e6);
    const double gradients = z["gradient_MB_per_rank"].get<double>();
    const double slice = 4 * parameters / 2 / 1e6;
    EXPECT_GE(gradients, (stage >= 2 ? 0 : 4 * parameters / 1e6) + slice);
    EXPECT_LE(gradients, (stage >= 2 ? 0 : 4 * (parameters + 32) / 1e6) + slice + 4 * 16 * buckets / 1e6);
    // ZeRO-3 holds its slice of the weights between steps, and waited for
    // gathers inside its step.
    const double weights = z.value("weight_MB_per_rank", 0.0);
    if (stage == 3) {
      EXPECT_GE(weights, slice);
      EXPECT_LE(weights, slice + 4 * 16 * buckets / 1e6);
      EXPECT_LE(z["gather_wait_s"].get<double>(), z["step_s"].get<double>());
    } else {
      EXPECT_DOUBLE_EQ(weights, 4 * parameters / 1e6);
    }
    // Its phases are parts of its step.
    EXPECT_LE(z["data_s"].get<double>() + z["forward_s"].get<double>() + z["backward_s"].get<double>() +
                  z["comm_s"].get<double>() + z["optimizer_s"].get<double>(),
              z["step_s"].get<double>() * 1.0001);
  }
}

// --sp 2 adds an Engine whose model splits each sample over both ranks:
// one batch for the pair, so half the samples of the Reducer's step.
TEST(WanbenchStep, SpReportsTheSplitStepOfOneBatchPerGroup) {
  const Job job = launch(mpi_command(2, WANTRAIN_WANBENCH,
                                     "step --json --sp 2 --model-config " + tiny_config() +
                                         " --size 8x8 --batch-size 2 --iters 2 --rounds 1 --warmup 1 --sync-iters 2 "
                                         "--threads 1"));
  ASSERT_EQ(job.status, 0) << job.output;
  const auto report = Json::parse(job.output.substr(job.output.find('{')));
  const auto& q = report["sp"];
  EXPECT_EQ(q["ranks_per_group"].get<int>(), 2);
  EXPECT_NEAR(q["samples_per_s"].get<double>(), 2 / q["step_s"].get<double>(), 1e-9 * q["samples_per_s"].get<double>());
  const Job bad = launch(mpi_command(2, WANTRAIN_WANBENCH, "step --sp 3 --model-config " + tiny_config()));
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_EQ(occurrences(bad.output, "option --sp: 3 must divide the 2 ranks and the model's 4 heads"), 1u)
      << bad.output;
}

}  // namespace

// A singleton (a program run without mpiexec) keeps Open MPI's session
// files in a directory of its own under TMPDIR while it runs, and removes
// it when it ends: singletons side by side on a node otherwise share one,
// and one ending may pull it from under another's MPI_Init (world.cpp).
TEST(Singleton, KeepsItsOpenMpiSessionFilesInADirectoryOfItsOwn) {
  const std::string data = synth_tiny_data("singleton-data", 4, 1);
  const std::string tmp = fresh("singleton-tmp");
  std::filesystem::create_directories(tmp);
  const auto job = wt::testing::start_background("env TMPDIR=" + tmp + " WANTRAIN_TEST_DELAY=before_first_step:3 " +
                                                     WANTRAIN_WANTRAIN + " --model-config " + tiny_config() +
                                                     " --data " + data + " --output-dir " + fresh("singleton-run") +
                                                     " --steps 1 --batch-size 2 --threads 1 --backend mpi",
                                                 tmp + ".log");
  // While it runs: one wantrain-ompi-* directory, holding Open MPI's ompi.<host>.<uid> tree.
  const auto own_session = [&] {
    int found = 0;
    for (const auto& entry : std::filesystem::directory_iterator(tmp))
      if (entry.path().filename().string().rfind("wantrain-ompi-", 0) == 0)
        for (const auto& inner : std::filesystem::directory_iterator(entry.path()))
          found += inner.path().filename().string().rfind("ompi.", 0) == 0 ? 1 : 0;
    return found == 1;
  };
  EXPECT_TRUE(wt::testing::wait_until(own_session, 60)) << wt::testing::read_text(job.log);
  const Job ended = wt::testing::finish(job);
  EXPECT_EQ(ended.status, 0) << ended.output;
  EXPECT_TRUE(std::filesystem::is_empty(tmp)) << "the session directory is removed when the process ends";
  // Also when a usage error ends it.
  const Job bad = launch("env TMPDIR=" + tmp + " " + WANTRAIN_WANTRAIN + " --model-config " + tiny_config() +
                         " --data " + tmp + "/missing --output-dir " + fresh("singleton-bad") + " --threads 1");
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_TRUE(std::filesystem::is_empty(tmp)) << bad.output;
}
