// LoRA fine-tuning as users run it: wantrain --lora-rank on a base given by
// --init, on 1 and 2 ranks, resumed, and with bad options; read back through
// metrics.jsonl, checkpoints and lora.safetensors.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "../common/build_paths.hpp"
#include "../common/launch.hpp"
#include "../common/train_runs.hpp"
#include "wantrain/ckpt/checkpoint.hpp"
#include "wantrain/ckpt/directory.hpp"
#include "wantrain/data/dataset.hpp"
#include "wantrain/wan/model/lora.hpp"
#include "wantrain/wan/model/lora_file.hpp"
#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/io/safetensors.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/model/weights.hpp"

namespace {

using wt::testing::fresh;
using wt::testing::Job;
using wt::testing::launch;
using wt::testing::mpi_command;
using wt::testing::occurrences;
using namespace wt::testing::train_runs;

class LoraRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = synth_tiny_data("lora-data", 32, 5);
    // Two different bases: a few full-training steps from two seeds.
    for (const auto& [name, seed] : {std::pair{"lora-base-a", 1}, {"lora-base-b", 2}}) {
      const Job base = train(1, name, "--steps 3 --batch-size 4 --seed " + std::to_string(seed), "");
      ASSERT_EQ(base.status, 0) << base.output;
    }
  }

  static Job train(int ranks, const std::string& name, const std::string& options, const std::string& fresh_dir = "y") {
    const std::string dir = fresh_dir.empty() ? run_dir(name) : fresh(name);
    return WantrainJob(ranks).data(data_).output(dir).with("--log-every 1 " + options).run();
  }
  static std::string base(const std::string& which) { return run_dir("lora-base-" + which) + "/model.safetensors"; }
  static std::string lora(const std::string& extra = "") {
    return "--lora-rank 4 --lora-alpha 8 --lr 1e-2 --seed 7 --text-drop 0.3 " + extra;
  }

  // Base "a" held as a run held it (`held`: bf16 rounds it, fp8 quantises it), with the LoRA
  // file folded in in fp32, written to `out`.
  static void merge_by_hand(const std::string& lora_file, at::ScalarType held, const std::string& out) {
    wt::wan::WanModel model(wt::wan::load_model_config(tiny_config()), held);
    wt::wan::load_weights(*model, base("a"));
    if (held == at::kFloat8_e4m3fn) wt::wan::dequantize_fp8_linears(*model, torch::kFloat32);
    model->to(torch::kFloat32);
    wt::wan::merge_lora_file(*model, lora_file, 1.0);
    wt::wan::save_weights(*model, out);
  }

  static std::string data_;
};
std::string LoraRun::data_;

