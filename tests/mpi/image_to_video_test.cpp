// Image-to-video training as users run it: wantrain on a dataset whose
// samples carry their first frame's condition (/y and CLIP-like /clip_fea:
// wandata synth --condition i2v), with an image-to-video model, on 1 and 2
// ranks, resumed, as LoRA and distillation; and the mismatches refused.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <string>
#include <tuple>

#include "../common/build_paths.hpp"
#include "../common/launch.hpp"
#include "../common/train_runs.hpp"
#include "wantrain/data/dataset.hpp"
#include "wantrain/io/safetensors.hpp"
#include "wantrain/wan/model/lora_file.hpp"
#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/model/weights.hpp"

namespace {

namespace fs = std::filesystem;
using wt::testing::fresh;
using wt::testing::Job;
using wt::testing::launch;
using wt::testing::mpi_command;
using wt::testing::occurrences;
using namespace wt::testing::train_runs;

std::string i2v_config() { return std::string(WANTRAIN_SOURCE_DIR) + "/data/configs/wan-tiny-i2v.json"; }

class ImageToVideo : public ::testing::Test {
 protected:
  // Two buckets with their condition, joined as users join datasets: 8
  // clips of 3 latent frames and 6 stills, 8x8 (a still is its own first
  // frame).
  static void SetUpTestSuite() {
    const std::string parts = fresh("i2v-parts");
    std::string sources;
    for (const auto& [name, frames, samples] : {std::tuple{"clips", 3, 8}, {"stills", 1, 6}}) {
      const std::string dir = parts + "/" + name;
      const Job synth = launch(std::string(WANTRAIN_WANDATA) + " synth --out " + dir + " --samples " +
                               std::to_string(samples) + " --shards 1 --frames " + std::to_string(frames) +
                               " --size 8x8 --text-len 16 --text-dim 64 --seed 5 --condition i2v --clip-tokens 4 "
                               "--clip-dim 32");
      ASSERT_EQ(synth.status, 0) << synth.output;
      sources += " " + dir;
    }
    data_ = fresh("i2v-data");
    fs::remove(data_);
    const Job merge = launch(std::string(WANTRAIN_WANDATA) + " merge" + sources + " --out " + data_ + " --shards 2");
    ASSERT_EQ(merge.status, 0) << merge.output;
    ASSERT_EQ(wt::data::Dataset::open(data_).buckets().size(), 2u);
  }

  static Job train(int ranks, const std::string& dir, const std::string& options,
                   const std::string& config = i2v_config(), const std::string& data = data_) {
    return WantrainJob(ranks)
        .model(config)
        .data(data)
        .output(dir)
        .with("--seed 3 --log-every 1 --lr 1e-3 " + options)
        .run();
  }

