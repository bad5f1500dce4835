// A VACE model's branch trained alone, in full (--trainable vace without
// --lora-rank), as users run it: from a text-to-video model's weights under a
// fresh branch, on 1 and 2 ranks, resumed, with swapped base blocks, sampled
// on a sample rank, exported with --merge; read back through metrics.jsonl,
// checkpoints and the weights files.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <string>

#include "../common/build_paths.hpp"
#include "../common/launch.hpp"
#include "../common/sample_shard.hpp"
#include "../common/train_runs.hpp"
#include "wantrain/ckpt/checkpoint.hpp"
#include "wantrain/io/safetensors.hpp"
#include "wantrain/wan/model/model_config.hpp"

namespace {

using wt::testing::fresh;
using wt::testing::Job;
using wt::testing::launch;
using wt::testing::mpi_command;
using wt::testing::occurrences;
using namespace wt::testing::train_runs;

std::string vace_config() { return std::string(WANTRAIN_SOURCE_DIR) + "/data/configs/wan-tiny-vace.json"; }

class VaceBranchRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = fresh("vace-branch-inputs");
    data_ = dir + "/data";
    const Job synth =
        launch(std::string(WANTRAIN_WANDATA) + " synth --out " + data_ +
               " --samples 16 --shards 2 --frames 3 --size 8x8 --text-len 16 --text-dim 64 --seed 5 --condition vace");
    ASSERT_EQ(synth.status, 0) << synth.output;
    // Two text-to-video bases of wan-tiny's shape (the head drawn: a zero
    // head, Wan's initialisation, would pass no gradient to the branch).
    for (const auto& [name, seed] : {std::pair{"a", 3}, {"b", 4}}) {
      const Job exported = launch(std::string(WANTRAIN_WANTRAIN) + " export --model-config " + tiny_config() +
                                  " --seed " + std::to_string(seed) + " --random-head --out " + base(name));
      ASSERT_EQ(exported.status, 0) << exported.output;
    }
  }
  static std::string base(const std::string& which) {
    return run_dir("vace-branch-inputs") + "/t2v-" + which + ".safetensors";
  }
  static Job train(int ranks, const std::string& name, const std::string& options, bool fresh_dir = true) {
    const std::string dir = fresh_dir ? fresh(name) : run_dir(name);
    return WantrainJob(ranks)
        .model(vace_config())
        .data(data_)
        .output(dir)
        .with("--log-every 1 --trainable vace --lr 1e-2 --seed 7 " + options)
        .run();
  }
  static std::string data_;
};
std::string VaceBranchRun::data_;

// The run's weights file: the base's tensors exactly as the text-to-video
// file holds them, the branch's trained (changed from their draw).
void expect_base_kept_and_branch_trained(const std::string& weights, const std::string& t2v) {
  const auto trained = wt::io::SafetensorsFile::open(weights), base = wt::io::SafetensorsFile::open(t2v);
  size_t base_tensors = 0, branch_tensors = 0;
  for (const auto& entry : trained.entries()) {
    if (wt::wan::in_vace_branch(entry.name)) {
      ++branch_tensors;
      continue;
    }
    ++base_tensors;
    const auto* kept = base.find(entry.name);
    ASSERT_NE(kept, nullptr) << entry.name;
    EXPECT_TRUE(torch::equal(trained.read(entry), base.read(*kept))) << entry.name;
  }
  EXPECT_EQ(base_tensors, base.entries().size());
  EXPECT_GT(branch_tensors, 0u);
}

