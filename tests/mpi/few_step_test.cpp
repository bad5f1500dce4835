// Few-step students as users run them (`wantrain --mode distill
// --distill-steps K`): a consistency student starts on its teacher (with
// guidance 1 and one teacher step per phase its first loss is zero); a
// distribution-matching student (the default) takes the same steps on 1
// rank x 2B as on 2 ranks x B (and with ZeRO-2, ZeRO-3 and --sp 2, its fake
// score a trained group of its own, sharded and clipped apart), resumes bit
// for bit with its fake score, which checkpoints hold and weights files never, records
// its sampler in checkpoints and weights files (LoRA too) where wansample
// finds it and says so, and each bad setting is one line and status 2.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "../common/build_paths.hpp"
#include "../common/launch.hpp"
#include "../common/train_runs.hpp"
#include "wantrain/ckpt/checkpoint.hpp"
#include "wantrain/io/safetensors.hpp"

namespace {

namespace fs = std::filesystem;
using wt::testing::fresh;
using wt::testing::Job;
using wt::testing::launch;
using wt::testing::mpi_command;
using wt::testing::occurrences;
using namespace wt::testing::train_runs;

class FewStep : public ::testing::Test {
 protected:
  // A wan-tiny teacher trained for 12 steps on image data.
  static void SetUpTestSuite() {
    data_ = synth_tiny_data("few-step-data", 32, 4);
    teacher_dir_ = train_tiny_teacher("few-step-teacher", data_);
  }

  static std::string teacher() { return teacher_dir_ + "/model.safetensors"; }

  static constexpr const char* kFewStep = "--shift 3 --distill-steps 2 --distill-teacher-steps 8 --distill-guidance 3 ";
  static Job distill(int ranks, const std::string& dir, const std::string& options,
                     const std::string& few_step = kFewStep, const std::string& model_config = tiny_config()) {
    return WantrainJob(ranks)
        .model(model_config)
        .data(data_)
        .output(dir)
        .with("--mode distill --teacher " + teacher() + " --teacher-config " + tiny_config() +
              " --seed 11 --log-every 1 --lr 1e-3 " + few_step + " " + options +
              (options.find("--batch-size") == std::string::npos ? " --batch-size 2" : ""))
        .run();
  }

  static Job sample(const std::string& model, const std::string& extra = "") {
    return launch(std::string(WANTRAIN_WANSAMPLE) + " " + model + " --data " + data_ + " --index 0 --threads 1 --out " +
                  fresh("few-step-sample.h5") + " " + extra);
  }

