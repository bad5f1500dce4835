// --zero 1 (ZeRO-1: AdamW state and EMA sharded over the ranks), --zero 2
// (the gradients too) and --zero 3 (and the weights) in whole wantrain jobs: the same run as without
// sharding, checkpoints that resume on another world size and under any
// --zero, export, bad input.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <string>

#include "../common/build_paths.hpp"
#include "../common/launch.hpp"
#include "../common/train_runs.hpp"
#include "wantrain/ckpt/checkpoint.hpp"
#include "wantrain/ckpt/directory.hpp"

namespace {

namespace fs = std::filesystem;
using wt::testing::fresh;
using wt::testing::Job;
using wt::testing::launch;
using wt::testing::mpi_command;
using wt::testing::occurrences;
using namespace wt::testing::train_runs;

class Zero : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { data_ = synth_tiny_data("zero-data", 32, 5); }
  // Steps 1-4 and 5-8 of one run: clipped at step 1, with an EMA.
  static WantrainJob job(int ranks, const std::string& dir, const std::string& options) {
    return WantrainJob(ranks).data(data_).output(dir).with(
        "--seed 7 --steps 8 --log-every 1 --lr 1e-3 --clip 0.5 --ema-decay 0.9 --text-drop 0.3 " + options);
  }
  static Job train(int ranks, const std::string& name, const std::string& options, bool fresh_dir = true) {
    return job(ranks, fresh_dir ? fresh(name) : run_dir(name), options).run();
  }
  static std::string data_;
};
std::string Zero::data_;

// Every tensor of two checkpoints' model, EMA and AdamW state, read whole
// (a sharded one gathered from its shard files), within `tolerance`
// (weights and EMA also within `weight_atol` absolute; default tolerance / 100).
void expect_same_state(const std::string& a_path, const std::string& b_path, double tolerance,
                       double weight_atol = -1) {
  if (weight_atol < 0) weight_atol = tolerance * 1e-2;
  const auto a = wt::ckpt::read_checkpoint(a_path), b = wt::ckpt::read_checkpoint(b_path);
  auto by_name = [](const wt::ckpt::NamedTensors& list) {
    return std::map<std::string, at::Tensor>(list.begin(), list.end());
  };
  for (const auto& [group, x, y] : {std::tuple{"model", &a.model, &b.model}, std::tuple{"ema", &a.ema, &b.ema}}) {
    ASSERT_FALSE(x->empty()) << group;
    ASSERT_EQ(x->size(), y->size()) << group;
    const auto other = by_name(*y);
    for (const auto& [name, t] : *x)
      EXPECT_TRUE(torch::allclose(t, other.at(name), tolerance, weight_atol)) << group << " " << name;
  }
  ASSERT_EQ(a.optim.size(), a.model.size());
  ASSERT_EQ(a.optim.size(), b.optim.size());
  std::map<std::string, const wt::ckpt::OptimizerSlot*> slots;
  for (const auto& slot : b.optim) slots.emplace(slot.name, &slot);
  for (const auto& slot : a.optim) {
    const auto* other = slots.at(slot.name);
    EXPECT_EQ(slot.step, other->step) << slot.name;
    EXPECT_TRUE(torch::allclose(slot.exp_avg, other->exp_avg, tolerance, tolerance * 1e-2)) << slot.name;
    EXPECT_TRUE(torch::allclose(slot.exp_avg_sq, other->exp_avg_sq, tolerance, tolerance * 1e-6)) << slot.name;
  }
}