// 2 ranks x B train the branch as 1 rank x 2B (ZeRO-1 on the two); the base
// is never touched; checkpoints hold the branch alone, with the base's
// checksum; a resume is bitwise, and refused on another base or without
// --trainable vace.
TEST_F(VaceBranchRun, TwoRanksEqualOneTheBaseStaysAndAResumeIsBitwise) {
  const std::string common = "--init " + base("a") + " --ema-decay 0.9 ";
  const Job one = train(1, "vace-branch-1x4", common + "--batch-size 4 --steps 6");
  const Job two = train(2, "vace-branch-2x2", common + "--batch-size 2 --steps 6 --zero 1");
  ASSERT_EQ(one.status, 0) << one.output;
  ASSERT_EQ(two.status, 0) << two.output;
  EXPECT_EQ(
      occurrences(one.output,
                  "trainable: the VACE branch, " +
                      std::to_string(wt::wan::vace_branch_parameter_count(wt::wan::load_model_config(vace_config()))) +
                      " parameters trained in full"),
      1u)
      << one.output;
  const auto a = training_lines(run_dir("vace-branch-1x4")), b = training_lines(run_dir("vace-branch-2x2"));
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 6u);
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_LT(relative(b[i]["loss"].get<double>(), a[i]["loss"].get<double>()), 1e-5) << "step " << i + 1;
  EXPECT_LT(a.back()["loss"].get<double>(), a.front()["loss"].get<double>());  // the branch learns
  for (const char* file : {"/model.safetensors", "/ema.safetensors"}) {
    EXPECT_LT(weights_difference(run_dir("vace-branch-2x2") + file, run_dir("vace-branch-1x4") + file), 1e-5) << file;
    expect_base_kept_and_branch_trained(run_dir("vace-branch-1x4") + file, base("a"));
    expect_base_kept_and_branch_trained(run_dir("vace-branch-2x2") + file, base("a"));
  }
  // The checkpoint: the branch alone, and the base it was trained on.
  const std::string latest = run_dir("vace-branch-1x4") + "/latest";
  const auto contents = wt::ckpt::read_weights_contents(latest);
  ASSERT_FALSE(contents.model.empty());
  for (const auto& [name, shape] : contents.model) EXPECT_TRUE(wt::wan::in_vace_branch(name)) << name;
  EXPECT_EQ(wt::ckpt::read_objective(latest).state.at("vace_base").rfind("crc32:", 0), 0u);

  ASSERT_EQ(train(1, "vace-branch-resumed", common + "--batch-size 4 --steps 3").status, 0);
  const Job resumed = train(1, "vace-branch-resumed", common + "--batch-size 4 --steps 6 --resume auto", false);
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  for (const char* file : {"/model.safetensors", "/ema.safetensors"})
    EXPECT_EQ(weights_difference(run_dir("vace-branch-resumed") + file, run_dir("vace-branch-1x4") + file), 0) << file;

  const Job other_base =
      train(1, "vace-branch-other-base", "--init " + base("b") + " --batch-size 4 --steps 8 --resume " + latest);
  EXPECT_EQ(other_base.status, 2) << other_base.output;
  EXPECT_EQ(occurrences(other_base.output, "its VACE branch was trained on base weights crc32:"), 1u)
      << other_base.output;
  const Job whole = WantrainJob(1)
                        .model(vace_config())
                        .data(data_)
                        .output(fresh("vace-branch-whole"))
                        .with("--init " + base("a") + " --batch-size 4 --steps 8 --resume " + latest)
                        .run();
  EXPECT_EQ(whole.status, 2) << whole.output;
  EXPECT_EQ(occurrences(whole.output,
                        "its run trained the VACE branch alone, this run the whole model; resume with the same "
                        "--trainable"),
            1u)
      << whole.output;
}

// Under ZeRO-3 each VACE block is sharded in the unit of the base block it
// follows: the whole VACE model and its branch trained alone take, on 2
// ranks x 2, the steps of 1 rank x 4 (weights and EMA files within 1e-5).
TEST_F(VaceBranchRun, ZeroThreeShardsTheVaceBlocksWithTheirBaseBlocks) {
  for (const std::string trainable : {"vace", "all"}) {
    SCOPED_TRACE(trainable);
    const auto run = [&](int ranks, const std::string& name, const std::string& options) {
      return WantrainJob(ranks)
          .model(vace_config())
          .data(data_)
          .output(fresh(name))
          .with("--log-every 1 --lr 1e-2 --seed 7 --init " + base("a") + " --ema-decay 0.9 --steps 4 --trainable " +
                trainable + " " + options)
          .run();
    };
    const Job one = run(1, "vace-zero3-1x4", "--batch-size 4");
    const Job two = run(2, "vace-zero3-2x2", "--batch-size 2 --zero 3");
    ASSERT_EQ(one.status, 0) << one.output;
    ASSERT_EQ(two.status, 0) << two.output;
    EXPECT_EQ(occurrences(two.output, "sharded over the 2 ranks (ZeRO-3, blocks gathered in fp32)"), 1u) << two.output;
    const auto a = training_lines(run_dir("vace-zero3-1x4")), b = training_lines(run_dir("vace-zero3-2x2"));
    ASSERT_EQ(a.size(), 4u);
    ASSERT_EQ(b.size(), 4u);
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_LT(relative(b[i]["loss"].get<double>(), a[i]["loss"].get<double>()), 1e-5) << "step " << i + 1;
    for (const char* file : {"/model.safetensors", "/ema.safetensors"})
      EXPECT_LT(weights_difference(run_dir("vace-zero3-2x2") + file, run_dir("vace-zero3-1x4") + file), 1e-5) << file;
  }
}