// The adapters are trained on 2 ranks x B exactly as on 1 rank x 2B; only
// they are checkpointed and written, in the layout ComfyUI/diffusers load.
//
// With an fp32 base, so that 1e-5 holds: a bf16 base's products are rounded
// to bf16, and how a GEMM blocks a batch of 2 or of 4 may round them
// differently (the bitwise resume below runs the bf16 default).
TEST_F(LoraRun, TwoRanksTrainTheAdaptersAsOneRankWithTheBatchDoubled) {
  const std::string common = lora("--steps 8 --init " + base("a") + " --ema-decay 0.9 --base-precision fp32 ");
  const Job one = train(1, "lora-1x4", common + "--batch-size 4");
  const Job two = train(2, "lora-2x2", common + "--batch-size 2");
  ASSERT_EQ(one.status, 0) << one.output;
  ASSERT_EQ(two.status, 0) << two.output;
  // wan-tiny: 2 blocks x (8 attention layers 64 -> 64 + ffn.0 64 -> 128 + ffn.2 128 -> 64), r (in + out) each, r = 4.
  const int64_t adapters = 2 * (8 * 4 * (64 + 64) + 2 * 4 * (64 + 128));
  EXPECT_EQ(occurrences(two.output, "lora: rank 4, alpha 8 (scale 2), targets all; " + std::to_string(adapters) +
                                        " adapter parameters trained"),
            1u)
      << two.output;
  const auto a = training_lines(run_dir("lora-1x4")), b = training_lines(run_dir("lora-2x2"));
  ASSERT_EQ(a.size(), 8u);
  ASSERT_EQ(b.size(), 8u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_LT(relative(b[i]["loss"], a[i]["loss"]), 1e-5) << "step " << i + 1;
  EXPECT_LT(weights_difference(run_dir("lora-2x2") + "/lora.safetensors", run_dir("lora-1x4") + "/lora.safetensors"),
            1e-5);

  const auto file = wt::io::SafetensorsFile::open(run_dir("lora-2x2") + "/lora.safetensors");
  EXPECT_EQ(file.entries().size(), size_t(2 * 10 * 3));  // 2 blocks x 10 layers x (A, B, alpha)
  const auto* a_entry = file.find("diffusion_model.blocks.1.ffn.2.lora_A.weight");
  const auto* b_entry = file.find("diffusion_model.blocks.1.ffn.2.lora_B.weight");
  const auto* alpha = file.find("diffusion_model.blocks.1.ffn.2.alpha");
  ASSERT_TRUE(a_entry && b_entry && alpha);
  EXPECT_EQ(a_entry->shape, (std::vector<int64_t>{4, 128}));  // [r, ffn_dim]
  EXPECT_EQ(b_entry->shape, (std::vector<int64_t>{64, 4}));   // [dim, r]
  EXPECT_EQ(file.read(*alpha).item<float>(), 8.0f);
  EXPECT_GT(file.read(*b_entry).abs().max().item<float>(), 0.0f);  // B moved from zero
  EXPECT_FALSE(std::filesystem::exists(run_dir("lora-2x2") + "/model.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(run_dir("lora-2x2") + "/lora-ema.safetensors"));

  const auto checkpoint = wt::ckpt::read_checkpoint(*wt::ckpt::linked_checkpoint(run_dir("lora-2x2"), "latest"));
  ASSERT_EQ(checkpoint.model.size(), size_t(2 * 10 * 2));
  for (const auto& [name, tensor] : checkpoint.model) EXPECT_NE(name.find(".lora_"), std::string::npos) << name;
  EXPECT_EQ(checkpoint.optim.size(), checkpoint.model.size());
  // wantrain export: the adapters again (as the run wrote them), under
  // diffusers' names, and merged into the base.
  const std::string dir = run_dir("lora-2x2"),
                    exporting = std::string(WANTRAIN_WANTRAIN) + " export --checkpoint " + dir + "/latest --out " + dir;
  for (const std::string& args : std::vector<std::string>{
           "/exported.safetensors", "/exported-ema.safetensors --ema", "/diffusers.safetensors --names diffusers",
           "/merged.safetensors --merge " + base("a"), "/x.safetensors --merge " + base("b")}) {
    const Job job = launch(exporting + args);
    if (args.find(base("b")) != std::string::npos) {
      EXPECT_EQ(job.status, 2) << job.output;
      EXPECT_EQ(occurrences(job.output, "option --merge: " + base("b") + " has checksum crc32:"), 1u) << job.output;
    } else {
      EXPECT_EQ(job.status, 0) << job.output;
    }
  }
  EXPECT_EQ(weights_difference(dir + "/exported.safetensors", dir + "/lora.safetensors"), 0);
  EXPECT_EQ(weights_difference(dir + "/exported-ema.safetensors", dir + "/lora-ema.safetensors"), 0);
  merge_by_hand(dir + "/lora.safetensors", at::kFloat, dir + "/by-hand.safetensors");
  merge_by_hand(dir + "/diffusers.safetensors", at::kFloat, dir + "/by-diffusers.safetensors");
  EXPECT_EQ(weights_difference(dir + "/by-diffusers.safetensors", dir + "/by-hand.safetensors"), 0);
  EXPECT_LT(weights_difference(dir + "/merged.safetensors", dir + "/by-hand.safetensors"), 1e-7);
}

// A LoRA run resumed is the uninterrupted run bit for bit; the resume needs
// the same base and the same adapters.
TEST_F(LoraRun, ResumeIsBitwiseAndNeedsTheSameBaseAndAdapters) {
  const std::string common = lora("--batch-size 2 --init " + base("a") + " ");
  ASSERT_EQ(train(2, "lora-straight", common + "--steps 6").status, 0);
  ASSERT_EQ(train(2, "lora-resumed", common + "--steps 3").status, 0);
  const Job resumed = train(2, "lora-resumed", common + "--steps 6 --resume auto", "");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_EQ(
      weights_difference(run_dir("lora-resumed") + "/lora.safetensors", run_dir("lora-straight") + "/lora.safetensors"),
      0);

  // The default bf16 base: --merge folds the adapters into the rounded
  // base they were trained on, in fp32.
  const std::string dir = run_dir("lora-resumed");
  const Job merged = launch(std::string(WANTRAIN_WANTRAIN) + " export --checkpoint " + dir + "/latest --out " + dir +
                            "/merged.safetensors --merge " + base("a"));
  ASSERT_EQ(merged.status, 0) << merged.output;
  merge_by_hand(dir + "/lora.safetensors", at::kBFloat16, dir + "/by-hand.safetensors");
  EXPECT_LT(weights_difference(dir + "/merged.safetensors", dir + "/by-hand.safetensors"), 1e-7);

  const std::string latest = run_dir("lora-resumed") + "/latest";
  const Job other_base =
      train(2, "lora-other-base", lora("--batch-size 2 --steps 8 --init " + base("b") + " --resume " + latest));
  EXPECT_EQ(other_base.status, 2) << other_base.output;
  EXPECT_EQ(occurrences(other_base.output, "its LoRA adapters were trained on base weights crc32:"), 1u)
      << other_base.output;
  const Job other_precision =
      train(2, "lora-other-precision",
            lora("--batch-size 2 --steps 8 --base-precision fp32 --init " + base("a") + " --resume " + latest));
  EXPECT_EQ(other_precision.status, 2) << other_precision.output;
  EXPECT_EQ(occurrences(other_precision.output,
                        "its LoRA adapters were trained on a base held in bf16, this run holds "
                        "it in fp32; resume with the same --base-precision"),
            1u)
      << other_precision.output;
  const Job other_rank =
      train(2, "lora-other-rank", "--lora-rank 8 --batch-size 2 --steps 8 --init " + base("a") + " --resume " + latest);
  EXPECT_EQ(other_rank.status, 2) << other_rank.output;
  EXPECT_EQ(occurrences(other_rank.output, "written with rank 4, alpha 8 (scale 2), targets all, this run has rank 8"),
            1u)
      << other_rank.output;
}

// An fp8 base (--base-precision fp8): the adapters train on it, a resume is
// bitwise, its blocks may be swapped, another precision is refused, and
// --merge folds the adapters into the base's dequantised values, what they
// were trained on.
TEST_F(LoraRun, AnFp8BaseTrainsResumesBitwiseSwapsBlocksAndMergesIntoItsDequantisedValues) {
  const std::string common = lora("--batch-size 2 --base-precision fp8 --init " + base("a") + " ");
  const Job straight = train(2, "lora-fp8", common + "--steps 6");
  ASSERT_EQ(straight.status, 0) << straight.output;
  EXPECT_EQ(occurrences(straight.output, "; block Linears held in fp8)"), 1u) << straight.output;
  ASSERT_EQ(train(2, "lora-fp8-resumed", common + "--steps 3").status, 0);
  const Job resumed = train(2, "lora-fp8-resumed", common + "--steps 6 --resume auto", "");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  const std::string dir = run_dir("lora-fp8");
  EXPECT_EQ(weights_difference(run_dir("lora-fp8-resumed") + "/lora.safetensors", dir + "/lora.safetensors"), 0);
  const auto losses = training_lines(dir);
  ASSERT_EQ(losses.size(), 6u);
  // Block swap (--blocks-to-swap): on the CPU the copy is a copy, so a run
  // with every block's frozen weights swapped (their fp8 scales with them),
  // recomputed under checkpointing or not, its blocks' inputs offloaded or
  // not (--activation-offload), trains the same adapters bit for bit.
  for (const std::string swap : {"--blocks-to-swap 2 --grad-checkpoint blocks", "--blocks-to-swap 1",
                                 "--blocks-to-swap 2 --grad-checkpoint blocks --activation-offload"}) {
    SCOPED_TRACE(swap);
    const Job swapped = train(2, "lora-fp8-swapped", common + "--steps 6 " + swap);
    ASSERT_EQ(swapped.status, 0) << swapped.output;
    EXPECT_EQ(occurrences(swapped.output, "block swap: the frozen weights of blocks 0 to "), 1u) << swapped.output;
    EXPECT_EQ(weights_difference(run_dir("lora-fp8-swapped") + "/lora.safetensors", dir + "/lora.safetensors"), 0);
    // The steps report the time spent copying blocks (a copy on the CPU takes some).
    const auto steps = training_lines(run_dir("lora-fp8-swapped"));
    ASSERT_FALSE(steps.empty());
    EXPECT_GT(steps[0].value("weights_wait_s", 0.0), 0.0);
  }

  const Job merged = launch(std::string(WANTRAIN_WANTRAIN) + " export --checkpoint " + dir + "/latest --out " + dir +
                            "/merged.safetensors --merge " + base("a"));
  ASSERT_EQ(merged.status, 0) << merged.output;
  merge_by_hand(dir + "/lora.safetensors", at::kFloat8_e4m3fn, dir + "/by-hand.safetensors");
  EXPECT_LT(weights_difference(dir + "/merged.safetensors", dir + "/by-hand.safetensors"), 1e-7);
  // The merge is of the quantised base: against the base as stored it differs by more than the adapters' fp32 sums.
  merge_by_hand(dir + "/lora.safetensors", at::kFloat, dir + "/on-fp32.safetensors");
  EXPECT_GT(weights_difference(dir + "/merged.safetensors", dir + "/on-fp32.safetensors"), 1e-4);

  const Job other_precision = train(
      2, "lora-fp8-as-bf16", lora("--batch-size 2 --steps 8 --init " + base("a") + " --resume " + dir + "/latest"));
  EXPECT_EQ(other_precision.status, 2) << other_precision.output;
  EXPECT_EQ(occurrences(other_precision.output,
                        "its LoRA adapters were trained on a base held in fp8, this run holds it in bf16; resume "
                        "with the same --base-precision"),
            1u)
      << other_precision.output;
}

// One expert of Wan2.2: --timestep-range is recorded in the checkpoint and a
// resume must keep it; the other form (timesteps in [0, 1000]) is refused.
TEST_F(LoraRun, ATimestepRangeIsKeptAcrossAResume) {
  const std::string common = lora("--batch-size 2 --init " + base("a") + " ");
  const Job expert = train(2, "lora-expert", common + "--steps 3 --timestep-range 0.875,1");
  ASSERT_EQ(expert.status, 0) << expert.output;
  const auto saved = wt::ckpt::read_checkpoint(*wt::ckpt::linked_checkpoint(run_dir("lora-expert"), "latest"));
  EXPECT_EQ(saved.objective.at("sigma_range"), "[0.875, 1]");
  const Job full = train(2, "lora-expert", common + "--steps 4 --resume auto", "");
  EXPECT_EQ(full.status, 2) << full.output;
  EXPECT_EQ(occurrences(full.output, "trained on sigma in [0.875, 1], this run on [0, 1] (--timestep-range)"), 1u)
      << full.output;
  const Job same = train(2, "lora-expert", common + "--steps 4 --resume auto --timestep-range 0.875,1", "");
  EXPECT_EQ(same.status, 0) << same.output;
  for (const std::string bad : {"875,1000", "0.9,0.5", "0.5"}) {
    const Job job = train(2, "lora-bad-range", "--steps 2 --batch-size 2 --timestep-range " + bad);
    EXPECT_EQ(job.status, 2) << job.output;
    EXPECT_EQ(occurrences(job.output, "option --timestep-range: "), 1u) << job.output;
  }
}

// wansample --lora FILE samples what the merged weights sample: the run's
// adapters folded into its base, written as a full model.
TEST_F(LoraRun, WansampleWithTheLoraSamplesAsTheMergedWeights) {
  const std::string dir = run_dir("lora-sample");
  ASSERT_EQ(train(2, "lora-sample", lora("--batch-size 2 --steps 20 --init " + base("a"))).status, 0);
  {
    wt::wan::WanModel merged(wt::wan::load_model_config(tiny_config()));
    wt::wan::load_weights(*merged, base("a"));
    EXPECT_EQ(wt::wan::merge_lora_file(*merged, dir + "/lora.safetensors", 1.0), 2 * 10);
    wt::wan::save_weights(*merged, dir + "/merged.safetensors");
  }
  auto sample = [&](const std::string& name, const std::string& weights) {
    std::filesystem::create_directories(dir + "/" + name);
    const Job job =
        launch(std::string(WANTRAIN_WANSAMPLE) + " --model-config " + tiny_config() + " --data " + data_ +
               " --index 3 --steps 4 --threads 1 --weights " + weights + " --out " + dir + "/" + name + "/s.h5");
    EXPECT_EQ(job.status, 0) << job.output;
    const auto dataset = wt::data::Dataset::open(dir + "/" + name);
    const auto& shape = dataset.shape();
    auto latents = torch::empty({shape.channels, shape.frames, shape.height, shape.width});
    auto text = torch::empty({shape.text_len, shape.text_dim});
    int32_t length = 0;
    wt::data::SampleReader(dataset).read(0, latents, text, length);
    return std::pair{latents, job.output};
  };
  const auto [with_lora, output] = sample("with-lora", base("a") + " --lora " + dir + "/lora.safetensors");
  EXPECT_EQ(occurrences(output, "wansample: LoRA " + dir + "/lora.safetensors merged at scale 1 (20 layers)"), 1u)
      << output;
  const auto merged = sample("merged", dir + "/merged.safetensors").first;
  const auto plain = sample("base", base("a")).first;
  EXPECT_TRUE(torch::allclose(with_lora, merged, 1e-4, 1e-5)) << (with_lora - merged).abs().max().item<float>();
  EXPECT_GT((with_lora - plain).abs().max().item<float>(), 1e-3);  // the adapters matter

  // --weights-dtype fp8 samples as the quantised weights, dequantised and
  // held in bf16, do: only the storage differs.
  {
    wt::wan::WanModel quantised(wt::wan::load_model_config(tiny_config()), at::kFloat8_e4m3fn);
    wt::wan::load_weights(*quantised, base("a"));
    wt::wan::dequantize_fp8_linears(*quantised, torch::kBFloat16);
    wt::wan::save_weights(*quantised, dir + "/dequantised.safetensors");
  }
  const auto [fp8, fp8_output] = sample("fp8", base("a") + " --weights-dtype fp8");
  EXPECT_EQ(occurrences(fp8_output, "(fp8 block weights)"), 1u) << fp8_output;
  EXPECT_TRUE(torch::equal(fp8, sample("dequantised", dir + "/dequantised.safetensors --weights-dtype bf16").first));
  EXPECT_GT((fp8 - plain).abs().max().item<float>(), 0);
  // A LoRA merges into an fp8 base too (quantised again with it).
  const auto fp8_lora =
      sample("fp8-lora", base("a") + " --weights-dtype fp8 --lora " + dir + "/lora.safetensors").first;
  EXPECT_GT((fp8_lora - fp8).abs().max().item<float>(), 1e-3);
}

// wantrain export --model-config --seed writes the weights a run from that
// seed starts from: a LoRA run from the seed and one from the file hold the
// same base (the same checksum). In bf16 (built in bf16, every tensor
// written in bf16) the file is the fp32 one rounded.
TEST_F(LoraRun, ASeedsInitialWeightsExportAsTheBaseOfARunFromThatSeed) {
  auto checksum_of = [](const std::string& output) {
    const auto at = output.find("crc32:");
    return at == std::string::npos ? std::string() : output.substr(at, 14);
  };
  auto file = [](const std::string& dtype) { return run_dir("lora-seed-" + dtype) + ".safetensors"; };
  for (const std::string dtype : {"fp32", "bf16"}) {
    const Job exported = launch(std::string(WANTRAIN_WANTRAIN) + " export --model-config " + tiny_config() +
                                " --seed 11 --dtype " + dtype + " --out " + file(dtype));
    ASSERT_EQ(exported.status, 0) << exported.output;
  }
  const std::string common = "--lora-rank 4 --batch-size 2 --steps 1 --base-precision fp32 --seed 11";
  const Job from_seed = train(2, "lora-from-seed", common);
  const Job from_file = train(2, "lora-from-file", common + " --init " + file("fp32"));
  ASSERT_EQ(from_seed.status, 0) << from_seed.output;
  ASSERT_EQ(from_file.status, 0) << from_file.output;
  EXPECT_FALSE(checksum_of(from_seed.output).empty()) << from_seed.output;
  EXPECT_EQ(checksum_of(from_seed.output), checksum_of(from_file.output)) << from_file.output;

  const auto fp32 = wt::io::SafetensorsFile::open(file("fp32"));
  const auto bf16 = wt::io::SafetensorsFile::open(file("bf16"));
  ASSERT_EQ(bf16.entries().size(), fp32.entries().size());
  for (const auto& entry : bf16.entries()) {
    EXPECT_EQ(entry.dtype, wt::io::TensorDtype::BF16) << entry.name;
    EXPECT_TRUE(torch::equal(bf16.read(entry), fp32.read(*fp32.find(entry.name)).to(at::kBFloat16))) << entry.name;
  }
  // --random-head: the same weights but for the head, which Wan's
  // initialisation zeroes (so no block would reach the output).
  const std::string head_file = run_dir("lora-seed-head") + ".safetensors";
  const Job head = launch(std::string(WANTRAIN_WANTRAIN) + " export --model-config " + tiny_config() +
                          " --seed 11 --random-head --out " + head_file);
  ASSERT_EQ(head.status, 0) << head.output;
  const auto with_head = wt::io::SafetensorsFile::open(head_file);
  for (const auto& entry : with_head.entries()) {
    const auto plain = fp32.read(*fp32.find(entry.name));
    if (entry.name == "head.head.weight") {
      EXPECT_EQ(plain.abs().max().item<float>(), 0.0f);
      EXPECT_GT(with_head.read(entry).abs().min().item<float>(), 0.0f);
    } else {
      EXPECT_TRUE(torch::equal(with_head.read(entry), plain)) << entry.name;
    }
  }
  const Job both = launch(std::string(WANTRAIN_WANTRAIN) + " export --checkpoint x.h5 --model-config " + tiny_config() +
                          " --out " + run_dir("x") + ".safetensors");
  EXPECT_EQ(both.status, 2) << both.output;
  EXPECT_EQ(occurrences(both.output, "option --model-config: give --checkpoint or --model-config, not both"), 1u)
      << both.output;
  const Job neither = launch(std::string(WANTRAIN_WANTRAIN) + " export --out " + run_dir("x") + ".safetensors");
  EXPECT_EQ(neither.status, 2) << neither.output;
  EXPECT_EQ(occurrences(neither.output, "option --checkpoint: give the checkpoint to export, or --model-config"), 1u)
      << neither.output;
}

TEST_F(LoraRun, BadOptionsAreOneLineAndStatus2) {
  struct Case {
    std::string options, expected;
  };
  for (const auto& c : std::vector<Case>{
           {"--lora-rank 4 --lora-targets self_attn.q,attn1.to_q",
            "option --lora-targets: 'attn1.to_q' is not a Linear layer of a Wan block, a VACE block or the image "
            "embedding (valid: self_attn.q"},
           {"--lora-alpha 8",
            "option --lora-rank: --lora-alpha, --lora-dropout, --lora-targets and --base-precision need --lora-rank R"},
           {"--base-precision bf16",
            "option --lora-rank: --lora-alpha, --lora-dropout, --lora-targets and --base-precision need --lora-rank R"},
           {"--lora-rank 4 --lora-dropout 1", "option --lora-dropout: must be in [0, 1), got 1"},
           {"--lora-rank 4 --activation-offload",
            "option --activation-offload: offloads the inputs that checkpointed blocks keep: it needs "
            "--grad-checkpoint blocks or every-N"},
           {"--blocks-to-swap 1",
            "option --blocks-to-swap: swaps a frozen base's blocks: it needs --lora-rank R (a LoRA run) or "
            "--trainable vace (a VACE model's branch trained alone)"},
           {"--lora-rank 4 --blocks-to-swap 3",
            "option --blocks-to-swap: 3: the model has 2 blocks (0 to 2 may be swapped)"},
           {"--lora-rank 4 --mode distill --teacher " + base("a") + " --teacher-config " + tiny_config(),
            "option --lora-rank: with --mode distill only for a few-step student (--distill-steps K): a smaller "
            "student trains in full"}}) {
    SCOPED_TRACE(c.options);
    const Job job = train(2, "lora-bad", "--steps 2 --batch-size 2 " + c.options);
    EXPECT_EQ(job.status, 2) << job.output;
    EXPECT_EQ(occurrences(job.output, c.expected), 1u) << job.output;
  }
}

}  // namespace
