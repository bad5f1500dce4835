// Buckets as users meet them: wantrain on a dataset of four latent shapes
// (two image aspect ratios, two clip lengths), made the way a user joins
// datasets (wandata merge), trained on 1 and 2 ranks, stopped and resumed.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "../common/build_paths.hpp"
#include "../common/launch.hpp"
#include "../common/train_runs.hpp"
#include "wantrain/data/dataset.hpp"

namespace {

namespace fs = std::filesystem;
using wt::testing::fresh;
using wt::testing::Job;
using wt::testing::launch;
using wt::testing::mpi_command;
using wt::testing::occurrences;
using namespace wt::testing::train_runs;

class Buckets : public ::testing::Test {
 protected:
  // Stills of 8x8 and 8x12 latents and clips of 3 and 5 latent frames, 12,
  // 10, 9 and 8 samples, joined into one dataset of 6 shards.
  static void SetUpTestSuite() {
    const std::string parts = fresh("buckets-parts");
    std::string sources;
    for (const auto& [name, frames, size, samples] :
         {std::tuple{"still", 1, "8x8", 12}, {"wide", 1, "12x8", 10}, {"short", 3, "8x8", 9}, {"long", 5, "8x8", 8}}) {
      const std::string dir = parts + "/" + name;
      const Job synth = launch(std::string(WANTRAIN_WANDATA) + " synth --out " + dir + " --samples " +
                               std::to_string(samples) + " --shards 1 --frames " + std::to_string(frames) + " --size " +
                               size + " --text-len 16 --text-dim 64 --seed 5");
      ASSERT_EQ(synth.status, 0) << synth.output;
      sources += " " + dir;
    }
    data_ = fresh("buckets-data");
    fs::remove(data_);
    const Job merge = launch(std::string(WANTRAIN_WANDATA) + " merge" + sources + " --out " + data_ + " --shards 6");
    ASSERT_EQ(merge.status, 0) << merge.output;
    ASSERT_EQ(occurrences(merge.output, "wrote 39 samples in 6 shards to " + data_ + " (4 buckets kept apart)"), 1u)
        << merge.output;
  }

  static Job train(int ranks, const std::string& dir, const std::string& options) {
    return WantrainJob(ranks).data(data_).output(dir).with("--seed 3 --log-every 1 --lr 1e-3 " + options).run();
  }