// 2 ranks with the AdamW state and EMA sharded take the same steps as 2
// ranks with them replicated, and their checkpoints hold the same state.
TEST_F(Zero, ShardedRunEqualsReplicatedRun) {
  const Job replicated = train(2, "zero-0", "--batch-size 2 --save-every 4");
  const Job sharded = train(2, "zero-1", "--batch-size 2 --save-every 4 --zero 1");
  ASSERT_EQ(replicated.status, 0) << replicated.output;
  ASSERT_EQ(sharded.status, 0) << sharded.output;
  EXPECT_EQ(occurrences(sharded.output, "; state and EMA sharded over the 2 ranks (ZeRO-1)"), 1u) << sharded.output;
  // Run `name`'s logged losses and gradient norms, and its weights and EMA, against zero-0's.
  auto expect_same_steps = [](const std::string& name, double tolerance) {
    const auto a = training_lines(run_dir("zero-0")), b = training_lines(run_dir(name));
    ASSERT_EQ(a.size(), 8u);
    ASSERT_EQ(b.size(), 8u);
    EXPECT_GT(a[0]["grad_norm"].get<double>(), 0.5) << "the test means to clip";
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_LT(relative(b[i]["loss"], a[i]["loss"]), tolerance) << name << " step " << i + 1;
      EXPECT_LT(relative(b[i]["grad_norm"], a[i]["grad_norm"]), tolerance) << name << " step " << i + 1;
    }
    for (const std::string file : {"model", "ema"})
      EXPECT_LT(weights_difference(run_dir(name) + "/" + file + ".safetensors",
                                   run_dir("zero-0") + "/" + file + ".safetensors"),
                tolerance)
          << name << " " << file;
  };
  expect_same_steps("zero-1", 1e-6);
  // ZeRO-2 with 2 micro-steps of 1: each micro-step's gradients reduced on
  // their own, so the same steps up to the order of the sums.
  const Job stage2 = train(2, "zero-2", "--batch-size 1 --grad-accum 2 --save-every 4 --zero 2");
  ASSERT_EQ(stage2.status, 0) << stage2.output;
  EXPECT_EQ(occurrences(stage2.output, "; state, EMA and gradients sharded over the 2 ranks (ZeRO-2)"), 1u)
      << stage2.output;
  expect_same_steps("zero-2", 1e-5);
  // Gradients summed in another order can round apart by an ulp, which
  // Adam's normalisation carries into the step of a weight whose gradient
  // is near zero: up to 3e-7 measured here. 2e-6 is 1/4000 of the 8e-3
  // that 8 steps of lr 1e-3 can move a weight.
  expect_same_state(run_dir("zero-2") + "/latest", run_dir("zero-0") + "/latest", 1e-5, 2e-6);
  // ZeRO-3 likewise: the weights gathered unit by unit, reduced as ZeRO-2's.
  const Job stage3 = train(2, "zero-3", "--batch-size 1 --grad-accum 2 --save-every 4 --zero 3");
  ASSERT_EQ(stage3.status, 0) << stage3.output;
  EXPECT_EQ(occurrences(stage3.output, "; state, EMA, gradients and weights sharded over the 2 ranks (ZeRO-3"), 1u)
      << stage3.output;
  expect_same_steps("zero-3", 1e-5);
  expect_same_state(run_dir("zero-3") + "/latest", run_dir("zero-0") + "/latest", 1e-5, 2e-6);
  // The sharded checkpoint: rank 0's main file and one shard per rank.
  const std::string dir = run_dir("zero-1");
  for (const std::string name : {"step-00000008.h5", "step-00000008.zero-0-of-2.h5", "step-00000008.zero-1-of-2.h5",
                                 "step-00000004.zero-1-of-2.h5"})
    EXPECT_TRUE(fs::exists(dir + "/" + name)) << name;
  EXPECT_EQ(wt::ckpt::read_checkpoint(dir + "/latest").version, wt::ckpt::kShardedVersion);
  expect_same_state(dir + "/latest", run_dir("zero-0") + "/latest", 1e-6);
  // Pruning takes a checkpoint's shards with it.
  const Job pruned = train(2, "zero-keep", "--batch-size 2 --save-every 2 --keep 1 --zero 1");
  ASSERT_EQ(pruned.status, 0) << pruned.output;
  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(run_dir("zero-keep")))
    if (entry.path().filename().string().rfind("step-", 0) == 0) left.push_back(entry.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"step-00000008.h5", "step-00000008.zero-0-of-2.h5",
                                            "step-00000008.zero-1-of-2.h5"}));
  // A distillation teacher from the sharded checkpoint takes its EMA, gathered
  // from the shards: the same weights (checksum) as the EMA file the run wrote.
  std::string checksums[2];
  const std::string teachers[2] = {
      "--teacher " + dir + "/latest",
      "--teacher " + dir + "/ema.safetensors --teacher-config " + dir + "/model-config.json"};
  for (int t = 0; t < 2; ++t) {
    const Job distill = launch(mpi_command(1, WANTRAIN_WANTRAIN,
                                           "--mode distill " + teachers[t] + " --model-config " + tiny_config() +
                                               " --data " + data_ + " --output-dir " + fresh("zero-teacher") +
                                               " --threads 1 --steps 1 --batch-size 2 --teacher-precision bf16"));
    ASSERT_EQ(distill.status, 0) << distill.output;
    const auto at = distill.output.find("checksum crc32:");
    ASSERT_NE(at, std::string::npos) << distill.output;
    checksums[t] = distill.output.substr(at, 23);
    if (t == 0) {
      EXPECT_NE(distill.output.find("EMA weights of checkpoint step 8"), std::string::npos) << distill.output;
    }
  }
  EXPECT_EQ(checksums[0], checksums[1]);
  // Export gathers the EMA from the shards.
  const Job exported = launch(std::string(WANTRAIN_WANTRAIN) + " export --checkpoint " + dir + "/latest --ema --out " +
                              dir + "/exported-ema.safetensors");
  ASSERT_EQ(exported.status, 0) << exported.output;
  EXPECT_EQ(weights_difference(dir + "/exported-ema.safetensors", dir + "/ema.safetensors"), 0);
}