  static std::string data_, teacher_dir_;
};
std::string FewStep::data_, FewStep::teacher_dir_;

TEST_F(FewStep, AConsistencyStudentStartsOnItsTeacherWhenTheTargetIsTheTeachersVelocity) {
  // Guidance 1 and one teacher step per student step: the target is the
  // teacher's velocity, which the student (the teacher's weights) predicts.
  const std::string consistency = "--distill-method consistency --shift 3 --distill-steps 2 --distill-teacher-steps 2 ";
  const auto same = fresh("few-step-same");
  const Job a = distill(2, same, "--steps 1", consistency + "--distill-guidance 1");
  ASSERT_EQ(a.status, 0) << a.output;
  EXPECT_EQ(occurrences(a.output, "student init: the teacher's weights (" + teacher() + ")"), 1u) << a.output;
  const auto first = training_lines(same);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_LT(first[0]["loss"].get<double>(), 1e-10);
  // With guidance, the target is another velocity.
  const auto guided = fresh("few-step-guided");
  const Job b = distill(2, guided, "--steps 1", consistency + "--distill-guidance 3");
  ASSERT_EQ(b.status, 0) << b.output;
  EXPECT_GT(training_lines(guided)[0]["loss"].get<double>(), 1e-4);
}

TEST_F(FewStep, TwoRanksTakeOneRanksStepsResumeIsBitwiseAndTheSamplerTravels) {
  const std::string common = "--steps 8 --ema-decay 0.9 --val-data " + data_ + " --val-every 4 ";
  const auto one = fresh("few-step-1x4"), two = fresh("few-step-2x2"), stopped = fresh("few-step-stopped");
  const Job a = distill(1, one, common + "--batch-size 4");
  const Job b = distill(2, two, common + "--batch-size 2");
  const Job c = distill(2, stopped, common + "--batch-size 2 --save-every 4");
  // ZeRO-2 shards the student's optimizer state and gradients: the same steps.
  const auto zero = fresh("few-step-zero2");
  const Job z = distill(2, zero, common + "--batch-size 2 --zero 2 --sample-every 8");
  // ZeRO-3 shards the student's weights and the fake score's, each by its own units.
  const auto zero3 = fresh("few-step-zero3");
  const Job z3 = distill(2, zero3, common + "--batch-size 2 --zero 3");
  // --sp 2: the student's and the fake score's tokens split over the two
  // ranks, which take the steps of one rank with the whole batch.
  const auto split = fresh("few-step-sp2");
  const Job s = distill(2, split, common + "--batch-size 4 --sp 2");
  ASSERT_EQ(s.status, 0) << s.output;
  ASSERT_EQ(z.status, 0) << z.output;
  ASSERT_EQ(z3.status, 0) << z3.output;
  EXPECT_TRUE(fs::exists(zero + "/samples/step-00000008.png")) << z.output;
  ASSERT_EQ(a.status, 0) << a.output;
  ASSERT_EQ(b.status, 0) << b.output;
  ASSERT_EQ(c.status, 0) << c.output;
  const auto reference = training_lines(one), lines = training_lines(two);
  ASSERT_EQ(reference.size(), 8u);
  ASSERT_EQ(lines.size(), 8u);
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_LT(relative(lines[i]["loss"], reference[i]["loss"]), 1e-5) << "step " << i + 1;
    EXPECT_GT(lines[i]["teacher_s"].get<double>(), 0.0);
  }
  EXPECT_LT(weights_difference(two + "/model.safetensors", one + "/model.safetensors"), 1e-5);
  // Each run reports the student's norm and the fake score's apart, and the
  // sharded runs' are the unsharded one's.
  for (size_t i = 0; i < reference.size(); ++i) {
    ASSERT_TRUE(reference[i].contains("grad_norm_fake_score")) << reference[i].dump();
    EXPECT_GT(reference[i]["grad_norm_fake_score"].get<double>(), 0.0);
  }
  for (const auto& [dir, what] : {std::pair{zero, "--zero 2"}, std::pair{zero3, "--zero 3"}}) {
    const auto sharded = training_lines(dir);
    ASSERT_EQ(sharded.size(), 8u) << what;
    for (size_t i = 0; i < sharded.size(); ++i) {
      EXPECT_LT(relative(sharded[i]["loss"], reference[i]["loss"]), 1e-5) << what << ", step " << i + 1;
      EXPECT_LT(relative(sharded[i]["grad_norm"], reference[i]["grad_norm"]), 1e-4) << what << ", step " << i + 1;
      EXPECT_LT(relative(sharded[i]["grad_norm_fake_score"], reference[i]["grad_norm_fake_score"]), 1e-4)
          << what << ", step " << i + 1;
    }
  }
  EXPECT_LT(weights_difference(zero3 + "/model.safetensors", one + "/model.safetensors"), 1e-5);
  EXPECT_LT(weights_difference(zero3 + "/ema.safetensors", one + "/ema.safetensors"), 1e-5);
  const auto split_lines = training_lines(split);
  ASSERT_EQ(split_lines.size(), 8u);
  for (size_t i = 0; i < split_lines.size(); ++i) {
    EXPECT_LT(relative(split_lines[i]["loss"], reference[i]["loss"]), 1e-5) << "--sp 2, step " << i + 1;
    EXPECT_LT(relative(split_lines[i]["grad_norm"], reference[i]["grad_norm"]), 1e-5) << "--sp 2, step " << i + 1;
    EXPECT_LT(relative(split_lines[i]["grad_norm_fake_score"], reference[i]["grad_norm_fake_score"]), 1e-5)
        << "--sp 2, step " << i + 1;
  }
  EXPECT_LT(weights_difference(split + "/model.safetensors", one + "/model.safetensors"), 1e-5);
  EXPECT_LT(weights_difference(split + "/ema.safetensors", one + "/ema.safetensors"), 1e-5);
  const auto val_one = validation_lines(one), val_two = validation_lines(two);
  ASSERT_EQ(val_one.size(), 2u);
  for (size_t v = 0; v < 2; ++v) EXPECT_LT(relative(val_two[v]["val_loss"], val_one[v]["val_loss"]), 1e-5);

