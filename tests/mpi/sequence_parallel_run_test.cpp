// --sp N and --zero 3 in whole wantrain jobs: ranks that split each
// sample's tokens, or the weights, take the steps of one rank with the
// whole batch (10 steps, clipped, with an EMA, caption dropout and
// validation): --sp alone and beside data parallelism (with checkpointed
// blocks), ZeRO-2 and ZeRO-3; ZeRO-3 on 4 ranks with checkpointed blocks
// and a training sample; bad values are one line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "../common/build_paths.hpp"
#include "../common/launch.hpp"
#include "../common/train_runs.hpp"

namespace {

using wt::testing::fresh;
using wt::testing::Job;
using wt::testing::launch;
using wt::testing::mpi_command;
using wt::testing::occurrences;
using namespace wt::testing::train_runs;

class SequenceParallelRun : public ::testing::Test {
 protected:
  // 10x10 latents: 25 tokens, so a split over 2 ranks pads the last part.
  static void SetUpTestSuite() {
    data_ = fresh("sp-data");
    const Job synth = launch(std::string(WANTRAIN_WANDATA) + " synth --out " + data_ +
                             " --samples 16 --shards 2 --frames 1 --size 10x10 --text-len 16 --text-dim 64 --seed 3");
    ASSERT_EQ(synth.status, 0) << synth.output;
  }
  static Job train(int ranks, const std::string& name, const std::string& options) {
    return WantrainJob(ranks)
        .data(data_)
        .output(fresh(name))
        .with("--val-data " + data_ +
              " --val-every 5 --seed 7 --steps 10 --log-every 1 --lr 1e-3 --clip 0.5 --ema-decay 0.9 --text-drop 0.3 " +
              options)
        .run();
  }
  // Every logged step's loss and gradient norm, the validation losses and
  // the final weights and EMA of two runs, within `tolerance`.
  static void expect_same_run(const std::string& a, const std::string& b, double tolerance) {
    const auto x = training_lines(run_dir(a)), y = training_lines(run_dir(b));
    ASSERT_EQ(x.size(), 10u);
    ASSERT_EQ(y.size(), 10u);
    EXPECT_GT(x[0]["grad_norm"].get<double>(), 0.5) << "the test means to clip";
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_LT(relative(y[i]["loss"], x[i]["loss"]), tolerance) << b << " step " << i + 1;
      EXPECT_LT(relative(y[i]["grad_norm"], x[i]["grad_norm"]), tolerance) << b << " step " << i + 1;
    }
    const auto vx = validation_lines(run_dir(a)), vy = validation_lines(run_dir(b));
    ASSERT_EQ(vx.size(), 2u);
    ASSERT_EQ(vy.size(), 2u);
    for (size_t i = 0; i < vx.size(); ++i) EXPECT_LT(relative(vy[i]["val_loss"], vx[i]["val_loss"]), tolerance) << b;
    for (const std::string file : {"model", "ema"})
      EXPECT_LT(weights_difference(run_dir(b) + "/" + file + ".safetensors", run_dir(a) + "/" + file + ".safetensors"),
                tolerance)
          << b << " " << file;
  }
  static std::string data_;
};
std::string SequenceParallelRun::data_;

TEST_F(SequenceParallelRun, SplitSequencesTakeTheStepsOfOneRankWithTheGroupsBatch) {
  const Job one = train(1, "sp-one", "--batch-size 4");
  const Job split = train(2, "sp-2", "--batch-size 4 --sp 2");
  const Job both = train(4, "sp-dp2", "--batch-size 2 --sp 2 --grad-checkpoint blocks");
  const Job sharded = train(4, "sp-dp2-zero2", "--batch-size 2 --sp 2 --zero 2");
  const Job stage3 = train(4, "sp-dp2-zero3", "--batch-size 2 --sp 2 --zero 3");
  for (const Job* job : {&one, &split, &both, &sharded, &stage3}) ASSERT_EQ(job->status, 0) << job->output;
  EXPECT_EQ(occurrences(split.output, "effective batch: 4 per group x 1 sequence-parallel groups of 2 ranks"), 1u)
      << split.output;
  EXPECT_EQ(occurrences(both.output, "effective batch: 2 per group x 2 sequence-parallel groups of 2 ranks"), 1u)
      << both.output;
  EXPECT_EQ(occurrences(split.output, "25 tokens (13 on each of 2 ranks)"), 1u) << split.output;
  expect_same_run("sp-one", "sp-2", 1e-5);
  expect_same_run("sp-one", "sp-dp2", 1e-5);
  expect_same_run("sp-one", "sp-dp2-zero2", 1e-5);
  expect_same_run("sp-one", "sp-dp2-zero3", 1e-5);
}

// ZeRO-3 on 4 ranks, each block gathered for its forward and again for its
// backward, where a checkpointed block is recomputed inside its gathered
// unit; validation and the training sample (rank 0 alone) hold the weights
// whole.
TEST_F(SequenceParallelRun, ZeroThreeOnFourRanksTakesTheStepsOfOneRank) {
  const Job one = train(1, "z3-one", "--batch-size 4");
  const Job stage3 = train(4, "z3-4", "--batch-size 1 --zero 3 --grad-checkpoint blocks --sample-every 10");
  ASSERT_EQ(one.status, 0) << one.output;
  ASSERT_EQ(stage3.status, 0) << stage3.output;
  EXPECT_EQ(
      occurrences(stage3.output, "gradients and weights sharded over the 4 ranks (ZeRO-3, blocks gathered in fp32)"),
      1u)
      << stage3.output;
  expect_same_run("z3-one", "z3-4", 1e-5);
  EXPECT_TRUE(std::filesystem::exists(run_dir("z3-4") + "/samples/step-00000010.png")) << stage3.output;
}

TEST_F(SequenceParallelRun, GroupsThatDoNotFitAreOneLine) {
  const Job uneven = train(2, "sp-bad", "--batch-size 2 --sp 3");
  EXPECT_EQ(uneven.status, 2) << uneven.output;
  EXPECT_EQ(occurrences(uneven.output, "option --sp: is 3: it must divide the job's 2 ranks"), 1u) << uneven.output;
  // One head cannot be split over 2 ranks.
  const std::string dir = fresh("sp-heads"), config = dir + "/one-head.json";
  std::filesystem::create_directories(dir);
  std::ifstream in(tiny_config());
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text.replace(text.find("\"num_heads\": 4"), 14, "\"num_heads\": 1");
  std::ofstream(config) << text;
  const Job heads = launch(mpi_command(2, WANTRAIN_WANTRAIN,
                                       "--model-config " + config + " --data " + data_ + " --output-dir " +
                                           fresh("sp-bad-heads") + " --threads 1 --steps 1 --sp 2"));
  EXPECT_EQ(heads.status, 2) << heads.output;
  EXPECT_EQ(occurrences(heads.output, "option --sp: is 2: model config " + config + "'s 1 heads do not split"), 1u)
      << heads.output;
}

}  // namespace