// A checkpoint resumes under any --zero on any world size: a sharded one
// with or without sharding, a replicated one with sharding, each taking the
// uninterrupted run's last steps.
TEST_F(Zero, CheckpointsResumeAcrossWorldSizesAndZeroSettings) {
  const Job sharded = train(2, "zero-full", "--batch-size 2 --save-every 4 --zero 1");
  const Job replicated = train(2, "zero-full-0", "--batch-size 2 --save-every 4");
  ASSERT_EQ(sharded.status, 0) << sharded.output;
  ASSERT_EQ(replicated.status, 0) << replicated.output;
  const std::string from_sharded = " --resume " + run_dir("zero-full") + "/step-00000004.h5";
  const std::string from_replicated = " --resume " + run_dir("zero-full-0") + "/step-00000004.h5";
  const std::map<std::string, Job> resumed = {
      {"sharded-on-2-sharded", train(2, "zero-r1", "--batch-size 2 --zero 1" + from_sharded)},
      {"replicated-on-2-sharded", train(2, "zero-r2", "--batch-size 2 --zero 1" + from_replicated)},
      {"sharded-on-1-replicated", train(1, "zero-r3", "--batch-size 4" + from_sharded)},
      {"replicated-on-1-sharded", train(1, "zero-r4", "--batch-size 4 --zero 1" + from_replicated)},
      {"sharded-on-2-zero-2", train(2, "zero-r5", "--batch-size 2 --zero 2" + from_sharded)},
      {"sharded-on-2-zero-3", train(2, "zero-r6", "--batch-size 2 --zero 3" + from_sharded)},
  };
  for (const auto& [what, job] : resumed) ASSERT_EQ(job.status, 0) << what << "\n" << job.output;
  const std::string uninterrupted = run_dir("zero-full") + "/model.safetensors";
  // 2 ranks: the uninterrupted run's arithmetic.
  // (ZeRO-2 with one micro-step reduces as ZeRO-1 does.)
  for (const std::string name : {"zero-r1", "zero-r2", "zero-r5", "zero-r6"}) {
    EXPECT_LT(weights_difference(run_dir(name) + "/model.safetensors", uninterrupted), 1e-6) << name;
    EXPECT_LT(weights_difference(run_dir(name) + "/ema.safetensors", run_dir("zero-full") + "/ema.safetensors"), 1e-6)
        << name;
  }
  // 1 rank x 2B: the same steps up to summation order, the same as each other.
  EXPECT_LT(weights_difference(run_dir("zero-r3") + "/model.safetensors", run_dir("zero-r4") + "/model.safetensors"),
            1e-6);
  EXPECT_LT(weights_difference(run_dir("zero-r3") + "/model.safetensors", uninterrupted), 1e-5);
  EXPECT_NE(resumed.at("sharded-on-1-replicated").output.find("written by 2 ranks"), std::string::npos);
  // A ZeRO-3 checkpoint (its weights gathered from the slices) resumes on 1
  // rank without sharding, as the ZeRO-1 one did, and exports its weights.
  const Job stage3 = train(2, "zero-full-3", "--batch-size 2 --save-every 4 --zero 3");
  ASSERT_EQ(stage3.status, 0) << stage3.output;
  const Job from_stage3 =
      train(1, "zero-r7", "--batch-size 4 --resume " + run_dir("zero-full-3") + "/step-00000004.h5");
  ASSERT_EQ(from_stage3.status, 0) << from_stage3.output;
  EXPECT_LT(weights_difference(run_dir("zero-r7") + "/model.safetensors", run_dir("zero-r3") + "/model.safetensors"),
            1e-6);
  const std::string dir = run_dir("zero-full-3");
  const Job exported = launch(std::string(WANTRAIN_WANTRAIN) + " export --checkpoint " + dir + "/latest --out " + dir +
                              "/exported.safetensors");
  ASSERT_EQ(exported.status, 0) << exported.output;
  EXPECT_EQ(weights_difference(dir + "/exported.safetensors", dir + "/model.safetensors"), 0);
  EXPECT_LT(weights_difference(dir + "/model.safetensors", uninterrupted), 1e-6);
}