  fs::remove(stopped + "/step-00000008.h5");
  const Job resumed = distill(2, stopped, common + "--batch-size 2 --resume " + stopped + "/step-00000004.h5");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  const auto after = training_lines(stopped);
  ASSERT_EQ(after.size(), 8u);
  for (size_t i = 0; i < after.size(); ++i)
    EXPECT_EQ(after[i]["loss"].get<double>(), lines[i]["loss"].get<double>()) << "step " << i + 1;
  EXPECT_EQ(weights_difference(stopped + "/model.safetensors", two + "/model.safetensors"), 0);
  EXPECT_EQ(weights_difference(stopped + "/ema.safetensors", two + "/ema.safetensors"), 0);

  // The checkpoint and the weights files record the sampler: Euler's 2 steps
  // at shift 3, sigmas shift(1), shift(1/2) = 3/4, 0.
  const auto saved = wt::ckpt::read_checkpoint(two + "/step-00000008.h5");
  EXPECT_EQ(saved.objective_kind, "few-step");
  EXPECT_EQ(saved.objective.at("method"), "dmd");
  EXPECT_EQ(saved.objective.at("regression_weight"), "0.5");
  // The checkpoint holds the fake score (what the bitwise resume above
  // needed); the student's weights files do not.
  const auto is_fake = [](const std::string& name) { return name.rfind("fake_score.", 0) == 0; };
  size_t fake = 0;
  for (const auto& item : saved.model) fake += is_fake(item.first) ? 1 : 0;
  EXPECT_GT(fake, 0u);
  EXPECT_EQ(fake * 2, saved.model.size());  // the student's tensors and as many of the fake score's
  // As a group of its own, which has no EMA and is not the model's weights.
  ASSERT_EQ(saved.groups.size(), 2u);
  EXPECT_EQ(saved.groups[1].name, "fake_score");
  EXPECT_EQ(saved.groups[1].prefix, "fake_score.");
  EXPECT_FALSE(saved.groups[1].ema);
  EXPECT_FALSE(saved.groups[1].weights);
  EXPECT_EQ(saved.ema.size(), fake);
  for (const auto& item : saved.ema) EXPECT_FALSE(is_fake(item.first)) << item.first;
  // Nor does an export of the checkpoint.
  const Job exported = launch(std::string(WANTRAIN_WANTRAIN) + " export --checkpoint " + two +
                              "/step-00000008.h5 --ema --out " + two + "/exported.safetensors");
  ASSERT_EQ(exported.status, 0) << exported.output;
  EXPECT_EQ(weights_difference(two + "/exported.safetensors", two + "/ema.safetensors"), 0);
  for (const char* file : {"/model.safetensors", "/ema.safetensors", "/exported.safetensors"}) {
    const auto weights = wt::io::SafetensorsFile::open(two + file);
    for (const auto& entry : weights.entries()) EXPECT_FALSE(is_fake(entry.name)) << file << ": " << entry.name;
  }
  EXPECT_EQ(saved.objective.at("sampler_solver"), "euler");
  EXPECT_EQ(saved.objective.at("sampler_steps"), "2");
  EXPECT_EQ(saved.objective.at("sampler_shift"), "3");
  EXPECT_EQ(saved.objective.at("sampler_sigmas"), "1,0.75,0");
  EXPECT_EQ(saved.objective.at("guidance"), "3");
  for (const char* file : {"/model.safetensors", "/ema.safetensors"})
    EXPECT_EQ(wt::io::SafetensorsFile::open(two + file).metadata().at("sampler_sigmas"), "1,0.75,0") << file;

  // wansample samples it so, says so once, and an option overrides its own.
  const std::string line =
      "a few-step student: euler, 2 steps at shift 3 (sigmas 1, 0.75, 0), cfg 1, as it was trained";
  const Job from_checkpoint = sample("--checkpoint " + two + "/latest");
  ASSERT_EQ(from_checkpoint.status, 0) << from_checkpoint.output;
  EXPECT_EQ(occurrences(from_checkpoint.output, line), 1u) << from_checkpoint.output;
  const Job from_file =
      sample("--weights " + two + "/ema.safetensors --model-config " + tiny_config(), "--steps 6 --cfg 2");
  ASSERT_EQ(from_file.status, 0) << from_file.output;
  EXPECT_EQ(occurrences(from_file.output, line + "; sampled with --steps 6, --cfg 2 instead"), 1u) << from_file.output;
  // The teacher's file records none: the release's defaults, no such line.
  const Job from_teacher = sample("--weights " + teacher() + " --model-config " + tiny_config(), "--steps 2");
  ASSERT_EQ(from_teacher.status, 0) << from_teacher.output;
  EXPECT_EQ(occurrences(from_teacher.output, "a few-step student"), 0u) << from_teacher.output;

