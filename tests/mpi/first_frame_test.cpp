// Wan2.2 TI2V training as users run it: wantrain --condition first-frame on
// a dataset of clips and stills with a ti2v model, on 1 and 2 ranks, resumed;
// and the settings that cannot go with it refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <tuple>

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

std::string ti2v_config() { return std::string(WANTRAIN_SOURCE_DIR) + "/data/configs/wan-tiny-ti2v.json"; }

class FirstFrame : public ::testing::Test {
 protected:
  // Two buckets, as users mix them: 8 clips of 3 latent frames and 6 stills
  // (which never keep a first frame: nothing would be left to learn).
  static void SetUpTestSuite() {
    const std::string parts = fresh("first-frame-parts");
    std::string sources;
    for (const auto& [name, frames, samples] : {std::tuple{"clips", 3, 8}, {"stills", 1, 6}}) {
      const std::string dir = parts + "/" + name;
      const Job synth =
          launch(std::string(WANTRAIN_WANDATA) + " synth --out " + dir + " --samples " + std::to_string(samples) +
                 " --shards 1 --frames " + std::to_string(frames) + " --size 8x8 --text-len 16 --text-dim 64 --seed 7");
      ASSERT_EQ(synth.status, 0) << synth.output;
      sources += " " + dir;
    }
    data_ = fresh("first-frame-data");
    fs::remove(data_);
    const Job merge = launch(std::string(WANTRAIN_WANDATA) + " merge" + sources + " --out " + data_ + " --shards 2");
    ASSERT_EQ(merge.status, 0) << merge.output;
    ASSERT_EQ(wt::data::Dataset::open(data_).buckets().size(), 2u);
  }

  static Job train(int ranks, const std::string& dir, const std::string& options,
                   const std::string& config = ti2v_config()) {
    return WantrainJob(ranks)
        .model(config)
        .data(data_)
        .output(dir)
        .with("--seed 3 --log-every 1 --lr 1e-3 " + options)
        .run();
  }

  static std::string data_;
};
std::string FirstFrame::data_;

// 2 ranks x B train as 1 rank x 2B with half the samples keeping their first
// frame, caption dropout, an EMA, validation and a sample drawn from the
// sample's own first frame.
TEST_F(FirstFrame, OneRankWithTwiceTheBatchTakesTheSameStepsAsTwoRanks) {
  const std::string common =
      "--steps 8 --ema-decay 0.9 --text-drop 0.3 --condition first-frame "
      "--first-frame-prob 0.5 --val-data " +
      data_ + " --val-every 4 --sample-every 8 --sample-index 2 ";
  const auto one = fresh("first-frame-1x4"), two = fresh("first-frame-2x2");
  const Job a = train(1, one, common + "--batch-size 4");
  const Job b = train(2, two, common + "--batch-size 2");
  ASSERT_EQ(a.status, 0) << a.output;
  ASSERT_EQ(b.status, 0) << b.output;
  const auto reference = training_lines(one), lines = training_lines(two);
  ASSERT_EQ(reference.size(), 8u);
  ASSERT_EQ(lines.size(), 8u);
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_LT(relative(lines[i]["loss"], reference[i]["loss"]), 1e-5) << "step " << i + 1;
    EXPECT_LT(relative(lines[i]["grad_norm"], reference[i]["grad_norm"]), 1e-5) << "step " << i + 1;
  }
  EXPECT_LT(weights_difference(two + "/model.safetensors", one + "/model.safetensors"), 1e-5);
  EXPECT_LT(weights_difference(two + "/ema.safetensors", one + "/ema.safetensors"), 1e-5);
  const auto val_one = validation_lines(one), val_two = validation_lines(two);
  ASSERT_EQ(val_one.size(), 2u);
  ASSERT_EQ(val_two.size(), 2u);
  for (size_t v = 0; v < 2; ++v) EXPECT_LT(relative(val_two[v]["val_loss"], val_one[v]["val_loss"]), 1e-5);
  EXPECT_TRUE(fs::exists(two + "/samples/step-00000008.png")) << b.output;
}

