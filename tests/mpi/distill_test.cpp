// Distillation as users run it: a 2-rank wantrain job trains a tiny teacher,
// then `wantrain --mode distill` trains a smaller student from it: the loss
// falls, a student of the teacher's own shape starts exactly on it, resume
// continues bit for bit and refuses another teacher, bad teachers are one
// line and status 2.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "../common/build_paths.hpp"
#include "../common/launch.hpp"
#include "../common/train_runs.hpp"
#include "wantrain/ckpt/checkpoint.hpp"

namespace {

namespace fs = std::filesystem;
using wt::testing::fresh;
using wt::testing::Job;
using wt::testing::launch;
using wt::testing::mpi_command;
using wt::testing::occurrences;
using namespace wt::testing::train_runs;

std::string student_config() { return std::string(WANTRAIN_SOURCE_DIR) + "/data/configs/wan-tiny-student.json"; }

class Distill : public ::testing::Test {
 protected:
  // Image data (one frame), and a wan-tiny teacher trained on it for 12
  // steps, with its step-6 checkpoint as "another teacher".
  static void SetUpTestSuite() {
    data_ = synth_tiny_data("distill-data", 32, 4);
    teacher_dir_ = train_tiny_teacher("distill-teacher", data_);
  }

  static std::string teacher() { return teacher_dir_ + "/model.safetensors"; }
  static std::string other_teacher() { return teacher_dir_ + "/step-00000006.h5"; }

  static Job distill(int ranks, const std::string& dir, const std::string& options,
                     const std::string& model_config = student_config()) {
    return WantrainJob(ranks)
        .model(model_config)
        .data(data_)
        .output(dir)
        .with("--mode distill --seed 11 --log-every 1 --lr 2e-3 --batch-size 2 " + options)
        .run();
  }
  static std::string teacher_options() { return "--teacher " + teacher() + " --teacher-config " + tiny_config(); }

  static std::string data_, teacher_dir_;
};
std::string Distill::data_, Distill::teacher_dir_;

double mean_loss(const std::vector<Json>& lines, size_t first, size_t count) {
  double sum = 0;
  for (size_t i = first; i < first + count; ++i) sum += lines.at(i)["loss"].get<double>();
  return sum / double(count);
}

TEST_F(Distill, TheStudentLearnsTheTeacherAndTheCheckpointNamesIt) {
  const auto dir = fresh("distill-run");
  const Job job = distill(2, dir, teacher_options() + " --steps 24 --save-every 12");
  ASSERT_EQ(job.status, 0) << job.output;
  // Projection printed once, on rank 0, with the block map (1 student block of 2: teacher block 0).
  EXPECT_EQ(occurrences(job.output, "student init: projection from the teacher " + teacher()), 1u) << job.output;
  EXPECT_EQ(occurrences(job.output, "blocks (student<-teacher): 0<-0"), 1u) << job.output;
  const auto lines = training_lines(dir);
  ASSERT_EQ(lines.size(), 24u);
  EXPECT_LT(mean_loss(lines, 18, 6), 0.7 * mean_loss(lines, 0, 6));
  EXPECT_GT(lines[0]["teacher_s"].get<double>(), 0.0);
  const auto saved = wt::ckpt::read_checkpoint(dir + "/step-00000012.h5");
  EXPECT_EQ(saved.objective_kind, "distillation");
  EXPECT_EQ(saved.objective.at("teacher"), teacher());
  EXPECT_EQ(saved.objective.at("teacher_checksum").rfind("crc32:", 0), 0u);
  // The student's own shapes: 1 block, ffn_dim 64.
  EXPECT_NE(saved.model_config.find("\"ffn_dim\":64"), std::string::npos) << saved.model_config;
  EXPECT_NE(saved.model_config.find("\"num_layers\":1"), std::string::npos) << saved.model_config;
}

TEST_F(Distill, AStudentOfTheTeachersShapeStartsExactlyOnIt) {
  // Projection copies every tensor: the student's first prediction is the
  // teacher's, so the first loss is exactly 0 (with no target weight).
  const auto same = fresh("distill-same");
  const Job a = distill(2, same, teacher_options() + " --steps 1", tiny_config());
  ASSERT_EQ(a.status, 0) << a.output;
  const auto first = training_lines(same);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0]["loss"].get<double>(), 0.0);
  // A random student, or a target weight, does not.
  const auto random = fresh("distill-random");
  const Job b = distill(2, random, teacher_options() + " --steps 1 --student-init random", tiny_config());
  ASSERT_EQ(b.status, 0) << b.output;
  EXPECT_GT(training_lines(random)[0]["loss"].get<double>(), 0.0);
  const auto weighted = fresh("distill-weighted");
  const Job c = distill(2, weighted, teacher_options() + " --steps 1 --distill-target-weight 0.5", tiny_config());
  ASSERT_EQ(c.status, 0) << c.output;
  EXPECT_GT(training_lines(weighted)[0]["loss"].get<double>(), 0.0);
  // A teacher held in bf16: the projected student (from the fp32 weights)
  // starts within bf16 rounding of it, far closer than a random student.
  const auto bf16 = fresh("distill-bf16");
  const Job d = distill(2, bf16, teacher_options() + " --steps 1 --teacher-precision bf16", tiny_config());
  ASSERT_EQ(d.status, 0) << d.output;
  EXPECT_NE(d.output.find("Linear weights held in bf16"), std::string::npos) << d.output;
  const double rounding = training_lines(bf16)[0]["loss"].get<double>();
  EXPECT_GT(rounding, 0.0);
  EXPECT_LT(rounding, 1e-3 * training_lines(random)[0]["loss"].get<double>());
}