  // Another step count, teacher step count or guidance: refused on resume.
  const Job other = distill(2, stopped, common + "--batch-size 2 --resume " + stopped + "/step-00000004.h5",
                            "--shift 3 --distill-steps 4 --distill-teacher-steps 8 --distill-guidance 3 ");
  EXPECT_EQ(other.status, 2) << other.output;
  EXPECT_EQ(occurrences(other.output, "checkpoint " + stopped +
                                          "/step-00000004.h5: trained with --distill-steps 2, this run with 4; "
                                          "resume with the same"),
            1u)
      << other.output;
}

TEST_F(FewStep, ALoraStudentTrainsAdaptersOnTheFrozenTeacherAndItsFileCarriesTheSampler) {
  const auto dir = fresh("few-step-lora");
  const Job job = distill(2, dir, "--steps 4 --lora-rank 4 --base-precision fp32");
  ASSERT_EQ(job.status, 0) << job.output;
  EXPECT_EQ(occurrences(job.output, "student init: the teacher's weights (" + teacher() + "), frozen as the LoRA base"),
            1u)
      << job.output;
  EXPECT_EQ(occurrences(job.output, "frozen (the teacher " + teacher() + ", crc32:"), 1u) << job.output;
  // The base is the teacher's weights, held once: every teacher tensor
  // (an fp32 teacher, an fp32 base) is the base's. The same run with every
  // block swapped, where the teacher keeps its own copy, takes the same
  // steps bit for bit.
  std::smatch held_once;
  ASSERT_TRUE(std::regex_search(
      job.output, held_once, std::regex(R"(frozen; (\d+) of its (\d+) tensors \(.*\) are the LoRA base's, held once)")))
      << job.output;
  EXPECT_EQ(held_once[1].str(), held_once[2].str());
  EXPECT_GT(std::stoi(held_once[1].str()), 0);
  const auto swapped = fresh("few-step-lora-swapped");
  const Job own = distill(2, swapped, "--steps 4 --lora-rank 4 --base-precision fp32 --blocks-to-swap 2");
  ASSERT_EQ(own.status, 0) << own.output;
  EXPECT_EQ(occurrences(own.output, "are the LoRA base's, held once"), 0u) << own.output;
  expect_same_losses(dir, swapped, 4);
  // A base from --init (the teacher's run at step 6) is not the teacher:
  // nothing is shared, and the steps are again those of the swapped run.
  const std::string other_base =
      "--steps 2 --lora-rank 4 --base-precision fp32 --init " + teacher_dir_ + "/step-00000006.h5";
  const auto other = fresh("few-step-lora-init"), other_swapped = fresh("few-step-lora-init-swapped");
  const Job d = distill(2, other, other_base);
  const Job e = distill(2, other_swapped, other_base + " --blocks-to-swap 2");
  ASSERT_EQ(d.status, 0) << d.output;
  ASSERT_EQ(e.status, 0) << e.output;
  EXPECT_EQ(occurrences(d.output, "frozen; 0 of its "), 1u) << d.output;
  expect_same_losses(other, other_swapped, 2);
  const auto file = wt::io::SafetensorsFile::open(dir + "/lora.safetensors");
  EXPECT_EQ(file.metadata().at("sampler_steps"), "2");
  EXPECT_EQ(file.metadata().at("lora_rank"), "4");
  const Job sampled =
      sample("--weights " + teacher() + " --model-config " + tiny_config() + " --lora " + dir + "/lora.safetensors");
  ASSERT_EQ(sampled.status, 0) << sampled.output;
  EXPECT_EQ(occurrences(sampled.output, "a few-step student: euler, 2 steps at shift 3"), 1u) << sampled.output;
}