// A resumed run repeats the uninterrupted one bit for bit; the condition
// changes training (a text-to-video run of the same model differs); a resume
// with another probability is refused in one line.
TEST_F(FirstFrame, ResumeIsBitwiseAndTheConditionIsUsed) {
  const std::string options =
      "--steps 8 --batch-size 2 --ema-decay 0.9 --condition first-frame "
      "--first-frame-prob 0.5 ";
  const auto straight = fresh("first-frame-straight"), stopped = fresh("first-frame-stopped"),
             plain = fresh("first-frame-plain");
  const Job a = train(2, straight, options);
  ASSERT_EQ(a.status, 0) << a.output;
  const Job b = train(2, stopped, options + "--save-every 3 --keep 5");
  ASSERT_EQ(b.status, 0) << b.output;
  for (const auto& name : {"step-00000006.h5", "step-00000008.h5", "model.safetensors", "ema.safetensors", "latest"})
    fs::remove(stopped + "/" + name);
  const Job other = train(
      2, stopped,
      "--steps 8 --batch-size 2 --ema-decay 0.9 --condition first-frame --resume " + stopped + "/step-00000003.h5");
  EXPECT_EQ(other.status, 2) << other.output;
  EXPECT_EQ(occurrences(other.output,
                        "trained keeping the first frame with probability 0.5, this run with "
                        "probability 1; resume with the same"),
            1u)
      << other.output;
  const Job resumed = train(2, stopped, options + "--resume " + stopped + "/step-00000003.h5");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  const auto reference = training_lines(straight), lines = training_lines(stopped);
  ASSERT_EQ(lines.size(), 8u);
  for (size_t i = 0; i < lines.size(); ++i)
    EXPECT_EQ(lines[i]["loss"].get<double>(), reference[i]["loss"].get<double>()) << "step " << i + 1;
  EXPECT_EQ(weights_difference(stopped + "/model.safetensors", straight + "/model.safetensors"), 0);
  EXPECT_EQ(weights_difference(stopped + "/ema.safetensors", straight + "/ema.safetensors"), 0);

  const Job c = train(2, plain, "--steps 8 --batch-size 2 --ema-decay 0.9 ");
  ASSERT_EQ(c.status, 0) << c.output;
  EXPECT_GT(weights_difference(plain + "/model.safetensors", straight + "/model.safetensors"), 1e-7);
}

