// Wan2.2 A14B's two experts in one job (wantrain --experts high,low): the
// job's ranks split into two groups, each trains its expert as a one-expert
// run of its side of the boundary would, resumes bit for bit, exports both,
// and a group that fails ends the whole job with one line naming it.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "../common/build_paths.hpp"
#include "../common/launch.hpp"
#include "../common/train_runs.hpp"
#include "wantrain/ckpt/checkpoint.hpp"
#include "wantrain/ckpt/directory.hpp"
#include "wantrain/wan/model/diffusers_folder.hpp"
#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/model/weights.hpp"

namespace {

using wt::testing::children_of;
using wt::testing::fresh;
using wt::testing::Job;
using wt::testing::launch;
using wt::testing::mpi_command;
using wt::testing::occurrences;
using wt::testing::read_text;
using namespace wt::testing::train_runs;

class Experts : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // wan-tiny with diffusers' fixed 512 text tokens, so that the experts
    // also export as a diffusers pipeline.
    const std::string config_dir = fresh("experts-config");
    std::filesystem::create_directories(config_dir);
    config_ = config_dir + "/wan-tiny-512.json";
    {
      auto config = wt::wan::load_model_config(tiny_config());
      config.text_len = 512;
      std::ofstream(config_) << wt::wan::to_json(config) << "\n";
    }
    data_ = fresh("experts-data");
    const Job synth = launch(std::string(WANTRAIN_WANDATA) + " synth --out " + data_ +
                             " --samples 16 --shards 2 --frames 1 --size 8x8 --text-len 512 --text-dim 64 --seed 9");
    ASSERT_EQ(synth.status, 0) << synth.output;
    // Two different starting points, as A14B's experts are two models.
    for (const auto& [name, seed] : {std::pair{"experts-base-high", 1}, {"experts-base-low", 2}}) {
      const Job base = train(1, name, "--steps 2 --batch-size 4 --seed " + std::to_string(seed));
      ASSERT_EQ(base.status, 0) << base.output;
    }
  }

  static Job train(int ranks, const std::string& name, const std::string& options, bool fresh_dir = true) {
    const std::string dir = fresh_dir ? fresh(name) : run_dir(name);
    return WantrainJob(ranks).model(config_).data(data_).output(dir).with("--log-every 1 " + options).run();
  }
  static std::string base(const std::string& which) { return run_dir("experts-base-" + which) + "/model.safetensors"; }
  // The run's options beside the experts' (the global batch 2 x 2 of each group).
  static std::string common() {
    return "--batch-size 2 --lr 5e-3 --seed 4 --val-data " + data_ + " --val-every 2 --save-every 2 --keep 0 ";
  }
  static std::string experts() {
    return "--experts high,low --boundary 0.875 --high-noise " + base("high") + " --low-noise " + base("low") + " ";
  }

  static std::string data_, config_;
};
std::string Experts::data_, Experts::config_;