  static std::string data_;
};
std::string ImageToVideo::data_;

// 2 ranks x B train as 1 rank x 2B, with caption and image dropout, an
// EMA, validation and a sample drawn from the sample's own first frame.
TEST_F(ImageToVideo, OneRankWithTwiceTheBatchTakesTheSameStepsAsTwoRanks) {
  const std::string common = "--steps 8 --ema-decay 0.9 --text-drop 0.3 --image-drop 0.3 --val-data " + data_ +
                             " --val-every 4 --sample-every 8 --sample-index 5 ";
  const auto one = fresh("i2v-1x4"), two = fresh("i2v-2x2");
  const Job a = train(1, one, common + "--batch-size 4");
  const Job b = train(2, two, common + "--batch-size 2");
  ASSERT_EQ(a.status, 0) << a.output;
  ASSERT_EQ(b.status, 0) << b.output;
  EXPECT_EQ(occurrences(a.output, "i2v with the CLIP branch"), 1u) << a.output;
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

// Image dropout changes training (the draws are used), and the condition
// is read: a run without dropout differs.
TEST_F(ImageToVideo, ResumeIsBitwiseAndImageDropoutIsUsed) {
  const std::string options = "--steps 8 --batch-size 2 --ema-decay 0.9 --text-drop 0.3 --image-drop 0.5 ";
  const auto straight = fresh("i2v-straight"), stopped = fresh("i2v-stopped"), undropped = fresh("i2v-undropped");
  const Job a = train(2, straight, options);
  ASSERT_EQ(a.status, 0) << a.output;
  const Job b = train(2, stopped, options + "--save-every 3 --keep 5");
  ASSERT_EQ(b.status, 0) << b.output;
  for (const auto& name : {"step-00000006.h5", "step-00000008.h5", "model.safetensors", "ema.safetensors", "latest"})
    fs::remove(stopped + "/" + name);
  const Job resumed = train(2, stopped, options + "--resume " + stopped + "/step-00000003.h5");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  const auto reference = training_lines(straight), lines = training_lines(stopped);
  ASSERT_EQ(lines.size(), 8u);
  for (size_t i = 0; i < lines.size(); ++i)
    EXPECT_EQ(lines[i]["loss"].get<double>(), reference[i]["loss"].get<double>()) << "step " << i + 1;
  EXPECT_EQ(weights_difference(stopped + "/model.safetensors", straight + "/model.safetensors"), 0);
  EXPECT_EQ(weights_difference(stopped + "/ema.safetensors", straight + "/ema.safetensors"), 0);

  const Job c = train(2, undropped, "--steps 8 --batch-size 2 --ema-decay 0.9 --text-drop 0.3 ");
  ASSERT_EQ(c.status, 0) << c.output;
  EXPECT_GT(weights_difference(undropped + "/model.safetensors", straight + "/model.safetensors"), 1e-7);
}

// LoRA adapts the image layers too (k_img, v_img in every block, img_emb's
// Linears); the file round-trips through wansample --lora and through the
// diffusers layout; a distillation student learns from an i2v teacher, and
// a few-step student of it gives every call the picture's condition.
TEST_F(ImageToVideo, LoraOnTheImageLayersAndDistillationFromAnImageTeacher) {
  const auto base = fresh("i2v-base");
  ASSERT_EQ(train(1, base, "--steps 3 --batch-size 4").status, 0);
  const auto lora = fresh("i2v-lora");
  const Job adapters = train(2, lora,
                             "--steps 6 --batch-size 2 --lora-rank 4 --base-precision fp32 --init " + base +
                                 "/model.safetensors --save-every 6");
  ASSERT_EQ(adapters.status, 0) << adapters.output;
  const auto file = wt::io::SafetensorsFile::open(lora + "/lora.safetensors");
  for (const char* layer :
       {"blocks.0.cross_attn.k_img", "blocks.1.cross_attn.v_img", "img_emb.proj.1", "img_emb.proj.3", "blocks.1.ffn.2"})
    EXPECT_NE(file.find(std::string("diffusion_model.") + layer + ".lora_A.weight"), nullptr) << layer;

  // The diffusers layout of the same checkpoint merges into the same weights.
  const std::string diffusers = lora + "/lora-diffusers.safetensors";
  const Job exported = launch(std::string(WANTRAIN_WANTRAIN) + " export --checkpoint " + lora +
                              "/step-00000006.h5 --names diffusers --out " + diffusers);
  ASSERT_EQ(exported.status, 0) << exported.output;
  const auto config = wt::wan::load_model_config(i2v_config());
  auto merged = [&](const std::string& lora_file) {
    wt::wan::WanModel model(config);
    wt::wan::load_weights(*model, base + "/model.safetensors");
    EXPECT_EQ(wt::wan::merge_lora_file(*model, lora_file, 1.0), 2 * 12 + 2);
    return model;
  };
  const auto official = merged(lora + "/lora.safetensors"), renamed = merged(diffusers);
  const auto a = official->parameters(), b = renamed->parameters();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-5, 1e-6)) << i;
  wt::wan::save_weights(*official, lora + "/merged.safetensors");

