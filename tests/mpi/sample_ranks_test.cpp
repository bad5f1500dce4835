// Samples on ranks of their own (wantrain --sample-ranks K): the sample
// ranks draw what the training ranks would have drawn inline, with ZeRO-3's
// weights sent unit by unit and a video's tokens split over K ranks;
// training is the run it would be without samples; both A14B experts reach
// the sample ranks, which draw as wansample draws the pair; sample ranks
// that fall behind cost dropped samples (one line each), never a stalled
// step, and a sample rank that dies ends the job.
#include <gtest/gtest.h>
#include <signal.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "../common/build_paths.hpp"
#include "../common/launch.hpp"
#include "../common/sample_shard.hpp"
#include "../common/train_runs.hpp"
#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/wan/plan/memory_plan.hpp"

namespace {

using wt::testing::children_of;
using wt::testing::finish;
using wt::testing::fresh;
using wt::testing::Job;
using wt::testing::launch;
using wt::testing::mpi_command;
using wt::testing::occurrences;
using wt::testing::read_text;
using wt::testing::start_background;
using wt::testing::wait_until;
using namespace wt::testing::train_runs;

class SampleRanks : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { data_ = synth_tiny_data("sample-ranks-data", 16, 9); }

  static std::string command(int ranks, const std::string& dir, const std::string& options) {
    return WantrainJob(ranks)
        .data(data_)
        .output(dir)
        .with("--log-every 1 --batch-size 2 --lr 5e-3 --seed 4 --ema-decay 0.9 --sample-steps 4 --sample-cfg 3 " +
              options)
        .command();
  }
  static Job train(int ranks, const std::string& name, const std::string& options, const std::string& env = "") {
    const Job job = launch(env + command(ranks, fresh(name), options));
    EXPECT_LT(job.seconds, kHangGuardSeconds);
    return job;
  }
  // A run's sample lines by step (metrics.jsonl: the run's; samples/metrics.jsonl: the sample ranks').
  static std::map<int64_t, Json> samples_of(const std::string& metrics) {
    std::map<int64_t, Json> out;
    std::ifstream in(metrics);
    for (std::string line; std::getline(in, line);) {
      const auto json = Json::parse(line);
      if (json.contains("sample_correlation")) out[json["step"].get<int64_t>()] = json;
    }
    return out;
  }

  static std::string data_;
};
std::string SampleRanks::data_;

// 2 training ranks and 1 sample rank; 2 training ranks under ZeRO-3 with 2
// sample ranks that split each sample's tokens; a LoRA run under ZeRO-1
// (the sample rank builds the frozen base itself and receives the
// adapters' EMA): the samples the sample ranks drew are the inline run's at
// their steps, each step they skipped is one line, the last is always
// drawn, and training is the inline run's.
TEST_F(SampleRanks, DrawWhatInlineSamplingDrawsAndLeaveTrainingAsItWas) {
  const std::string options = "--steps 8 --sample-every 2 ", lora = "--lora-rank 4 --lora-alpha 8 --zero 1 ";
  for (const auto& [name, more] :
       {std::pair{std::string("sample-ranks-inline"), std::string()}, {"sample-ranks-inline-lora", lora}}) {
    const Job inline_run = train(2, name, options + more);
    ASSERT_EQ(inline_run.status, 0) << inline_run.output;
  }
  for (const auto& [name, ranks, more, reference] :
       {std::tuple{std::string("sample-ranks-one"), 3, std::string("--sample-ranks 1"),
                   std::string("sample-ranks-inline")},
        {"sample-ranks-zero3", 4, "--sample-ranks 2 --zero 3", "sample-ranks-inline"},
        {"sample-ranks-lora", 3, lora + "--sample-ranks 1", "sample-ranks-inline-lora"}}) {
    SCOPED_TRACE(name);
    const auto expected = samples_of(run_dir(reference) + "/metrics.jsonl");
    ASSERT_EQ(expected.size(), 4u);
    const Job job = train(ranks, name, options + more);
    ASSERT_EQ(job.status, 0) << job.output;
    const std::string dir = run_dir(name);
    expect_same_losses(dir, run_dir(reference), 8);
    const std::string ema = more.find("lora") != std::string::npos ? "/lora-ema.safetensors" : "/ema.safetensors";
    EXPECT_LT(weights_difference(dir + ema, run_dir(reference) + ema), 1e-6);
    if (name == "sample-ranks-one") {  // the banner says what a sample rank holds: wan-tiny's weights in fp32
      const auto weights =
          wt::wan::format_bytes(4.0 * double(wt::wan::parameter_count(wt::wan::load_model_config(tiny_config()))));
      EXPECT_EQ(occurrences(job.output,
                            "sample ranks: job ranks 2-2 draw the samples (--sample-ranks 1); the others "
                            "train (ranks 0-1); each holds "),
                1u)
          << job.output;
      EXPECT_EQ(occurrences(job.output, ": weights " + weights + ", a forward "), 1u) << weights << job.output;
    }
    // The run's own log has no sample lines: the sample ranks keep theirs.
    EXPECT_TRUE(samples_of(dir + "/metrics.jsonl").empty());
    const auto drawn = samples_of(dir + "/samples/metrics.jsonl");
    ASSERT_TRUE(drawn.count(8)) << job.output;
    for (const auto& [step, line] : drawn) {
      ASSERT_TRUE(expected.count(step)) << step;
      EXPECT_LT(relative(line["sample_mse"], expected.at(step)["sample_mse"]), 1e-5) << "step " << step;
      EXPECT_LT(
          std::abs(line["sample_correlation"].get<double>() - expected.at(step)["sample_correlation"].get<double>()),
          1e-5)
          << "step " << step;
      EXPECT_TRUE(std::filesystem::exists(dir + "/samples/step-0000000" + std::to_string(step) + ".png"));
    }
    EXPECT_EQ(occurrences(job.output, "this one is dropped"), expected.size() - drawn.size()) << job.output;
    EXPECT_EQ(occurrences(job.output, "the weights of the sample went to the sample ranks"), drawn.size())
        << job.output;
    EXPECT_FALSE(std::filesystem::is_empty(dir + "/tb/samples"));
  }
}