// Each group's steps are a one-expert run's on 2 ranks with its
// --timestep-range, its --init and the same seed: losses, validation and
// weights; a resume continues each group bit for bit; export writes both.
TEST_F(Experts, EachGroupTrainsAsAOneExpertRunResumesBitwiseAndExportsBoth) {
  const Job job = train(4, "experts", common() + experts() + "--steps 6");
  ASSERT_EQ(job.status, 0) << job.output;
  EXPECT_EQ(occurrences(job.output, "high ranks 0-1 (2), sigma' in [0.875, 1], run in high_noise_model/"), 1u)
      << job.output;
  EXPECT_EQ(occurrences(job.output, "low  ranks 2-3 (2), sigma' in [0, 0.875], run in low_noise_model/"), 1u)
      << job.output;
  const Job high =
      train(2, "experts-high-alone", common() + "--steps 6 --timestep-range 0.875,1 --init " + base("high"));
  const Job low = train(2, "experts-low-alone", common() + "--steps 6 --timestep-range 0,0.875 --init " + base("low"));
  ASSERT_EQ(high.status, 0) << high.output;
  ASSERT_EQ(low.status, 0) << low.output;
  const std::string dir = run_dir("experts");
  for (const auto& [expert, alone] : {std::pair{std::string("high"), run_dir("experts-high-alone")},
                                      {std::string("low"), run_dir("experts-low-alone")}}) {
    SCOPED_TRACE(expert);
    const std::string mine = dir + "/" + expert + "_noise_model";
    const auto a = training_lines(mine), b = training_lines(alone);
    ASSERT_EQ(a.size(), 6u);
    ASSERT_EQ(b.size(), 6u);
    for (size_t i = 0; i < a.size(); ++i) EXPECT_LT(relative(a[i]["loss"], b[i]["loss"]), 1e-6) << "step " << i + 1;
    const auto va = validation_lines(mine), vb = validation_lines(alone);
    ASSERT_EQ(va.size(), 3u);
    ASSERT_EQ(vb.size(), 3u);
    for (size_t i = 0; i < va.size(); ++i) EXPECT_LT(relative(va[i]["val_loss"], vb[i]["val_loss"]), 1e-6);
    EXPECT_LT(weights_difference(mine + "/model.safetensors", alone + "/model.safetensors"), 1e-6);
  }
  // The experts differ: they started apart and trained on different noise.
  EXPECT_GT(weights_difference(dir + "/high_noise_model/model.safetensors", dir + "/low_noise_model/model.safetensors"),
            1e-3);

  // Stopped after 3 steps and resumed to 6: each group as the straight run.
  ASSERT_EQ(train(4, "experts-resumed", common() + experts() + "--steps 3").status, 0);
  const Job resumed = train(4, "experts-resumed", common() + experts() + "--steps 6 --resume auto", false);
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  for (const std::string expert : {"high", "low"})
    EXPECT_EQ(weights_difference(run_dir("experts-resumed") + "/" + expert + "_noise_model/model.safetensors",
                                 dir + "/" + expert + "_noise_model/model.safetensors"),
              0)
        << expert;
  // On other group sizes the groups' runs cannot continue exactly: refused.
  const Job other =
      train(4, "experts-resumed", common() + experts() + "--steps 8 --expert-ranks 1,3 --resume auto", false);
  EXPECT_EQ(other.status, 2) << other.output;
  EXPECT_EQ(occurrences(other.output, "experts.json records"), 1u) << other.output;
  EXPECT_EQ(occurrences(other.output,
                        "a group's run continues exactly only on the same experts, group sizes and "
                        "boundary"),
            1u)
      << other.output;

  // As diffusers' WanPipeline: transformer/ the high-noise expert, transformer_2/ the low-noise one, read back.
  const Job pipeline = launch(std::string(WANTRAIN_WANTRAIN) + " export --checkpoint " + dir +
                              " --format diffusers --out " + dir + "/pipeline");
  ASSERT_EQ(pipeline.status, 0) << pipeline.output;
  const auto experts_folder = wt::wan::find_two_experts(dir + "/pipeline");
  ASSERT_TRUE(experts_folder.has_value());
  EXPECT_EQ(experts_folder->boundary_ratio, std::optional<double>(0.875));
  for (const auto& [folder, expert] : {std::pair{experts_folder->high_noise, std::string("high_noise_model")},
                                       {experts_folder->low_noise, std::string("low_noise_model")}}) {
    wt::wan::WanModel model(wt::wan::load_model_config(config_));
    wt::wan::load_weights(*model, folder);
    wt::wan::save_weights(*model, dir + "/pipeline/" + expert + ".safetensors");
    EXPECT_EQ(
        weights_difference(dir + "/pipeline/" + expert + ".safetensors", dir + "/" + expert + "/model.safetensors"), 0)
        << expert;
  }

  // wantrain export of the job's directory: each expert as the release's folder.
  const Job exported =
      launch(std::string(WANTRAIN_WANTRAIN) + " export --checkpoint " + dir + " --out " + dir + "/exported");
  ASSERT_EQ(exported.status, 0) << exported.output;
  for (const std::string folder : {"high_noise_model", "low_noise_model"}) {
    // The release's config.json: its model is the run's.
    EXPECT_EQ(wt::wan::to_json(wt::wan::load_model_config(dir + "/exported/" + folder + "/config.json")),
              wt::wan::to_json(wt::wan::load_model_config(config_)))
        << folder;
    EXPECT_EQ(weights_difference(dir + "/exported/" + folder + "/diffusion_pytorch_model.safetensors",
                                 dir + "/" + folder + "/model.safetensors"),
              0)
        << folder;
  }

  // An experts.json that lost a group: one line, and no pipeline of one expert.
  std::filesystem::copy_file(dir + "/experts.json", dir + "/experts.json.bak");
  auto layout = nlohmann::json::parse(wt::testing::read_text(dir + "/experts.json"));
  layout["groups"].erase(1);
  std::ofstream(dir + "/experts.json") << layout.dump();
  const Job one = launch(std::string(WANTRAIN_WANTRAIN) + " export --checkpoint " + dir + " --format diffusers --out " +
                         dir + "/one-expert");
  EXPECT_EQ(one.status, 2) << one.output;
  EXPECT_EQ(occurrences(one.output, "experts.json: \"groups\" names [{"), 1u) << one.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/one-expert")) << one.output;
  // Both groups listed, one without a checkpoint yet: one line, nothing written.
  layout = nlohmann::json::parse(wt::testing::read_text(dir + "/experts.json.bak"));
  std::ofstream(dir + "/experts.json") << layout.dump();
  std::filesystem::rename(dir + "/low_noise_model/latest", dir + "/low_noise_model/latest.bak");
  const Job unsaved = launch(std::string(WANTRAIN_WANTRAIN) + " export --checkpoint " + dir +
                             " --format diffusers --out " + dir + "/unsaved");
  EXPECT_EQ(unsaved.status, 2) << unsaved.output;
  EXPECT_EQ(occurrences(unsaved.output, "no checkpoint of low_noise_model yet"), 1u) << unsaved.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/unsaved")) << unsaved.output;
  std::filesystem::rename(dir + "/low_noise_model/latest.bak", dir + "/low_noise_model/latest");
}