  // wansample from the base with the LoRA equals wansample from the merged
  // weights, both from a dataset sample's own condition.
  auto sample = [&](const std::string& name, const std::string& weights) {
    const std::string out = lora + "/" + name;
    fs::create_directories(out);
    const Job job = launch(std::string(WANTRAIN_WANSAMPLE) + " --model-config " + i2v_config() + " --data " + data_ +
                           " --index 3 --steps 4 --threads 1 --weights " + weights + " --out " + out + "/s.h5");
    EXPECT_EQ(job.status, 0) << job.output;
    const auto dataset = wt::data::Dataset::open(out);
    const auto& s = dataset.shape();
    auto latents = torch::empty({s.channels, s.frames, s.height, s.width});
    auto text = torch::empty({s.text_len, s.text_dim});
    int32_t length = 0;
    wt::data::SampleReader(dataset).read(0, latents, text, length);
    return latents;
  };
  const auto with_lora = sample("with-lora", base + "/model.safetensors --lora " + lora + "/lora.safetensors");
  const auto from_merged = sample("merged", lora + "/merged.safetensors");
  EXPECT_TRUE(torch::allclose(with_lora, from_merged, 1e-4, 1e-5))
      << (with_lora - from_merged).abs().max().item<float>();

  const auto student = fresh("i2v-distill");
  const Job distill = train(2, student,
                            "--steps 4 --batch-size 2 --mode distill --teacher " + base +
                                "/model.safetensors --teacher-config " + i2v_config());
  ASSERT_EQ(distill.status, 0) << distill.output;
  for (const auto& line : training_lines(student)) EXPECT_TRUE(std::isfinite(line["loss"].get<double>()));

  // A few-step consistency student of the same teacher: with
  // guidance 1 and one teacher step per student step its target is the
  // teacher's velocity, which the student (started on the teacher) gives
  // only when every call sees the picture's condition alike.
  const auto few = fresh("i2v-few-step");
  const Job few_step =
      train(2, few,
            "--steps 1 --batch-size 2 --mode distill --teacher " + base + "/model.safetensors --teacher-config " +
                i2v_config() +
                " --distill-method consistency --distill-steps 2 --distill-teacher-steps 2 --distill-guidance 1");
  ASSERT_EQ(few_step.status, 0) << few_step.output;
  const auto few_lines = training_lines(few);
  ASSERT_EQ(few_lines.size(), 1u);
  EXPECT_LT(few_lines[0]["loss"].get<double>(), 1e-10);  // after it, Adam moves the student
}

// Data and model that do not fit: one line naming both, status 2.
TEST_F(ImageToVideo, MismatchedDataAndModelAreOneLine) {
  const auto plain = synth_tiny_data("i2v-plain-data", 4, 1);
  const Job no_condition = train(1, fresh("i2v-on-plain"), "--steps 1 --batch-size 2", i2v_config(), plain);
  EXPECT_EQ(no_condition.status, 2) << no_condition.output;
  EXPECT_EQ(occurrences(no_condition.output,
                        "the i2v model needs the image condition /y in the shards: encode them "
                        "with wandata encode --condition i2v"),
            1u)
      << no_condition.output;
  const Job t2v = train(1, fresh("t2v-on-i2v"), "--steps 1 --batch-size 2", tiny_config());
  EXPECT_EQ(t2v.status, 2) << t2v.output;
  EXPECT_EQ(occurrences(t2v.output, "the shards hold an image condition /y that a t2v model does not read"), 1u)
      << t2v.output;
  const Job drop = train(1, fresh("t2v-image-drop"), "--steps 1 --batch-size 2 --image-drop 0.1", tiny_config(), plain);
  EXPECT_EQ(drop.status, 2) << drop.output;
  EXPECT_EQ(occurrences(drop.output, "option --image-drop: model config " + tiny_config() +
                                         " (t2v) has no CLIP branch whose features could be dropped"),
            1u)
      << drop.output;
}

}  // namespace