// The base's blocks may be swapped (a copy on the CPU: the same run bit for
// bit, its weights and EMA files whole), and a sample rank draws what the
// run draws inline: the whole model from the branch it is sent (the EMA's)
// and the base it built.
TEST_F(VaceBranchRun, SwappedBaseBlocksAndASampleRankTrainAndSampleAsInline) {
  const std::string common = "--init " + base("a") + " --batch-size 4 --steps 4 --ema-decay 0.9 --sample-every 4 " +
                             "--sample-steps 2 --sample-cfg 3 ";
  const Job plain = train(1, "vace-branch-plain", common);
  const Job swapped = train(1, "vace-branch-swapped", common + "--blocks-to-swap 2");
  ASSERT_EQ(plain.status, 0) << plain.output;
  ASSERT_EQ(swapped.status, 0) << swapped.output;
  EXPECT_EQ(occurrences(swapped.output, "block swap: the frozen weights of blocks 0 to 1"), 1u) << swapped.output;
  expect_same_losses(run_dir("vace-branch-plain"), run_dir("vace-branch-swapped"), 4);
  for (const char* file : {"/model.safetensors", "/ema.safetensors"})
    EXPECT_EQ(weights_difference(run_dir("vace-branch-swapped") + file, run_dir("vace-branch-plain") + file), 0)
        << file;

  const auto sample_of = [](const std::string& metrics) {
    std::ifstream in(metrics);
    Json found;
    for (std::string line; std::getline(in, line);)
      if (const auto json = Json::parse(line); json.contains("sample_correlation")) found = json;
    return found;
  };
  const Json inline_sample = sample_of(run_dir("vace-branch-plain") + "/metrics.jsonl");
  ASSERT_FALSE(inline_sample.is_null()) << plain.output;
  const Job sampled = train(2, "vace-branch-sample-rank", common + "--sample-ranks 1");
  ASSERT_EQ(sampled.status, 0) << sampled.output;
  const Json drawn = sample_of(run_dir("vace-branch-sample-rank") + "/samples/metrics.jsonl");
  ASSERT_FALSE(drawn.is_null()) << sampled.output;
  EXPECT_EQ(drawn["step"], 4);
  EXPECT_LT(relative(drawn["sample_mse"], inline_sample["sample_mse"]), 1e-5);
  EXPECT_LT(std::abs(drawn["sample_correlation"].get<double>() - inline_sample["sample_correlation"].get<double>()),
            1e-5);
}

// A LoRA run's VACE blocks are frozen (here its adapters are on them alone,
// --trainable vace) and swap too, after the base's
// (--blocks-to-swap past num_layers: wan-tiny-vace's 2 blocks, then its
// VACE block): on the CPU, where the copy is a copy, the run without
// swapping bit for bit, with the blocks recomputed in backward or not. A
// branch trained alone keeps its trained VACE blocks: one line.
TEST_F(VaceBranchRun, ALoraRunsVaceBlocksSwapAfterTheBase) {
  for (const std::string checkpointing : {"", "--grad-checkpoint blocks "}) {
    SCOPED_TRACE(checkpointing);
    const std::string common =
        "--init " + base("a") + " --batch-size 4 --steps 3 --lora-rank 4 --base-precision fp32 " + checkpointing;
    const Job plain = train(1, "vace-lora-plain", common);
    const Job swapped = train(1, "vace-lora-swapped", common + "--blocks-to-swap 3");
    ASSERT_EQ(plain.status, 0) << plain.output;
    ASSERT_EQ(swapped.status, 0) << swapped.output;
    EXPECT_EQ(occurrences(swapped.output, "block swap: the frozen weights of blocks 0 to 1 and VACE blocks 0 to 0"), 1u)
        << swapped.output;
    expect_same_losses(run_dir("vace-lora-plain"), run_dir("vace-lora-swapped"), 3);
    EXPECT_EQ(weights_difference(run_dir("vace-lora-swapped") + "/lora.safetensors",
                                 run_dir("vace-lora-plain") + "/lora.safetensors"),
              0);
  }
  const Job branch = train(1, "vace-branch-too-many", "--init " + base("a") + " --steps 2 --blocks-to-swap 3");
  EXPECT_EQ(branch.status, 2) << branch.output;
  EXPECT_EQ(occurrences(branch.output,
                        "option --blocks-to-swap: 3: the model has 2 blocks, and its VACE blocks are "
                        "trained (0 to 2 may be swapped)"),
            1u)
      << branch.output;
}