// Samples with step caching (--sample-cache easycache): the sample rank
// draws what the inline run draws, and the cache changes the samples (it
// skips), within what a cache costs.
TEST_F(SampleRanks, CachedSamplesAreDrawnAsInline) {
  const std::string options = "--steps 8 --sample-every 4 ",  // 4 sample steps
      cache = "--sample-cache easycache --sample-cache-threshold 0.5 --sample-cache-keep-first 1 ";
  const Job plain = train(2, "sample-ranks-uncached", options);
  ASSERT_EQ(plain.status, 0) << plain.output;
  const Job inline_run = train(2, "sample-ranks-cached-inline", options + cache);
  ASSERT_EQ(inline_run.status, 0) << inline_run.output;
  const Job job = train(3, "sample-ranks-cached", options + cache + "--sample-ranks 1");
  ASSERT_EQ(job.status, 0) << job.output;
  const auto uncached = samples_of(run_dir("sample-ranks-uncached") + "/metrics.jsonl");
  const auto expected = samples_of(run_dir("sample-ranks-cached-inline") + "/metrics.jsonl");
  const auto drawn = samples_of(run_dir("sample-ranks-cached") + "/samples/metrics.jsonl");
  ASSERT_EQ(expected.size(), 2u);
  ASSERT_TRUE(drawn.count(8)) << job.output;
  for (const auto& [step, line] : drawn)
    EXPECT_LT(relative(line["sample_mse"], expected.at(step)["sample_mse"]), 1e-5) << "step " << step;
  const double cached_mse = expected.at(8)["sample_mse"].get<double>(),
               plain_mse = uncached.at(8)["sample_mse"].get<double>();
  EXPECT_NE(cached_mse, plain_mse);
  EXPECT_LT(std::abs(cached_mse - plain_mse), 0.5 * plain_mse);
}