// A few-step student of a TI2V teacher (wantrain --mode distill
// --distill-steps K --condition first-frame): every model sees the kept
// first frame at timestep 0, no step moves it, and the loss leaves it out.
// So with guidance 1 and one teacher step per student step the target is
// the teacher's velocity on the other frames and the consistency student
// (the teacher's weights) starts at loss 0; frame 0 in the loss, or other
// timesteps for the teacher than for the student, would make it positive.
// And 2 ranks x B of a distribution-matching student (the default method:
// the fake score sees the frame too) take 1 rank x 2B's steps, with a
// sample drawn from its first frame.
TEST_F(FirstFrame, AFewStepStudentKeepsTheFirstFrameOnEveryModelAndTakesTheSameStepsOnTwoRanks) {
  const auto teacher = fresh("first-frame-teacher");
  const Job t = train(2, teacher, "--steps 4 --batch-size 2 --condition first-frame --first-frame-prob 0.5");
  ASSERT_EQ(t.status, 0) << t.output;
  const std::string few_step = "--mode distill --teacher " + teacher + "/model.safetensors --teacher-config " +
                               ti2v_config() + " --shift 3 --condition first-frame ";
  const auto same = fresh("first-frame-student-same");
  const Job a = train(2, same,
                      few_step +
                          "--steps 1 --batch-size 2 --first-frame-prob 1 --distill-steps 2 "
                          "--distill-teacher-steps 2 --distill-guidance 1 --distill-method consistency");
  ASSERT_EQ(a.status, 0) << a.output;
  EXPECT_LT(training_lines(same).at(0)["loss"].get<double>(), 1e-10);

  const std::string common = few_step +
                             "--steps 3 --first-frame-prob 0.5 --distill-steps 2 --distill-teacher-steps 4 "
                             "--distill-guidance 3 --val-data " +
                             data_ + " --val-every 3 --sample-every 3 --sample-index 2 ";
  const auto one = fresh("first-frame-student-1x4"), two = fresh("first-frame-student-2x2");
  const Job b = train(1, one, common + "--batch-size 4");
  const Job c = train(2, two, common + "--batch-size 2");
  ASSERT_EQ(b.status, 0) << b.output;
  ASSERT_EQ(c.status, 0) << c.output;
  const auto reference = training_lines(one), lines = training_lines(two);
  ASSERT_EQ(lines.size(), 3u);
  ASSERT_EQ(reference.size(), 3u);
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_GT(lines[i]["loss"].get<double>(), 0.0) << "step " << i + 1;
    EXPECT_LT(relative(lines[i]["loss"], reference[i]["loss"]), 1e-5) << "step " << i + 1;
  }
  const auto val_one = validation_lines(one), val_two = validation_lines(two);
  ASSERT_EQ(val_one.size(), 1u);
  ASSERT_EQ(val_two.size(), 1u);
  EXPECT_LT(relative(val_two[0]["val_loss"], val_one[0]["val_loss"]), 1e-5);
  EXPECT_LT(weights_difference(two + "/model.safetensors", one + "/model.safetensors"), 1e-5);
  EXPECT_TRUE(fs::exists(two + "/samples/step-00000003.png")) << c.output;
}

// Not a ti2v model, distillation, a probability out of range: one line, status 2.
TEST_F(FirstFrame, OtherModelsDistillationAndBadProbabilitiesAreOneLine) {
  const Job t2v = train(1, fresh("first-frame-t2v"), "--steps 1 --batch-size 2 --condition first-frame", tiny_config());
  EXPECT_EQ(t2v.status, 2) << t2v.output;
  EXPECT_EQ(occurrences(t2v.output, "option --condition: the first-frame condition is Wan2.2 TI2V's: model config " +
                                        tiny_config() + " is t2v, not ti2v"),
            1u)
      << t2v.output;
  const Job distill = train(1, fresh("first-frame-distill"),
                            "--steps 1 --batch-size 2 --condition first-frame --mode distill --teacher x.safetensors");
  EXPECT_EQ(distill.status, 2) << distill.output;
  EXPECT_EQ(occurrences(distill.output,
                        "option --condition: first-frame with --mode distill is for few-step students "
                        "(--distill-steps K) only yet"),
            1u)
      << distill.output;
  // Latents of Wan2.1's VAE (16 channels) for TI2V-5B (48, Wan2.2's VAE):
  // refused before the model is built.
  const std::string five_b = std::string(WANTRAIN_SOURCE_DIR) + "/data/configs/wan2.2-ti2v-5b.json";
  const Job vae = train(1, fresh("first-frame-5b"), "--steps 1 --batch-size 2 --condition first-frame", five_b);
  EXPECT_EQ(vae.status, 2) << vae.output;
  EXPECT_EQ(occurrences(vae.output,
                        "latents have 16 channels (Wan2.1's VAE), the model reads 48 (in_dim): encode "
                        "the data with the VAE of the model (Wan2.2's VAE)"),
            1u)
      << vae.output;
  const Job probability =
      train(1, fresh("first-frame-prob"), "--steps 1 --batch-size 2 --condition first-frame --first-frame-prob 0");
  EXPECT_EQ(probability.status, 2) << probability.output;
  EXPECT_EQ(occurrences(probability.output, "option --first-frame-prob: must be a probability in (0, 1]"), 1u)
      << probability.output;
}

}  // namespace