// A shard missing or from another checkpoint, --zero out of range, and a
// shard write that fails on one rank: one line each, nothing lost.
TEST_F(Zero, BadShardsAndBadValuesAreOneLineAndTheLatestCheckpointStays) {
  const Job bad = train(2, "zero-bad", "--batch-size 2 --zero 5");
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_EQ(occurrences(bad.output, "option --zero: must be 0 (off), 1"), 1u) << bad.output;
  for (const auto& [options, line] :
       {std::pair<std::string, std::string>{"--zero 3 --lora-rank 4", "option --zero: 3 shards the trained weights"},
        {"--zero 1 --gather-dtype bf16", "option --gather-dtype: needs --zero 3"},
        {"--zero 3 --gather-dtype bf16", "option --gather-dtype: bf16 gathers need --precision bf16"}}) {
    const Job refused = train(1, "zero-bad", "--batch-size 2 " + options);
    EXPECT_EQ(refused.status, 2) << refused.output;
    EXPECT_EQ(occurrences(refused.output, line), 1u) << refused.output;
  }

  const Job run = train(2, "zero-shards", "--batch-size 2 --save-every 4 --zero 1 --keep 0");
  ASSERT_EQ(run.status, 0) << run.output;
  const std::string dir = run_dir("zero-shards");
  // A step-4 shard in place of step 8's: from another checkpoint.
  fs::copy_file(dir + "/step-00000004.zero-1-of-2.h5", dir + "/step-00000008.zero-1-of-2.h5",
                fs::copy_options::overwrite_existing);
  const Job foreign = train(2, "zero-resume", "--batch-size 2 --zero 1 --resume " + dir);
  EXPECT_EQ(foreign.status, 2) << foreign.output;
  EXPECT_EQ(occurrences(foreign.output, "checkpoint " + dir + "/step-00000008.zero-1-of-2.h5: attribute step: is 4"),
            1u)
      << foreign.output;
  fs::remove(dir + "/step-00000008.zero-1-of-2.h5");
  const Job missing = train(2, "zero-resume", "--batch-size 2 --resume " + dir);
  EXPECT_EQ(missing.status, 2) << missing.output;
  EXPECT_EQ(occurrences(missing.output, "checkpoint " + dir + "/step-00000008.zero-1-of-2.h5: the file: is missing"),
            1u)
      << missing.output;

  // Rank 1's step-4 shard write fails (injected: MPMD, armed on rank 1
  // only): the checkpoint is completed on no rank, `latest` stays at step
  // 2, and the run stops.
  const std::string failing = fresh("zero-write");
  // 5 steps: saves at 2 and 4 (which fails); the final one is not attempted.
  std::string args = job(1, failing, "--batch-size 2 --save-every 2 --zero 1").arguments();
  args.replace(args.find("--steps 8"), 9, "--steps 5");
  const Job write = launch(std::string(WANTRAIN_MPIEXEC_EXECUTABLE) + " " + WANTRAIN_MPIEXEC_PREFLAGS + " " +
                           WANTRAIN_MPIEXEC_NUMPROC_FLAG + " 1 " + WANTRAIN_WANTRAIN + " " + args + " : " +
                           WANTRAIN_MPIEXEC_NUMPROC_FLAG + " 1 env WANTRAIN_TEST_FAIL=shard_write:2 " +
                           WANTRAIN_WANTRAIN + " " + args);
  EXPECT_EQ(write.status, 1) << write.output;
  EXPECT_EQ(occurrences(write.output, "injected failure at shard_write"), 1u) << write.output;
  EXPECT_EQ(occurrences(write.output, "checkpoint " + failing +
                                          "/step-00000004.h5: not completed: another rank could not write its shard"),
            1u)
      << write.output;
  EXPECT_EQ(wt::ckpt::linked_checkpoint(failing, "latest"), failing + "/step-00000002.h5");
  for (const std::string name :
       {"step-00000004.h5", "step-00000004.h5.tmp", "step-00000004.zero-0-of-2.h5", "step-00000004.zero-1-of-2.h5.tmp"})
    EXPECT_FALSE(fs::exists(failing + "/" + name)) << name;
  EXPECT_EQ(wt::ckpt::read_checkpoint(failing + "/latest").state.step, 2);
}

}  // namespace