// LoRA under ZeRO-1 in each group: the low-noise group's adapters are a
// one-expert LoRA run's on 2 ranks; export writes one LoRA file per expert.
TEST_F(Experts, LoraGroupsUnderZeroTrainAsOneExpertRunsAndExportOneFileEach) {
  const std::string lora = "--lora-rank 4 --lora-alpha 8 --zero 1 --steps 3 --batch-size 2 --lr 1e-2 --seed 6 ";
  const Job job = train(4, "experts-lora", lora + experts());
  ASSERT_EQ(job.status, 0) << job.output;
  const Job low = train(2, "experts-lora-low", lora + "--timestep-range 0,0.875 --init " + base("low"));
  ASSERT_EQ(low.status, 0) << low.output;
  const std::string dir = run_dir("experts-lora");
  EXPECT_LT(
      weights_difference(dir + "/low_noise_model/lora.safetensors", run_dir("experts-lora-low") + "/lora.safetensors"),
      1e-6);
  const Job exported =
      launch(std::string(WANTRAIN_WANTRAIN) + " export --checkpoint " + dir + " --out " + dir + "/exported");
  ASSERT_EQ(exported.status, 0) << exported.output;
  for (const std::string folder : {"high_noise_model", "low_noise_model"})
    EXPECT_EQ(
        weights_difference(dir + "/exported/" + folder + ".safetensors", dir + "/" + folder + "/lora.safetensors"), 0)
        << folder;
}

