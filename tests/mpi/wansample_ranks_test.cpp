// wansample on several ranks (mpirun -np N wansample): each sample's tokens
// split over the ranks with Ulysses, as training's --sp, and with
// --cfg-parallel the two branches of guidance on two halves of the ranks.
// The sample equals the one process's from the same seed, with guidance and
// with two experts; a split the job or the model cannot take is one line,
// status 2.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>
#include <tuple>

#include "../common/build_paths.hpp"
#include "../common/launch.hpp"
#include "../common/sample_shard.hpp"
#include "../common/train_runs.hpp"
#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/model/weights.hpp"

namespace {

using wt::testing::fresh;
using wt::testing::Job;
using wt::testing::launch;
using wt::testing::mpi_command;
using wt::testing::occurrences;
using wt::testing::sampled_latents;

}  // namespace

TEST(WansampleRanks, SplitSequencesSampleWhatOneProcessSamples) {
  const std::string dir = fresh("wansample-ranks");
  std::filesystem::create_directories(dir);
  const std::string data =
      wt::testing::train_runs::synth_tiny_data("wansample-ranks-data", 4, 3);  // 8x8 latents: 16 tokens
  // Two models of wan-tiny's shape (4 heads), drawn from two seeds.
  const auto config = wt::wan::load_model_config(wt::testing::train_runs::tiny_config());
  for (const auto& [name, seed] : {std::pair{"a", 1}, {"b", 2}, {"h", 3}}) {
    torch::manual_seed(seed);
    wt::wan::WanModel model(config);
    // h: a head that is not Wan's zero start, so that the velocity depends on the blocks.
    if (std::string(name) == "h") model->head->head->weight.data().normal_(0, 0.5);
    wt::wan::save_weights(*model, dir + "/" + name + ".safetensors");
  }
  const std::string common = "--model-config " + wt::testing::train_runs::tiny_config() + " --data " + data +
                             " --index 1 --steps 4 --seed 3 --threads 1 ";
  for (const std::string& weights :
       {"--weights " + dir + "/a.safetensors --cfg 2",
        "--high-noise " + dir + "/a.safetensors --low-noise " + dir + "/b.safetensors --cfg 3,4 --boundary 0.7"}) {
    const Job one = launch(std::string(WANTRAIN_WANSAMPLE) + " " + common + weights + " --out " + dir + "/one.h5");
    ASSERT_EQ(one.status, 0) << one.output;
    const auto reference = sampled_latents(dir + "/one.h5");
    // Split over 2 and 4 ranks; with --cfg-parallel the two branches of
    // guidance side by side, on 1 rank each or split over 2 each.
    // With --shard-weights each rank holds 1/N of the blocks' weights and
    // gathers each block: the same sample, bit for bit, as unsharded.
    std::map<std::pair<int, bool>, at::Tensor> unsharded;
    for (const auto& [ranks, cfg_parallel, shard] : {std::tuple{2, false, false},
                                                     {4, false, false},
                                                     {2, true, false},
                                                     {4, true, false},
                                                     {2, false, true},
                                                     {4, true, true}}) {
      const int sp = cfg_parallel ? ranks / 2 : ranks;
      const std::string out =
          dir + "/ranks-" + std::to_string(ranks) + (cfg_parallel ? "-cfg" : "") + (shard ? "-shard.h5" : ".h5");
      const Job split =
          launch(mpi_command(ranks, WANTRAIN_WANSAMPLE,
                             common + weights + " --out " + out + (cfg_parallel ? " --cfg-parallel" : "") +
                                 (shard ? " --shard-weights" : "")));
      ASSERT_EQ(split.status, 0) << split.output;
      EXPECT_LT(split.seconds, wt::testing::train_runs::kHangGuardSeconds);
      if (sp > 1) {
        EXPECT_EQ(occurrences(split.output, "wansample: " + std::to_string(sp) +
                                                " ranks split each sample's 16 tokens (Ulysses, " +
                                                std::to_string(4 / sp) + " heads a rank)"),
                  1u)
            << split.output;
      }
      if (cfg_parallel) {
        EXPECT_EQ(occurrences(split.output, "wansample: the two branches of guidance side by side, " +
                                                std::to_string(sp) + (sp == 1 ? " rank each" : " ranks each")),
                  1u)
            << split.output;
      }
      EXPECT_EQ(occurrences(split.output, "wrote latents"), 1u) << split.output;  // rank 0's lines alone
      const auto sample = sampled_latents(out);
      const double error = (sample - reference).abs().max().item<double>() / reference.abs().max().item<double>();
      EXPECT_LE(error, 1e-5) << weights << ", " << ranks << " ranks" << (cfg_parallel ? ", --cfg-parallel" : "")
                             << (shard ? ", --shard-weights" : "");
      if (!shard) {
        unsharded[{ranks, cfg_parallel}] = sample;
        continue;
      }
      EXPECT_EQ(occurrences(split.output, "sharded over " + std::to_string(ranks) + " ranks: "),
                weights.find("--high-noise") == std::string::npos ? 1u : 2u)
          << split.output;
      EXPECT_TRUE(torch::equal(sample, unsharded.at({ranks, cfg_parallel})))
          << weights << ", " << ranks << " ranks, --shard-weights";
    }
  }

  // With a step cache (easycache: its statistics summed over the ranks
  // that split the tokens) every rank skips alike: the same skips and the
  // same sample as one process, split, with the branches side by side or
  // with sharded weights; and the cache skips, so the sample differs from
  // the uncached one.
  {
    const std::string plain_options = "--model-config " + wt::testing::train_runs::tiny_config() + " --data " + data +
                                      " --index 1 --steps 16 --seed 3 --threads 1 --weights " + dir +
                                      "/h.safetensors --cfg 2 ";
    const std::string cached = plain_options + "--cache easycache --cache-threshold 0.5 --out ";
    const Job plain = launch(std::string(WANTRAIN_WANSAMPLE) + " " + plain_options + "--out " + dir + "/plain.h5");
    ASSERT_EQ(plain.status, 0) << plain.output;
    const Job one = launch(std::string(WANTRAIN_WANSAMPLE) + " " + cached + dir + "/cached.h5");
    ASSERT_EQ(one.status, 0) << one.output;
    const auto reference = sampled_latents(dir + "/cached.h5");
    EXPECT_FALSE(torch::equal(reference, sampled_latents(dir + "/plain.h5")));
    const auto ran = one.output.find(" model evaluations ran, ");
    ASSERT_NE(ran, std::string::npos) << one.output;
    const auto skips = one.output.substr(one.output.rfind("step cache: ", ran), 60);  // "step cache: 24 of 32 ..."
    EXPECT_EQ(skips.find("step cache: 32 of 32"), std::string::npos) << "nothing skipped: " << one.output;
    for (const std::string split_by : {"", " --cfg-parallel", " --shard-weights"}) {
      const Job split = launch(mpi_command(2, WANTRAIN_WANSAMPLE, cached + dir + "/cached-2.h5" + split_by));
      ASSERT_EQ(split.status, 0) << split.output;
      if (split_by != " --cfg-parallel") {  // each half of --cfg-parallel counts its own branch
        EXPECT_EQ(occurrences(split.output, skips), 1u) << skips << split.output;
      }
      const auto sample = sampled_latents(dir + "/cached-2.h5");
      EXPECT_LE((sample - reference).abs().max().item<double>() / reference.abs().max().item<double>(), 1e-5)
          << "2 ranks" << split_by;
    }
  }

  // 3 ranks cannot split 4 heads; --sp must be the job's ranks; the
  // branches of --cfg-parallel need an even number of ranks and guidance.
  for (const auto& [ranks, options, line] :
       {std::tuple{3, std::string(), std::string("option --sp: 3: the model's 4 attention heads do not divide by it")},
        {2, std::string(" --sp 4"), std::string("option --sp: 4: this job has 2 ranks")},
        {3, std::string(" --cfg-parallel"),
         std::string("option --cfg-parallel: the two branches of guidance take half the ranks each: this job has 3")},
        {2, std::string(" --cfg-parallel --cfg 1"),
         std::string("option --cfg-parallel: needs guidance with both branches (--cfg other than 0 and 1)")},
        {1, std::string(" --shard-weights"),
         std::string("option --shard-weights: shards the weights over the ranks of mpirun -np N; this is one process")},
        {2, std::string(" --shard-weights --lora ") + dir + "/a.safetensors",
         std::string("option --shard-weights: a LoRA is merged into whole weights: merge it first")},
        {1, std::string(" --cache magcache"),
         std::string("option --cache: magcache needs a calibration of ") + dir + "/a.safetensors: there is none at " +
             dir + "/a.step-cache.json"},
        {1, std::string(" --cache teacache --cache-calibration ") + dir + "/a.safetensors",
         std::string("step cache calibration ") + dir + "/a.safetensors: not JSON"},
        {1, std::string(" --cache easycache --cache-threshold -1"),
         std::string("option --cache-threshold: -1 is not a threshold (a number >= 0)")},
        {1, std::string(" --sp 2"),
         std::string("option --sp: 2: the sample runs as one process: start it with "
                     "mpirun -np 2")}}) {
    const Job bad = launch(mpi_command(
        ranks, WANTRAIN_WANSAMPLE, common + "--weights " + dir + "/a.safetensors --out " + dir + "/bad.h5" + options));
    EXPECT_EQ(bad.status, 2) << bad.output;
    EXPECT_EQ(occurrences(bad.output, line), 1u) << bad.output;
    EXPECT_FALSE(std::filesystem::exists(dir + "/bad.h5"));
  }
}