// --fake-score-lora-rank: the fake score is adapters on the teacher's own
// tensors (held once: every frozen tensor of it is the teacher's). It starts
// as the teacher, as the whole fake score does (its adapters' B is zero),
// so the first step's loss is the whole fake score's; the adapters then
// train apart from it. 2 ranks x B take 1 rank x 2B's steps (and so do
// ZeRO-2 and ZeRO-3, which shard the adapters' state and weights), a resume
// is bitwise, the checkpoint holds the adapters alone, and a resume with
// another rank, or from a whole fake score, is one line.
TEST_F(FewStep, ALoraFakeScoreTrainsAdaptersOnTheTeachersTensors) {
  const std::string common = "--steps 6 --fake-score-lora-rank 4 ";
  const auto one = fresh("few-step-fake-lora-1x4"), two = fresh("few-step-fake-lora-2x2"),
             zero2 = fresh("few-step-fake-lora-zero2"), zero3 = fresh("few-step-fake-lora-zero3"),
             whole = fresh("few-step-fake-whole");
  const Job a = distill(1, one, common + "--batch-size 4");
  const Job b = distill(2, two, common + "--batch-size 2 --save-every 3");
  const Job z2 = distill(2, zero2, common + "--batch-size 2 --zero 2");
  const Job z3 = distill(2, zero3, common + "--batch-size 2 --zero 3");
  const Job w = distill(2, whole, "--steps 6 --batch-size 2 --save-every 3");
  for (const Job* job : {&a, &b, &z2, &z3, &w}) ASSERT_EQ(job->status, 0) << job->output;
  EXPECT_EQ(occurrences(b.output, "fake score: rank-4 LoRA on the teacher's frozen weights (" + teacher() + "), "), 1u)
      << b.output;
  std::smatch lent;
  ASSERT_TRUE(std::regex_search(
      b.output, lent, std::regex(R"((\d+) of the LoRA fake score's (\d+) tensors \(.*\) are its, held once)")))
      << b.output;
  // Every frozen tensor: all but the adapters' A and B of the 10 Linears in each of the 2 blocks.
  EXPECT_EQ(std::stoi(lent[1].str()) + 2 * 10 * 2, std::stoi(lent[2].str())) << b.output;
  const auto reference = training_lines(one);
  ASSERT_EQ(reference.size(), 6u);
  for (const auto& [dir, what] : {std::pair{two, "2 ranks"}, {zero2, "--zero 2"}, {zero3, "--zero 3"}}) {
    const auto lines = training_lines(dir);
    ASSERT_EQ(lines.size(), 6u) << what;
    for (size_t i = 0; i < lines.size(); ++i) {
      EXPECT_LT(relative(lines[i]["loss"], reference[i]["loss"]), 1e-5) << what << ", step " << i + 1;
      EXPECT_LT(relative(lines[i]["grad_norm_fake_score"], reference[i]["grad_norm_fake_score"]), 1e-4)
          << what << ", step " << i + 1;
    }
  }
  const auto whole_lines = training_lines(whole), lora_lines = training_lines(two);
  ASSERT_EQ(whole_lines.size(), 6u);
  EXPECT_LT(relative(lora_lines[0]["loss"], whole_lines[0]["loss"]), 1e-5) << "both start as the teacher";
  EXPECT_GT(relative(lora_lines[5]["loss"], whole_lines[5]["loss"]), 1e-6) << "and then train apart";

  const auto saved = wt::ckpt::read_checkpoint(two + "/step-00000006.h5");
  EXPECT_EQ(saved.objective.at("fake_score_lora_rank"), "4");
  size_t adapters = 0, fake = 0;
  for (const auto& item : saved.model)
    if (item.first.rfind("fake_score.", 0) == 0) {
      ++fake;
      adapters += item.first.find("lora_") != std::string::npos ? 1 : 0;
    }
  EXPECT_EQ(fake, size_t(2 * 10 * 2));
  EXPECT_EQ(adapters, fake);

  fs::remove(two + "/step-00000006.h5");
  const Job resumed = distill(2, two, common + "--batch-size 2 --resume " + two + "/step-00000003.h5");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  const auto after = training_lines(two);
  ASSERT_EQ(after.size(), 6u);
  for (size_t i = 0; i < after.size(); ++i)
    EXPECT_EQ(after[i]["loss"].get<double>(), lora_lines[i]["loss"].get<double>()) << "step " << i + 1;
  const Job other_rank =
      distill(2, two, "--steps 6 --fake-score-lora-rank 8 --batch-size 2 --resume " + two + "/step-00000003.h5");
  EXPECT_EQ(other_rank.status, 2) << other_rank.output;
  EXPECT_EQ(occurrences(other_rank.output,
                        "trained with --fake-score-lora-rank 4, this run with 8; resume with the "
                        "same"),
            1u)
      << other_rank.output;
  // With a LoRA student too, the teacher's tensors are both bases; with a
  // bf16 teacher, all but the text embedding's 4 Linear tensors (the base
  // keeps them in fp32, as a LoRA student's does) and the adapters.
  const Job both = distill(2, fresh("few-step-fake-lora-both"),
                           "--steps 2 --lora-rank 4 --base-precision fp32 --fake-score-lora-rank 4");
  ASSERT_EQ(both.status, 0) << both.output;
  EXPECT_EQ(occurrences(both.output, "are the LoRA base's, held once"), 1u) << both.output;
  EXPECT_EQ(occurrences(both.output, "are its, held once"), 1u) << both.output;
  const Job bf16 =
      distill(2, fresh("few-step-fake-lora-bf16"), "--steps 2 --teacher-precision bf16 --fake-score-lora-rank 4");
  ASSERT_EQ(bf16.status, 0) << bf16.output;
  ASSERT_TRUE(std::regex_search(
      bf16.output, lent, std::regex(R"((\d+) of the LoRA fake score's (\d+) tensors \(.*\) are its, held once)")))
      << bf16.output;
  EXPECT_EQ(std::stoi(lent[1].str()) + 2 * 10 * 2 + 4, std::stoi(lent[2].str())) << bf16.output;
  const Job from_whole = distill(2, whole, common + "--batch-size 2 --resume " + whole + "/step-00000003.h5");
  EXPECT_EQ(from_whole.status, 2) << from_whole.output;
  EXPECT_EQ(occurrences(from_whole.output,
                        "trained with --fake-score-lora-rank 0 (a whole fake score), this run "
                        "with 4; resume with the same"),
            1u)
      << from_whole.output;
}