// A pre-emption signals every task (SLURM): each group checkpoints the step
// it reached and exits 75, the job too, and --resume auto takes each group
// on from its own checkpoint.
TEST_F(Experts, ASignalToEveryRankStopsEachGroupAtItsStepAndTheyResume) {
  const std::string dir = fresh("experts-signal");
  const auto job = wt::testing::start_background(
      mpi_command(4, WANTRAIN_WANTRAIN,
                  "--model-config " + config_ + " --data " + data_ + " --output-dir " + dir +
                      " --threads 1 --backend mpi --log-every 1 --batch-size 2 --steps 100000 " + experts()),
      dir + ".log");
  ASSERT_GT(job.pid, 0);
  auto logged = [&](const char* expert) { return training_lines(dir + "/" + expert + "_noise_model").size(); };
  wt::testing::wait_until([&] { return logged("high") >= 3 && logged("low") >= 3; }, 60);
  const auto ranks = children_of(job.pid);
  ASSERT_EQ(ranks.size(), 4u);
  for (const pid_t rank : ranks) ASSERT_EQ(kill(rank, SIGTERM), 0);
  const Job stopped = wt::testing::finish(job);
  const std::string& output = stopped.output;
  EXPECT_EQ(stopped.status, 75) << output;
  int64_t last = 0;
  for (const std::string expert : {"high", "low"}) {
    const auto latest = wt::ckpt::linked_checkpoint(dir + "/" + expert + "_noise_model", "latest");
    ASSERT_TRUE(latest.has_value()) << expert << output;
    const auto step = wt::ckpt::read_checkpoint(*latest).state.step;
    EXPECT_GE(step, 3) << expert;
    EXPECT_EQ(occurrences(output, "stopping at step " + std::to_string(step) + " on SIGTERM: checkpoint " + *latest),
              1u)
        << output;
    last = std::max(last, step);
  }
  const Job resumed = launch(mpi_command(4, WANTRAIN_WANTRAIN,
                                         "--model-config " + config_ + " --data " + data_ + " --output-dir " + dir +
                                             " --threads 1 --backend mpi --log-every 1 --batch-size 2 --steps " +
                                             std::to_string(last + 2) + " --resume auto " + experts()));
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  for (const std::string expert : {"high", "low"})
    EXPECT_EQ(training_lines(dir + "/" + expert + "_noise_model").back()["step"], last + 2) << expert;
}

// A group that fails (here: the low-noise expert's weights are another
// model's) ends the whole job in bounded time, the high-noise group's long
// run included, with one line naming the group; bad group options are one
// line each.
TEST_F(Experts, AFailingGroupEndsTheWholeJobWithOneLineNamingIt) {
  const std::string other_dir = fresh("experts-other-model"), other_model = other_dir + "/model.safetensors";
  std::filesystem::create_directories(other_dir);
  {
    const Job job = launch(std::string(WANTRAIN_WANTRAIN) + " export --model-config " +
                           std::string(WANTRAIN_SOURCE_DIR) + "/data/configs/wan-mini.json --out " + other_model);
    ASSERT_EQ(job.status, 0) << job.output;
  }
  const Job job = train(
      4, "experts-failing",
      "--batch-size 2 --steps 100000 --experts high,low --high-noise " + base("high") + " --low-noise " + other_model);
  EXPECT_NE(job.status, 0) << job.output;
  // Not the other group's 100000 steps (over 30 minutes here): the hang guard tells them apart.
  EXPECT_LT(job.seconds, kHangGuardSeconds) << job.output;
  EXPECT_EQ(occurrences(job.output, "the low expert group (ranks 2-3) ended with status 2: ending the whole job"), 1u)
      << job.output;
  EXPECT_EQ(occurrences(job.output, "rank 2/4, low expert group on "), 2u) << job.output;  // the error and the end

  for (const auto& [options, line] :
       {std::pair{std::string("--experts high,middle"), std::string("option --experts: expected high,low")},
        {"--experts high,low --expert-ranks 3,3", "option --expert-ranks: 6 ranks, but the job has 4"},
        {"--experts high,low --expert-ranks 2", "option --expert-ranks: expected H,L"},
        {"--experts high,low --expert-ranks 4294967298,2", "option --expert-ranks: expected H,L"},
        {"--boundary 0", "option --boundary: only with --experts high,low"},
        {"--experts high,low --boundary 1.5", "option --boundary: expected sigma'"},
        {"--experts high,low --expert-ranks 1,3 --sp 2",
         "option --sp: is 2: it must divide each expert group's ranks, and the high group has 1"},
        {"--experts high,low --timestep-range 0,0.5", "option --timestep-range: not with --experts"},
        {"--experts high,low --sample-every 2", "option --sample-every: with --experts, give --sample-ranks K"},
        {"--high-noise " + base("high"), "option --high-noise: only with --experts high,low"}}) {
    SCOPED_TRACE(options);
    const Job bad = train(4, "experts-bad", "--steps 2 --batch-size 2 " + options);
    EXPECT_EQ(bad.status, 2) << bad.output;
    EXPECT_EQ(occurrences(bad.output, line), 1u) << bad.output;
  }
}

}  // namespace