  static std::string data_;
};
std::string Buckets::data_;

TEST_F(Buckets, MergedDatasetsKeepEachShapeInShardsOfItsOwn) {
  const auto dataset = wt::data::Dataset::open(data_);
  ASSERT_EQ(dataset.buckets().size(), 4u);
  const std::vector<std::string> names = {"1x8x8", "1x12x8", "3x8x8", "5x8x8"};  // ordered by (F, H, W)
  const std::vector<int64_t> samples = {12, 10, 9, 8};
  for (size_t b = 0; b < 4; ++b) {
    EXPECT_EQ(dataset.buckets()[b].name(), names[b]);
    EXPECT_EQ(dataset.buckets()[b].samples, samples[b]);
  }
  // 6 shards shared in proportion to the samples, one at least: 12/39 x 6 = 1.8 -> 2, 1.5 -> 2, 1.4 -> 1, 1.2 -> 1.
  EXPECT_EQ(dataset.layout().shard_buckets, (std::vector<int>{0, 0, 1, 1, 2, 3}));
  const Job inspect = launch(std::string(WANTRAIN_WANDATA) + " inspect " + data_);
  ASSERT_EQ(inspect.status, 0) << inspect.output;
  EXPECT_EQ(occurrences(inspect.output, "[N,16,F,H,W] float32, in 4 buckets"), 1u) << inspect.output;
  const Job verify = launch(std::string(WANTRAIN_WANDATA) + " verify " + data_);
  EXPECT_EQ(verify.status, 0) << verify.output;
  EXPECT_EQ(occurrences(verify.output, "6 shards, 39 samples in 4 buckets"), 1u) << verify.output;
  // split's default of 2 shards becomes one per bucket; each sample kept, in order.
  const std::string split = fresh("buckets-split");
  fs::remove(split);
  const Job job = launch(std::string(WANTRAIN_WANDATA) + " split " + data_ + " --out " + split);
  ASSERT_EQ(job.status, 0) << job.output;
  const auto again = wt::data::Dataset::open(split);
  EXPECT_EQ(again.layout().shard_buckets, (std::vector<int>{0, 1, 2, 3}));
  wt::data::SampleReader before(dataset), after(again);
  for (int64_t i = 0; i < dataset.size(); ++i) EXPECT_EQ(after.prompt(i), before.prompt(i)) << i;
}

// The epoch and the memory plan as the dry run shows them. 2 ranks x 2:
// global batches of 4, so floor(n_b / 4) steps from each bucket.
TEST_F(Buckets, DryRunCountsEachBucketsStepsAndPlansTheLargest) {
  const Job job = train(2, fresh("buckets-dry"), "--batch-size 2 --dry-run");
  ASSERT_EQ(job.status, 0) << job.output;
  for (const std::string line :
       {"9 steps per epoch; 36 samples per epoch (3 dropped)", "bucket 1x8x8                12 samples:      3 steps\n",
        "bucket 1x12x8               10 samples:      2 steps (2 dropped)",
        "bucket 3x8x8                 9 samples:      2 steps (1 dropped)",
        "bucket 5x8x8                 8 samples:      2 steps\n",
        "memory plan per rank, per bucket:", "batch 2 x 80 tokens"})  // the 5-frame bucket: 5 x 4 x 4 patches
    EXPECT_EQ(occurrences(job.output, line), 1u) << line << "\n" << job.output;
  const auto largest = job.output.find("(the largest: the plan below)");
  ASSERT_NE(largest, std::string::npos) << job.output;
  const auto row = job.output.rfind('\n', largest);
  EXPECT_NE(job.output.substr(row, largest - row).find("bucket 5x8x8 "), std::string::npos) << job.output;

  // Padded epochs wrap around within each bucket: ceil(n_b / 4).
  const Job padded = train(2, fresh("buckets-dry-padded"), "--batch-size 2 --dry-run --no-drop-last");
  ASSERT_EQ(padded.status, 0) << padded.output;
  EXPECT_EQ(occurrences(padded.output, "11 steps per epoch; 44 samples per epoch (5 padded by wrap-around)"), 1u)
      << padded.output;

  // A bucket smaller than a global batch (2 x 5 here: the clips' 9 and 8
  // samples) trains on no step: said once per bucket, before training.
  const Job big = train(2, fresh("buckets-dry-big"), "--batch-size 5 --dry-run");
  ASSERT_EQ(big.status, 0) << big.output;
  for (const std::string line :
       {"bucket 3x8x8: its 9 samples are fewer than one global batch of 10, so no step trains on them",
        "bucket 5x8x8: its 8 samples are fewer than one global batch of 10, so no step trains on them"})
    EXPECT_EQ(occurrences(big.output, line), 1u) << line << "\n" << big.output;
  EXPECT_EQ(occurrences(big.output, "so no step trains on them"), 2u) << big.output;

  // Shard affinity cannot make every global batch one shape: one line, status 2.
  const Job affine = train(2, fresh("buckets-affine"), "--batch-size 2 --steps 2 --shard-affinity");
  EXPECT_EQ(affine.status, 2) << affine.output;
  EXPECT_EQ(occurrences(affine.output, "the data hold 4 latent shapes (buckets)"), 1u) << affine.output;
}

// 1 rank x 4 and 2 ranks x 2 take the same steps over the buckets, and
// validate to the same per-bucket losses; a sample is drawn at the shape of
// the sample it draws (the 5-frame one).
TEST_F(Buckets, OneRankWithTwiceTheBatchTakesTheSameStepsAsTwoRanks) {
  const std::string common = "--steps 14 --ema-decay 0.9 --text-drop 0.3 --val-data " + data_ +
                             " --val-every 7 --sample-every 14 "
                             "--sample-index 38 ";
  const auto one = fresh("buckets-1x4"), two = fresh("buckets-2x2");
  const Job a = train(1, one, common + "--batch-size 4");
  const Job b = train(2, two, common + "--batch-size 2");
  ASSERT_EQ(a.status, 0) << a.output;
  ASSERT_EQ(b.status, 0) << b.output;
  const auto reference = training_lines(one), lines = training_lines(two);
  ASSERT_EQ(reference.size(), 14u);
  ASSERT_EQ(lines.size(), 14u);
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_LT(relative(lines[i]["loss"], reference[i]["loss"]), 1e-5) << "step " << i + 1;
    EXPECT_LT(relative(lines[i]["grad_norm"], reference[i]["grad_norm"]), 1e-5) << "step " << i + 1;
  }
  EXPECT_LT(weights_difference(two + "/model.safetensors", one + "/model.safetensors"), 1e-5);
  EXPECT_LT(weights_difference(two + "/ema.safetensors", one + "/ema.safetensors"), 1e-5);

  const auto val_one = validation_lines(one), val_two = validation_lines(two);
  ASSERT_EQ(val_one.size(), 2u);
  ASSERT_EQ(val_two.size(), 2u);
  for (size_t v = 0; v < 2; ++v) {
    ASSERT_EQ(val_one[v]["val_loss_buckets"].size(), 4u) << val_one[v].dump();
    double weighted = 0;
    const std::vector<std::pair<std::string, int>> counts = {{"1x8x8", 12}, {"1x12x8", 10}, {"3x8x8", 9}, {"5x8x8", 8}};
    for (const auto& [name, n] : counts) {
      const double loss = val_one[v]["val_loss_buckets"][name];
      EXPECT_LT(relative(val_two[v]["val_loss_buckets"][name], loss), 1e-5) << name;
      weighted += loss * n / 39.0;
    }
    // The overall loss is the sample-weighted mean of the buckets'.
    EXPECT_LT(relative(val_one[v]["val_loss"], weighted), 1e-12);
  }
  EXPECT_EQ(occurrences(b.output, "per bucket: 1x8x8 "), 2u) << b.output;
  EXPECT_TRUE(fs::exists(two + "/samples/step-00000014.png")) << b.output;
}