// Few-step students: a LoRA student, whose frozen base the sample rank
// reads from the teacher itself, and a full distribution-matching student
// under ZeRO-1, whose fake score is never sent: drawn as inline.
TEST_F(SampleRanks, FewStepStudentsAreDrawnAsInline) {
  const std::string teacher = train_tiny_teacher("sample-ranks-teacher", data_) + "/latest";
  for (const auto& [name, student] :
       {std::pair{std::string("lora"), std::string("--lora-rank 4 --lora-alpha 8 ")}, {"dmd", "--zero 1 "}}) {
    SCOPED_TRACE(name);
    const std::string options =
        "--mode distill --teacher " + teacher + " --distill-steps 2 --steps 4 --sample-every 2 " + student;
    const Job inline_run = train(2, "sample-ranks-student-inline-" + name, options);
    ASSERT_EQ(inline_run.status, 0) << inline_run.output;
    const Job job = train(3, "sample-ranks-student-" + name, options + "--sample-ranks 1");
    ASSERT_EQ(job.status, 0) << job.output;
    const auto expected = samples_of(run_dir("sample-ranks-student-inline-" + name) + "/metrics.jsonl");
    const auto drawn = samples_of(run_dir("sample-ranks-student-" + name) + "/samples/metrics.jsonl");
    ASSERT_TRUE(expected.count(4) && drawn.count(4)) << job.output;
    EXPECT_LT(relative(drawn.at(4)["sample_mse"], expected.at(4)["sample_mse"]), 1e-5) << job.output;
  }
}

// Both experts (2 + 2 ranks, validating) and one sample rank: the last
// sample is the pair's at the last step, as wansample draws the two
// experts' EMA weights from the same noise; the sample ranks are no expert
// group's.
TEST_F(SampleRanks, BothExpertsReachTheSampleRanksWhichDrawAsWansampleDrawsThePair) {
  const Job job =
      train(5, "sample-ranks-experts",
            "--steps 8 --sample-every 4 --experts high,low --sample-ranks 1 --val-data " + data_ + " --val-every 4");
  ASSERT_EQ(job.status, 0) << job.output;
  EXPECT_EQ(occurrences(job.output, "sample ranks 4-4: every 4 steps they receive the two experts' weights"), 1u)
      << job.output;
  const std::string dir = run_dir("sample-ranks-experts");
  for (const std::string expert : {"high", "low"})
    EXPECT_EQ(validation_lines(dir + "/" + expert + "_noise_model").size(), 2u) << expert;
  const auto drawn = samples_of(dir + "/samples/metrics.jsonl");
  // Step 8's pair always (the last sample is waited for); step 4's when the
  // sample rank had started by then.
  ASSERT_TRUE(drawn.count(8)) << job.output;
  EXPECT_GE(occurrences(job.output, "the weights of the sample went to the sample ranks"), 2 * drawn.size())
      << job.output;

  const Job pair =
      launch(std::string(WANTRAIN_WANSAMPLE) + " --model-config " + tiny_config() + " --high-noise " + dir +
             "/high_noise_model/ema.safetensors --low-noise " + dir +
             "/low_noise_model/ema.safetensors --boundary 0.875 --data " + data_ +
             " --index 0 --seed 4 --steps 4 --cfg 3 --shift 5 --solver unipc --threads 1 --out " + dir + "/pair.h5");
  ASSERT_EQ(pair.status, 0) << pair.output;
  const auto sample = wt::testing::sampled_latents(dir + "/pair.h5").to(torch::kFloat64);
  const auto reference = wt::testing::sampled_latents(data_ + "/shard-00000.h5").to(torch::kFloat64);
  const double mse = (sample - reference).square().mean().item<double>();
  EXPECT_LT(relative(drawn.at(8)["sample_mse"], mse), 1e-5) << drawn.at(8).dump() << " against " << mse;
  // Not what one expert alone draws: the pair's sample differs from the low-noise expert's.
  const Job low =
      launch(std::string(WANTRAIN_WANSAMPLE) + " --model-config " + tiny_config() + " --weights " + dir +
             "/low_noise_model/ema.safetensors --data " + data_ +
             " --index 0 --seed 4 --steps 4 --cfg 3 --shift 5 --solver unipc --threads 1 --out " + dir + "/low.h5");
  ASSERT_EQ(low.status, 0) << low.output;
  EXPECT_GT((wt::testing::sampled_latents(dir + "/low.h5").to(torch::kFloat64) - sample).abs().max().item<double>(),
            1e-4);
}