TEST_F(Distill, ResumeContinuesBitForBitAndRefusesAnotherTeacher) {
  const auto straight = fresh("distill-straight"), stopped = fresh("distill-stopped");
  const std::string options = teacher_options() + " --ema-decay 0.9 ";
  const Job a = distill(2, straight, options + "--steps 10");
  ASSERT_EQ(a.status, 0) << a.output;
  const Job b = distill(2, stopped, options + "--steps 10 --save-every 5");
  ASSERT_EQ(b.status, 0) << b.output;
  fs::remove(stopped + "/step-00000010.h5");
  const Job resumed = distill(2, stopped, options + "--steps 10 --resume " + stopped + "/step-00000005.h5");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  const auto reference = training_lines(straight), lines = training_lines(stopped);
  ASSERT_EQ(lines.size(), 10u);
  for (size_t i = 0; i < lines.size(); ++i)
    EXPECT_EQ(lines[i]["loss"].get<double>(), reference[i]["loss"].get<double>()) << "step " << i + 1;
  EXPECT_EQ(weights_difference(stopped + "/model.safetensors", straight + "/model.safetensors"), 0);
  EXPECT_EQ(weights_difference(stopped + "/ema.safetensors", straight + "/ema.safetensors"), 0);

  // Other teacher weights: refused, whatever the file is called; nothing written.
  const auto before = fs::last_write_time(stopped + "/step-00000005.h5");
  const Job other = distill(2, stopped,
                            "--ema-decay 0.9 --steps 12 --resume " + stopped + "/step-00000005.h5 --teacher " +
                                other_teacher() + " --teacher-config " + tiny_config());
  EXPECT_EQ(other.status, 2) << other.output;
  EXPECT_EQ(occurrences(other.output, "checkpoint " + stopped + "/step-00000005.h5: distilled from the teacher " +
                                          teacher() + " (crc32:"),
            1u)
      << other.output;
  EXPECT_EQ(occurrences(other.output, "but --teacher " + other_teacher() + " has other weights"), 1u) << other.output;
  EXPECT_EQ(fs::last_write_time(stopped + "/step-00000005.h5"), before);

  // A training run's checkpoint is not a distillation's to resume.
  const Job train_checkpoint = distill(2, fresh("distill-from-train"),
                                       teacher_options() + " --steps 14 --resume " + other_teacher(), tiny_config());
  EXPECT_EQ(train_checkpoint.status, 2) << train_checkpoint.output;
  EXPECT_EQ(occurrences(train_checkpoint.output,
                        "written by a flow-matching run, not by distillation; "
                        "start the student from it with --init"),
            1u)
      << train_checkpoint.output;
}

TEST_F(Distill, BadTeachersAreOneLineAndStatus2) {
  const std::string truncated = fresh("distill-truncated.safetensors");
  fs::copy_file(teacher(), truncated);
  fs::resize_file(truncated, fs::file_size(teacher()) / 3);
  const struct {
    std::string options, line;
  } cases[] = {
      {"--teacher " + teacher(), "error: option --teacher-config: the teacher " + teacher() +
                                     " is not a wantrain checkpoint (safetensors or an "
                                     "index of them), so its model config must be given"},
      // The student's config for the teacher's file: the extra block and the shapes are named.
      {"--teacher " + teacher() + " --teacher-config " + student_config() + " --student-init random",
       "error: option --teacher: weights " + teacher() + ": do not match the model: 27 unexpected (blocks.1."},
      {"--teacher " + truncated + " --teacher-config " + tiny_config(), "error: option --teacher: "},
      {"--teacher " + other_teacher() + " --teacher-config " + student_config(),
       "error: option --teacher: checkpoint " + other_teacher() + ": written for another model than --teacher-config " +
           student_config() + ": ffn_dim is 128 there, 64 here"},
  };
  for (const auto& c : cases) {
    const Job job = distill(2, fresh("distill-bad"), c.options + " --steps 2");
    EXPECT_EQ(job.status, 2) << c.options << "\n" << job.output;
    EXPECT_EQ(occurrences(job.output, c.line), 1u) << c.options << "\n" << job.output;
  }
  // A student larger than its teacher cannot be projected: the teacher here has the student config.
  const auto small_teacher = fresh("distill-small-teacher");
  const Job small = distill(2, small_teacher, teacher_options() + " --steps 1");
  ASSERT_EQ(small.status, 0) << small.output;
  const Job wider =
      distill(2, fresh("distill-wider"),
              "--teacher " + small_teacher + "/model.safetensors --teacher-config " + student_config() + " --steps 2",
              tiny_config());
  EXPECT_EQ(wider.status, 2) << wider.output;
  EXPECT_EQ(occurrences(wider.output, "error: option --student-init: projection: student --model-config " +
                                          tiny_config() + " has ffn_dim 128, teacher --teacher " + small_teacher +
                                          "/model.safetensors has 64: a student may be smaller than its teacher"),
            1u)
      << wider.output;
}

}  // namespace