// Stopped mid-epoch and resumed: the same steps bit for bit; resumed on 1
// rank with twice the batch: the same global batches.
TEST_F(Buckets, ResumeRepeatsTheUninterruptedRunOnAnyWorldSize) {
  const std::string options = "--steps 14 --batch-size 2 --ema-decay 0.9 --text-drop 0.3 ";
  const auto straight = fresh("buckets-straight"), stopped = fresh("buckets-stopped"), moved = fresh("buckets-moved");
  const Job a = train(2, straight, options);
  ASSERT_EQ(a.status, 0) << a.output;
  const Job b = train(2, stopped, options + "--save-every 5 --keep 5");
  ASSERT_EQ(b.status, 0) << b.output;
  for (const auto& name : {"step-00000010.h5", "step-00000014.h5", "model.safetensors", "ema.safetensors", "latest"})
    fs::remove(stopped + "/" + name);
  fs::copy(stopped, moved, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  const Job resumed = train(2, stopped, options + "--resume " + stopped + "/step-00000005.h5");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  const auto reference = training_lines(straight), lines = training_lines(stopped);
  ASSERT_EQ(lines.size(), 14u);
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i]["loss"].get<double>(), reference[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(lines[i]["grad_norm"].get<double>(), reference[i]["grad_norm"].get<double>()) << "step " << i + 1;
  }
  EXPECT_EQ(weights_difference(stopped + "/model.safetensors", straight + "/model.safetensors"), 0);
  EXPECT_EQ(weights_difference(stopped + "/ema.safetensors", straight + "/ema.safetensors"), 0);

  const Job other = train(
      1, moved, "--steps 14 --batch-size 4 --ema-decay 0.9 --text-drop 0.3 --resume " + moved + "/step-00000005.h5");
  ASSERT_EQ(other.status, 0) << other.output;
  const auto moved_lines = training_lines(moved);
  ASSERT_EQ(moved_lines.size(), 14u);
  for (size_t i = 5; i < moved_lines.size(); ++i)
    EXPECT_LT(relative(moved_lines[i]["loss"], reference[i]["loss"]), 1e-5) << "step " << i + 1;
  EXPECT_LT(weights_difference(moved + "/model.safetensors", straight + "/model.safetensors"), 1e-5);
}

// Buckets with the rest of the trainer: ZeRO-1 with TensorBoard, then a
// LoRA on the result, then a distillation from it; each trains every bucket
// (a bucket's shape is a new token grid for the adapters and the teacher).
TEST_F(Buckets, ZeroLoraAndDistillationTrainOnBuckets) {
  const std::string steps = "--steps 10 --batch-size 2 --val-data " + data_ + " --val-every 10 ";
  const auto base = fresh("buckets-zero");
  const Job zero = train(2, base, steps + "--zero 1 --tensorboard");
  ASSERT_EQ(zero.status, 0) << zero.output;
  bool has_events = false;
  for (const auto& entry : fs::directory_iterator(base + "/tb"))
    has_events = has_events || (entry.path().filename().string().rfind("events.out.tfevents", 0) == 0 &&
                                fs::file_size(entry.path()) > 0);
  EXPECT_TRUE(has_events) << zero.output;
  const auto lora = fresh("buckets-lora");
  const Job adapters = train(2, lora, steps + "--lora-rank 4 --init " + base + "/model.safetensors");
  ASSERT_EQ(adapters.status, 0) << adapters.output;
  EXPECT_TRUE(fs::exists(lora + "/lora.safetensors"));
  const auto student = fresh("buckets-distill");
  const Job distill =
      train(2, student,
            steps + "--mode distill --teacher " + base + "/model.safetensors " + "--teacher-config " + tiny_config());
  ASSERT_EQ(distill.status, 0) << distill.output;
  for (const auto& dir : {base, lora, student}) {
    const auto lines = training_lines(dir);
    ASSERT_EQ(lines.size(), 10u) << dir;
    for (const auto& line : lines) EXPECT_TRUE(std::isfinite(line["loss"].get<double>())) << dir;
    const auto val = validation_lines(dir);
    ASSERT_EQ(val.size(), 1u) << dir;
    EXPECT_EQ(val[0]["val_loss_buckets"].size(), 4u) << dir;
  }
}

}  // namespace