// wantrain export --merge BASE gives the whole model, the run's own weights
// file; each misuse is one line.
TEST_F(VaceBranchRun, ExportWithTheBaseIsTheWholeModelAndMisusesAreOneLine) {
  const std::string dir = fresh("vace-branch-export");
  const Job run = train(1, "vace-branch-export", "--init " + base("a") + " --batch-size 4 --steps 2");
  ASSERT_EQ(run.status, 0) << run.output;
  const std::string exporter = std::string(WANTRAIN_WANTRAIN) + " export --checkpoint " + dir + "/latest --out " + dir;
  const Job merged = launch(exporter + "/merged.safetensors --merge " + base("a"));
  ASSERT_EQ(merged.status, 0) << merged.output;
  EXPECT_EQ(weights_difference(dir + "/merged.safetensors", dir + "/model.safetensors"), 0);

  const Job alone = launch(exporter + "/alone.safetensors");
  EXPECT_EQ(alone.status, 2) << alone.output;
  EXPECT_EQ(occurrences(alone.output, "holds a VACE branch trained alone (on base crc32:"), 1u) << alone.output;
  const Job wrong = launch(exporter + "/wrong.safetensors --merge " + base("b"));
  EXPECT_EQ(wrong.status, 2) << wrong.output;
  EXPECT_EQ(occurrences(wrong.output, "outside the VACE branch, but the branch of checkpoint"), 1u) << wrong.output;
  const Job sample = launch(std::string(WANTRAIN_WANSAMPLE) + " --checkpoint " + dir + "/latest --data " + data_ +
                            " --steps 2 --out " + dir + "/sample.h5");
  EXPECT_EQ(sample.status, 2) << sample.output;
  EXPECT_EQ(occurrences(sample.output, "holds only a VACE branch trained alone"), 1u) << sample.output;
  // From the run's weights file, the whole model, wansample samples.
  const Job from_weights =
      launch(std::string(WANTRAIN_WANSAMPLE) + " --weights " + dir + "/model.safetensors --model-config " +
             vace_config() + " --data " + data_ + " --steps 2 --threads 1 --out " + dir + "/sample.h5");
  EXPECT_EQ(from_weights.status, 0) << from_weights.output;
  // On 2 ranks with --shard-weights (each VACE block sharded with its base
  // block, gathered around its use): the 2 ranks' sample, bit for bit.
  const std::string on_two = "--weights " + dir + "/model.safetensors --model-config " + vace_config() + " --data " +
                             data_ + " --steps 2 --threads 1 --out " + dir;
  const Job whole = launch(mpi_command(2, WANTRAIN_WANSAMPLE, on_two + "/sample-2.h5"));
  const Job sharded = launch(mpi_command(2, WANTRAIN_WANSAMPLE, on_two + "/sample-sharded.h5 --shard-weights"));
  ASSERT_EQ(whole.status, 0) << whole.output;
  ASSERT_EQ(sharded.status, 0) << sharded.output;
  EXPECT_EQ(occurrences(sharded.output, "sharded over 2 ranks: "), 1u) << sharded.output;
  EXPECT_TRUE(torch::equal(wt::testing::sampled_latents(dir + "/sample-sharded.h5"),
                           wt::testing::sampled_latents(dir + "/sample-2.h5")));

  const Job swap_and_zero3 = WantrainJob(2)
                                 .model(vace_config())
                                 .data(data_)
                                 .output(fresh("vace-branch-refused"))
                                 .with("--trainable vace --steps 2 --zero 3 --blocks-to-swap 1")
                                 .run();
  EXPECT_EQ(swap_and_zero3.status, 2) << swap_and_zero3.output;
  EXPECT_EQ(occurrences(swap_and_zero3.output,
                        "option --blocks-to-swap: swaps a frozen base's blocks, and with --zero 3 the blocks are "
                        "ZeRO-3's units"),
            1u)
      << swap_and_zero3.output;
  const Job t2v = WantrainJob(1)
                      .data(synth_tiny_data("vace-branch-t2v-data", 4, 1))
                      .output(fresh("vace-branch-t2v"))
                      .with("--trainable vace --steps 2")
                      .run();
  EXPECT_EQ(t2v.status, 2) << t2v.output;
  EXPECT_EQ(occurrences(t2v.output, "option --trainable: vace trains a VACE model's VACE branch, and model config " +
                                        tiny_config() + " (t2v) has none"),
            1u)
      << t2v.output;
}

}  // namespace