TEST_F(FewStep, BadSettingsAreOneLineAndStatus2) {
  const std::string few_step = "--shift 3 --distill-steps 2 ";
  const std::string student = std::string(WANTRAIN_SOURCE_DIR) + "/data/configs/wan-tiny-student.json";
  const struct {
    std::string options, line, model_config = tiny_config();
  } cases[] = {
      {"--distill-teacher-steps 9",
       "error: option --distill-teacher-steps: must be a multiple of --distill-steps 2 (each student step spans whole "
       "teacher steps)"},
      {"--distill-target-weight 0.5",
       "error: option --distill-target-weight: only with --distill-steps 0 (a few-step student has no velocity target "
       "of its own)"},
      {"--distill-teacher-steps 8",
       "error: option --distill-steps: a few-step student has its teacher's architecture, but --model-config " +
           student + " differs from --teacher-config " + tiny_config() + " (the teacher's); give the teacher's config",
       student},
      {"--distill-guidance 2", "error: option --distill-guidance: only with --distill-steps K"},
      {"--distill-steps -1", "error: option --distill-steps: must be 0 (the teacher's velocity) or a number of steps"},
      {"--distill-teacher-steps 8 --timestep-sampling logit-normal",
       "error: option --timestep-sampling: not with --distill-steps: the student's points lie on the teacher's grid, "
       "drawn uniformly"},
      {"--distill-teacher-steps 8 --distill-method consistency --distill-regression 0.5",
       "error: option --distill-regression: only with --distill-method dmd"},
      {"--distill-teacher-steps 8 --distill-regression -1",
       "error: option --distill-regression: must be 0 (distribution matching alone) or more"},
      {"--distill-teacher-steps 8 --distill-method consistency --fake-score-lora-rank 4",
       "error: option --fake-score-lora-rank: only with --distill-method dmd"},
      {"--distill-teacher-steps 8 --fake-score-lora-rank -1",
       "error: option --fake-score-lora-rank: must be 0 (a whole fake score) or a LoRA rank"},
  };
  for (const auto& c : cases) {
    // The first case's options set --distill-steps for themselves.
    const bool own = c.options.rfind("--distill-guidance", 0) == 0 || c.options.rfind("--distill-steps", 0) == 0;
    const Job job =
        distill(2, fresh("few-step-bad"), c.options + " --steps 2", own ? "--shift 3 " : few_step, c.model_config);
    EXPECT_EQ(job.status, 2) << c.options << "\n" << job.output;
    EXPECT_EQ(occurrences(job.output, c.line), 1u) << c.options << "\n" << job.output;
  }
  const Job training = launch(mpi_command(2, WANTRAIN_WANTRAIN,
                                          "--model-config " + tiny_config() + " --data " + data_ + " --output-dir " +
                                              fresh("few-step-train") + " --steps 1 --distill-steps 4 --threads 1"));
  EXPECT_EQ(training.status, 2) << training.output;
  EXPECT_EQ(occurrences(training.output, "error: option --distill-steps: only used with --mode distill"), 1u)
      << training.output;
}

}  // namespace