// Sample ranks that fall behind (each sample takes them 3 s, training 10
// steps far less): the samples they cannot take are dropped with one line
// each and training never waits, except for the last sample; past
// --checkpoint-timeout even that one is dropped and the job ends with one
// line naming the sample ranks, the checkpoint and weights written.
TEST_F(SampleRanks, SampleRanksThatFallBehindDropSamplesWithOneLineEachAndNeverStallTraining) {
  const Job job = train(3, "sample-ranks-behind", "--steps 12 --sample-every 2 --sample-ranks 1",
                        "WANTRAIN_TEST_DELAY=sample_draw:3 ");
  ASSERT_EQ(job.status, 0) << job.output;
  const std::string dir = run_dir("sample-ranks-behind");
  const auto drawn = samples_of(dir + "/samples/metrics.jsonl");
  // The first sample holds them 3 s; steps 4 to 10 pass meanwhile; the last is waited for.
  EXPECT_EQ(drawn.size(), 2u) << job.output;
  EXPECT_TRUE(drawn.count(2) && drawn.count(12)) << job.output;
  for (const int step : {4, 6, 8, 10})
    EXPECT_EQ(occurrences(job.output, "step " + std::to_string(step) +
                                          ": the sample ranks are still busy with an earlier sample: this one is "
                                          "dropped"),
              1u)
        << job.output;

  const Job stuck = train(3, "sample-ranks-stuck", "--steps 4 --sample-every 2 --sample-ranks 1 --checkpoint-timeout 1",
                          "WANTRAIN_TEST_DELAY=sample_draw:8 ");
  EXPECT_NE(stuck.status, 0) << stuck.output;
  EXPECT_EQ(occurrences(stuck.output, "step 4: the sample ranks are still busy with an earlier sample after 1 s"), 1u)
      << stuck.output;
  EXPECT_EQ(occurrences(stuck.output,
                        "the sample ranks (2-2) have not finished their last sample 1 s after training ended with "
                        "status 0 (--checkpoint-timeout): ending the job"),
            1u)
      << stuck.output;
  EXPECT_TRUE(std::filesystem::exists(run_dir("sample-ranks-stuck") + "/ema.safetensors")) << stuck.output;
}

// A sample rank killed while the others train ends the whole job in
// bounded time (the launcher ends it), rather than training on with no one
// to draw its samples.
TEST_F(SampleRanks, ASampleRankThatDiesEndsTheJob) {
  const std::string dir = fresh("sample-ranks-killed");
  const auto job = start_background(command(3, dir, "--steps 100000 --sample-every 5 --sample-ranks 1"), dir + ".log");
  ASSERT_GT(job.pid, 0);
  ASSERT_TRUE(wait_until([&] { return !samples_of(dir + "/samples/metrics.jsonl").empty(); }, 60))
      << read_text(job.log);
  // The sample rank: the launched rank whose environment says job rank 2.
  pid_t sample_rank = 0;
  for (const pid_t rank : children_of(job.pid)) {
    const std::string environment = read_text("/proc/" + std::to_string(rank) + "/environ");
    if (environment.find(std::string("OMPI_COMM_WORLD_RANK=2") + '\0') != std::string::npos) sample_rank = rank;
  }
  ASSERT_NE(sample_rank, 0) << read_text(job.log);
  ASSERT_EQ(kill(sample_rank, SIGKILL), 0);
  const Job ended = finish(job);
  EXPECT_LT(ended.seconds, kHangGuardSeconds);
  EXPECT_NE(ended.status, 0) << ended.output;
}

// What --sample-ranks needs, one line each.
TEST_F(SampleRanks, BadOptionsAreOneLineEach) {
  for (const auto& [ranks, options, line] :
       {std::tuple{3, std::string("--steps 2 --sample-ranks 1"),
                   std::string("option --sample-ranks: needs --sample-every N")},
        {2, "--steps 2 --sample-every 2 --sample-ranks 2", "option --sample-ranks: 2 of the job's 2 ranks leave none"},
        {4, "--steps 2 --sample-every 2 --sample-ranks 3",
         "option --sample-ranks: model config " + tiny_config() + "'s 4 heads do not split over 3 ranks"},
        {3, "--steps 2 --sample-every 2 --sample-ranks -1", "option --sample-ranks: must be 0"},
        {4, "--steps 2 --sample-every 2 --sample-ranks 1 --sp 2",
         "option --sp: is 2: it must divide the 3 training ranks (the job's 4 less --sample-ranks 1)"}}) {
    SCOPED_TRACE(options);
    const Job bad = train(ranks, "sample-ranks-bad", options);
    EXPECT_EQ(bad.status, 2) << bad.output;
    EXPECT_EQ(occurrences(bad.output, line), 1u) << bad.output;
  }
}

}  // namespace
