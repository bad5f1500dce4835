// wansample end to end: a dataset from wandata synth, weights written by the
// Wan library, sampling to a one-sample shard and a PNG, and its errors.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "../common/build_paths.hpp"
#include "../common/launch.hpp"
#include "../common/sample_shard.hpp"
#include "../common/sparse_weights.hpp"
#include "wantrain/distributed/cuda_libraries.hpp"
#include "wantrain/data/dataset.hpp"
#include "wantrain/io/safetensors.hpp"
#include "wantrain/wan/model/diffusers_export.hpp"
#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/model/weights.hpp"

// Its own namespace: the unity build compiles it with the other e2e tests,
// whose helpers have the same names.
namespace wansample_test {

namespace {

using wt::testing::fresh;
using wt::testing::Job;
using wt::testing::launch;
using wt::testing::sampled_latents;

const std::string kTiny = std::string(WANTRAIN_SOURCE_DIR) + "/data/configs/wan-tiny.json";
const std::string kStudent = std::string(WANTRAIN_SOURCE_DIR) + "/data/configs/wan-tiny-student.json";

// Weights of `config` whose head is not zero, so samples depend on the model.
std::string write_weights(const std::string& config, const std::string& path) {
  torch::manual_seed(11);
  wt::wan::WanModel model(wt::wan::load_model_config(config));
  {
    torch::NoGradGuard no_grad;
    model->head->head->weight.normal_(0.0, 0.05);
  }
  wt::wan::save_weights(*model, path, torch::kBFloat16);
  return path;
}

// Width and height from a PNG's IHDR chunk (bytes 16..23, big-endian).
std::pair<uint32_t, uint32_t> png_size(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 24 || bytes.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0 || bytes.compare(12, 4, "IHDR") != 0)
    return {0, 0};
  auto be32 = [&](size_t at) {
    uint32_t v = 0;
    for (size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(bytes[at + i]);
    return v;
  };
  return {be32(16), be32(20)};
}

class Wansample : public ::testing::Test {
 protected:
  void SetUp() override {
    // one directory per test: CTest runs them in parallel
    dir_ = fresh(std::string("wansample-") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    const Job synth = launch(std::string(WANTRAIN_WANDATA) + " synth --out " + dir_ +
                             "/data --samples 6 --shards 2 --frames 2 --size 8x8 --text-len 16 --text-dim 64");
    ASSERT_EQ(synth.status, 0) << synth.output;
    weights_ = write_weights(kTiny, dir_ + "/tiny.safetensors");
  }
  Job sample(const std::string& args) {
    return launch(std::string(WANTRAIN_WANSAMPLE) + " --model-config " + kTiny + " --threads 1 " + args);
  }
  std::string dir_, weights_;
};

}  // namespace

TEST_F(Wansample, SamplesADatasetPromptToAShardAndAPreview) {
  const std::string common =
      " --weights " + weights_ + " --data " + dir_ + "/data --index 3 --steps 3 --cfg 2 --seed 5";
  const Job job = sample(common + " --out " + dir_ + "/a.h5 --png " + dir_ + "/a.png");
  ASSERT_EQ(job.status, 0) << job.output;
  const auto info = wt::data::inspect_shard(dir_ + "/a.h5");
  EXPECT_EQ(info.samples, 1);
  EXPECT_EQ(info.shape.latents_string(), "[N,16,2,8,8] float32");
  const auto latents = sampled_latents(dir_ + "/a.h5");
  EXPECT_TRUE(torch::isfinite(latents).all().item<bool>());
  // 2 frames of 8x8 enlarged 4x with 2-pixel gaps; 4 channel rows for the
  // sample and 4 for the dataset's own latents.
  EXPECT_EQ(png_size(dir_ + "/a.png"), (std::pair<uint32_t, uint32_t>{2 * (32 + 2) + 2, 8 * (32 + 2) + 2}));

  // The same seed gives the same latents; another seed others.
  ASSERT_EQ(sample(common + " --out " + dir_ + "/b.h5").status, 0);
  EXPECT_TRUE(torch::equal(sampled_latents(dir_ + "/b.h5"), latents));
  const std::string other = " --weights " + weights_ + " --data " + dir_ + "/data --index 3 --steps 3 --cfg 2 --seed 6";
  ASSERT_EQ(sample(other + " --out " + dir_ + "/c.h5").status, 0);
  EXPECT_FALSE(torch::equal(sampled_latents(dir_ + "/c.h5"), latents));

  // UniPC is the default: --solver unipc samples the same; the other
  // solvers step otherwise from the same noise; an unknown one is one line.
  ASSERT_EQ(sample(common + " --solver unipc --out " + dir_ + "/u.h5").status, 0);
  EXPECT_TRUE(torch::equal(sampled_latents(dir_ + "/u.h5"), latents));
  for (const std::string solver : {"dpm++", "euler"}) {
    ASSERT_EQ(sample(common + " --solver " + solver + " --out " + dir_ + "/s.h5").status, 0);
    EXPECT_FALSE(torch::equal(sampled_latents(dir_ + "/s.h5"), latents)) << solver;
  }
  // A model of no released shape holds its weights in fp32 unless told:
  // --weights-dtype fp32 samples the default's latents exactly; bf16
  // block Linears sample nearly the same, with half their memory.
  const Job fp32 = sample(common + " --weights-dtype fp32 --out " + dir_ + "/w32.h5");
  ASSERT_EQ(fp32.status, 0) << fp32.output;
  EXPECT_TRUE(torch::equal(sampled_latents(dir_ + "/w32.h5"), latents));
  EXPECT_EQ(wt::testing::occurrences(fp32.output, "(fp32 weights)"), 1u) << fp32.output;
  const Job bf16 = sample(common + " --weights-dtype bf16 --out " + dir_ + "/w16.h5");
  ASSERT_EQ(bf16.status, 0) << bf16.output;
  EXPECT_EQ(wt::testing::occurrences(bf16.output, "(bf16 block weights)"), 1u) << bf16.output;
  const auto half = sampled_latents(dir_ + "/w16.h5");
  EXPECT_FALSE(torch::equal(half, latents));
  // bf16 keeps 8 bits of mantissa: each weight within 2^-9 of fp32's, and
  // 3 steps of a 2-block model stay within a few percent.
  EXPECT_LT(((half - latents).norm() / latents.norm()).item<double>(), 0.05);

  const Job bad = sample(common + " --solver ddim --out " + dir_ + "/d.h5");
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_EQ(wt::testing::occurrences(bad.output, "--solver"), 1u) << bad.output;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/d.h5"));
}

// A dataset where one prompt has several videos (wandata synth --modes 2):
// --compare also prints the correlation with the nearest of the prompt's
// videos and with their mean, each the Pearson correlation over every
// element (worked out here from the sample and the dataset's latents). A
// dataset of one video a prompt prints no such line.
TEST_F(Wansample, CompareWithAPromptsVideosGivesTheNearestAndTheirMean) {
  const std::string data = dir_ + "/modes";
  const Job synth = launch(std::string(WANTRAIN_WANDATA) + " synth --out " + data +
                           " --samples 4 --modes 2 --shards 1 --frames 2 --size 8x8 --text-len 16 --text-dim 64");
  ASSERT_EQ(synth.status, 0) << synth.output;
  const Job job = sample("--weights " + weights_ + " --data " + data +
                         " --index 3 --steps 2 --cfg 1 --seed 3 --compare " + "--out " + dir_ + "/m.h5");
  ASSERT_EQ(job.status, 0) << job.output;
  const std::regex line(
      R"(its prompt's 2 videos in (\S+): the nearest \(sample (\d)\) correlation (-?[0-9.]+); their mean )"
      R"(correlation (-?[0-9.]+))");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(job.output, m, line)) << job.output;
  EXPECT_EQ(m[1].str(), data);
  const auto x = sampled_latents(dir_ + "/m.h5").to(torch::kDouble).flatten();
  const auto dataset = wt::data::Dataset::open(data);
  wt::data::SampleReader reader(dataset);
  std::vector<torch::Tensor> videos;
  for (const int64_t i : {2, 3}) {  // the second prompt's two videos
    auto latents = torch::empty({16, 2, 8, 8});
    auto text = torch::empty({16, 64});
    int32_t length = 0;
    reader.read(i, latents, text, length);
    videos.push_back(latents.to(torch::kDouble).flatten());
  }
  const auto pearson = [&](const torch::Tensor& y) {
    const auto a = x - x.mean(), b = y - y.mean();
    return ((a * b).sum() / (a.norm() * b.norm())).item<double>();
  };
  const double r2 = pearson(videos[0]), r3 = pearson(videos[1]);
  EXPECT_EQ(std::stoi(m[2].str()), r2 > r3 ? 2 : 3);
  // The line prints 3 decimals: 5e-4 of rounding, and a little for the sum's order.
  EXPECT_NEAR(std::stod(m[3].str()), std::max(r2, r3), 6e-4);
  EXPECT_NEAR(std::stod(m[4].str()), pearson((videos[0] + videos[1]) / 2), 6e-4);

  const Job single = sample("--weights " + weights_ + " --data " + dir_ +
                            "/data --index 3 --steps 2 --cfg 1 --compare " + "--out " + dir_ + "/s.h5");
  ASSERT_EQ(single.status, 0) << single.output;
  EXPECT_EQ(wt::testing::occurrences(single.output, "its prompt's"), 0u) << single.output;
}

// The released Wan2.1 T2V-1.3B's weights given with the 14B config: its
// header is checked against the config before anything is built, so the
// mismatch is one line naming the file, before the memory plan, and not a
// 57 GB model first. The file is the 1.3B's header in bf16 with its 2.8 GB
// of data left as a hole (a sparse file: no disk, nothing read).
TEST_F(Wansample, WeightsOfAnotherModelAreOneLineBeforeAnyModelIsBuilt) {
  const std::string configs = std::string(WANTRAIN_SOURCE_DIR) + "/data/configs/";
  const auto small = wt::wan::load_model_config(configs + "wan2.1-t2v-1.3b.json");
  const std::string file = dir_ + "/wan2.1-t2v-1.3b.safetensors";
  const int64_t offset = wt::testing::write_sparse_weights(small, file);
  EXPECT_GT(offset, int64_t{2'800'000'000});  // 1.42e9 parameters in bf16

  const Job job = launch(std::string(WANTRAIN_WANSAMPLE) + " --model-config " + configs +
                         "wan2.1-t2v-14b.json --weights " + file + " --data " + dir_ + "/data --out " + dir_ + "/x.h5");
  EXPECT_EQ(job.status, 2) << job.output;
  EXPECT_EQ(wt::testing::occurrences(job.output, "error: weights " + file + ": do not match the model: "), 1u)
      << job.output;
  // 14B has 40 blocks to 1.3B's 30: ten blocks' tensors are missing, and the rest are 5120 wide, not 1536.
  const auto small_shapes = wt::wan::parameter_shapes(small);
  const size_t per_block = std::count_if(small_shapes.begin(), small_shapes.end(),
                                         [](const auto& p) { return p.first.rfind("blocks.0.", 0) == 0; });
  EXPECT_NE(job.output.find(std::to_string(10 * per_block) + " missing (blocks.30."), std::string::npos) << job.output;
  EXPECT_NE(job.output.find("patch_embedding.weight: file [1536,16,1,2,2] vs model [5120,16,1,2,2]"), std::string::npos)
      << job.output;
  EXPECT_EQ(job.output.find("memory:"), std::string::npos) << job.output;  // before the plan, before any model
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/x.h5"));
}

TEST_F(Wansample, ChunkedAttentionSamplesWhatTheWholeScoreMatrixSamples) {
  // 2 x 4 x 4 = 32 tokens in chunks of 5 (no chunk divides them) and of 64
  // (one); auto takes the whole matrix here, bit for bit as
  // --attention-chunk 0; the default, fused, samples the same to rounding.
  const std::string common =
      " --weights " + weights_ + " --data " + dir_ + "/data --index 2 --steps 3 --cfg 2 --seed 5 --out " + dir_;
  const Job off = sample(common + "/whole.h5 --attention-chunk 0");
  ASSERT_EQ(off.status, 0) << off.output;
  EXPECT_EQ(wt::testing::occurrences(off.output, " (full attention); at once on the host: "), 1u) << off.output;
  const auto whole = sampled_latents(dir_ + "/whole.h5");
  const Job automatic = sample(common + "/auto.h5 --attention-chunk auto");
  ASSERT_EQ(automatic.status, 0) << automatic.output;
  EXPECT_EQ(wt::testing::occurrences(automatic.output, " (full attention (auto)); at once on the host: "), 1u)
      << automatic.output;
  EXPECT_TRUE(torch::equal(sampled_latents(dir_ + "/auto.h5"), whole));
  const Job fused = sample(common + "/fused.h5");
  ASSERT_EQ(fused.status, 0) << fused.output;
  EXPECT_EQ(wt::testing::occurrences(fused.output, " (fused attention); at once on the host: "), 1u) << fused.output;
  EXPECT_TRUE(torch::allclose(sampled_latents(dir_ + "/fused.h5"), whole, 1e-4, 1e-4));
  for (const char* chunk : {"5", "64"}) {
    const Job job = sample(common + "/chunk.h5 --attention-chunk " + chunk);
    ASSERT_EQ(job.status, 0) << job.output;
    EXPECT_EQ(wt::testing::occurrences(job.output, std::string(" (attention chunk ") + chunk + "); at once"), 1u)
        << job.output;
    EXPECT_TRUE(torch::allclose(sampled_latents(dir_ + "/chunk.h5"), whole, 1e-4, 1e-4)) << "chunk " << chunk;
  }
  const Job bad = sample(common + "/bad.h5 --attention-chunk -1");
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_EQ(wt::testing::occurrences(bad.output,
                                     "option --attention-chunk: expected fused, auto, 0 (the whole score matrix) or a "
                                     "number of queries, got '-1'"),
            1u)
      << bad.output;
}

TEST_F(Wansample, SamplesFromAFileOfTextEmbeddings) {
  const std::string shard = wt::data::Dataset::shard_paths(dir_ + "/data").front();
  const Job job = sample("--weights " + weights_ + " --text " + shard +
                         " --index 1 --frames 1 --size 4x6 --steps 2 --cfg 1 --precision bf16 --out " + dir_ + "/t.h5");
  ASSERT_EQ(job.status, 0) << job.output;
  EXPECT_EQ(wt::data::inspect_shard(dir_ + "/t.h5").shape.latents_string(), "[N,16,1,4,6] float32");
  // A file of embeddings has no latents to compare with.
  const Job compare = sample("--weights " + weights_ + " --text " + shard + " --frames 1 --size 4x6 --compare");
  EXPECT_EQ(compare.status, 2) << compare.output;
  EXPECT_EQ(wt::testing::occurrences(compare.output, "option --compare: needs --data"), 1u) << compare.output;
}

TEST_F(Wansample, WeightsOfAnotherModelAreOneLineAndStatus2) {
  const std::string student = write_weights(kStudent, dir_ + "/student.safetensors");
  const Job job = sample("--weights " + student + " --data " + dir_ + "/data --out " + dir_ + "/x.h5");
  EXPECT_EQ(job.status, 2) << job.output;
  EXPECT_EQ(wt::testing::occurrences(job.output, "error: weights " + student + ": do not match the model:"), 1u)
      << job.output;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/x.h5"));

  const Job no_weights = sample("--data " + dir_ + "/data");
  EXPECT_EQ(no_weights.status, 2) << no_weights.output;
  EXPECT_EQ(wt::testing::occurrences(no_weights.output,
                                     "error: options --weights, --checkpoint: give exactly one (the model weights"),
            1u)
      << no_weights.output;

  std::ofstream(dir_ + "/junk.safetensors") << "definitely not safetensors";
  const Job junk = sample("--weights " + dir_ + "/junk.safetensors --data " + dir_ + "/data");
  EXPECT_EQ(junk.status, 2) << junk.output;
  EXPECT_NE(junk.output.find("safetensors " + dir_ + "/junk.safetensors: header length"), std::string::npos)
      << junk.output;

  const Job index = sample("--weights " + weights_ + " --data " + dir_ + "/data --index 6");
  EXPECT_EQ(index.status, 2) << index.output;
  EXPECT_NE(index.output.find("option --index: 6 is outside the 6 samples"), std::string::npos) << index.output;
}

TEST_F(Wansample, SamplesAWantrainCheckpointAsItsExportedWeights) {
  // A two-step run with an EMA, and one without.
  const std::string train = std::string(WANTRAIN_WANTRAIN) + " --model-config " + kTiny + " --data " + dir_ +
                            "/data --steps 2 --batch-size 2 --threads 1 --tensorboard=false --output-dir " + dir_;
  ASSERT_EQ(launch(train + "/ema --ema-decay 0.9").status, 0);
  ASSERT_EQ(launch(train + "/plain").status, 0);
  const std::string common = " --data " + dir_ + "/data --index 1 --steps 2 --cfg 2 --seed 3 --out " + dir_;
  for (const std::string ema : {"", " --ema"}) {
    SCOPED_TRACE(ema);
    const Job exported = launch(std::string(WANTRAIN_WANTRAIN) + " export --checkpoint " + dir_ + "/ema/latest --out " +
                                dir_ + "/w.safetensors" + ema);
    ASSERT_EQ(exported.status, 0) << exported.output;
    ASSERT_EQ(sample("--weights " + dir_ + "/w.safetensors" + common + "/from-weights.h5").status, 0);
    // auto takes the EMA the run kept; model the plain weights. The stored config is checked against --model-config.
    const Job job = sample("--checkpoint " + dir_ + "/ema/latest --checkpoint-weights " +
                           (ema.empty() ? "model" : "auto") + common + "/from-checkpoint.h5");
    ASSERT_EQ(job.status, 0) << job.output;
    EXPECT_NE(job.output.find(ema.empty() ? "model weights of step 2" : "EMA weights of step 2"), std::string::npos)
        << job.output;
    EXPECT_TRUE(
        torch::equal(sampled_latents(dir_ + "/from-checkpoint.h5"), sampled_latents(dir_ + "/from-weights.h5")));
  }
  // Without --model-config the checkpoint's own config is used.
  const Job own = launch(std::string(WANTRAIN_WANSAMPLE) + " --threads 1 --checkpoint " + dir_ + "/ema/latest" +
                         common + "/own.h5");
  ASSERT_EQ(own.status, 0) << own.output;
  EXPECT_TRUE(torch::equal(sampled_latents(dir_ + "/own.h5"), sampled_latents(dir_ + "/from-checkpoint.h5")));
  // Asking for an EMA the run never kept is one line.
  const Job none = sample("--checkpoint " + dir_ + "/plain/latest --checkpoint-weights ema" + common + "/x.h5");
  EXPECT_EQ(none.status, 2) << none.output;
  EXPECT_EQ(wt::testing::occurrences(none.output, "error: option --checkpoint-weights: checkpoint " + dir_ +
                                                      "/plain/latest holds no EMA weights"),
            1u)
      << none.output;
}

// Without --shift, a checkpoint is sampled at the shift its run trained at;
// --shift still overrides it.
TEST_F(Wansample, ACheckpointIsSampledAtItsRunsShiftUnlessOneIsGiven) {
  const std::string run = dir_ + "/shift7";
  ASSERT_EQ(launch(std::string(WANTRAIN_WANTRAIN) + " --model-config " + kTiny + " --data " + dir_ +
                   "/data --steps 2 --batch-size 2 --threads 1 --shift 7 --output-dir " + run)
                .status,
            0);
  const std::string common = " --checkpoint " + run + "/latest --data " + dir_ + "/data --index 0 --steps 3 --seed 2";
  const Job own = sample(common + " --out " + dir_ + "/own-shift.h5");
  ASSERT_EQ(own.status, 0) << own.output;
  EXPECT_EQ(wt::testing::occurrences(own.output, "wansample: shift 7, the run's (--shift overrides it)"), 1u)
      << own.output;
  ASSERT_EQ(sample(common + " --shift 7 --out " + dir_ + "/shift-7.h5").status, 0);
  const Job five = sample(common + " --shift 5 --out " + dir_ + "/shift-5.h5");
  ASSERT_EQ(five.status, 0) << five.output;
  EXPECT_EQ(five.output.find("the run's"), std::string::npos) << five.output;
  EXPECT_TRUE(torch::equal(sampled_latents(dir_ + "/own-shift.h5"), sampled_latents(dir_ + "/shift-7.h5")));
  EXPECT_FALSE(torch::equal(sampled_latents(dir_ + "/own-shift.h5"), sampled_latents(dir_ + "/shift-5.h5")));
}

TEST_F(Wansample, DeviceCpuSamplesWhatAutoSamplesAndCudaIsRefusedWithoutIt) {
  const std::string common =
      "--weights " + weights_ + " --data " + dir_ + "/data --index 1 --steps 2 --seed 4 --out " + dir_;
  wt::distributed::load_cuda_libraries();  // as wansample's World does, so that LibTorch can see a GPU here too
  if (torch::cuda::is_available()) GTEST_SKIP() << "a CUDA device is visible: auto is not the CPU here";
  ASSERT_EQ(sample(common + "/auto.h5").status, 0);
  const Job cpu = sample(common + "/cpu.h5 --device cpu");
  ASSERT_EQ(cpu.status, 0) << cpu.output;
  // Without CUDA in LibTorch (Debian's), auto is the CPU.
  EXPECT_TRUE(torch::equal(sampled_latents(dir_ + "/cpu.h5"), sampled_latents(dir_ + "/auto.h5")));
  for (const std::string device : {"cuda", "cuda:1"}) {
    const Job job = sample(common + "/x.h5 --device " + device);
    EXPECT_EQ(job.status, 2) << job.output;
    EXPECT_EQ(wt::testing::occurrences(job.output, "error: option --device: cuda:"), 1u) << job.output;
  }
  const Job bad = sample(common + "/x.h5 --device gpu");
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_EQ(wt::testing::occurrences(bad.output, "error: option --device: 'gpu' is not one of auto|cpu|cuda|cuda:N"),
            1u)
      << bad.output;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/x.h5"));
}

// Wan2.2 A14B's two experts: the high-noise one takes the steps at or above
// the boundary. With a boundary below every step's timestep it samples alone
// (bit for bit what --weights of it samples, with its guidance); at the
// release's boundary both take part, so the sample is neither's alone.
TEST_F(Wansample, TwoExpertsSwitchAtTheBoundary) {
  torch::manual_seed(12);
  wt::wan::WanModel other(wt::wan::load_model_config(kTiny));
  {
    torch::NoGradGuard no_grad;
    other->head->head->weight.normal_(0.0, 0.05);
  }
  const std::string low = dir_ + "/low.safetensors";
  wt::wan::save_weights(*other, low, torch::kBFloat16);
  const std::string common = " --data " + dir_ + "/data --index 1 --steps 4 --seed 5 --out " + dir_;
  ASSERT_EQ(sample("--weights " + weights_ + " --cfg 4" + common + "/high-alone.h5").status, 0);
  ASSERT_EQ(sample("--weights " + low + " --cfg 3" + common + "/low-alone.h5").status, 0);
  const auto high_alone = sampled_latents(dir_ + "/high-alone.h5"), low_alone = sampled_latents(dir_ + "/low-alone.h5");
  const std::string experts = "--high-noise " + weights_ + " --low-noise " + low + " --cfg 3,4";
  const Job all_high = sample(experts + " --boundary 0.001" + common + "/all-high.h5");
  ASSERT_EQ(all_high.status, 0) << all_high.output;
  EXPECT_TRUE(torch::equal(sampled_latents(dir_ + "/all-high.h5"), high_alone));
  const Job both = sample(experts + common + "/both.h5");
  ASSERT_EQ(both.status, 0) << both.output;
  EXPECT_EQ(wt::testing::occurrences(both.output,
                                     "two experts, the high-noise one from t = 875 (boundary 0.875), cfg 3 "
                                     "low / 4 high"),
            1u)
      << both.output;
  const auto mixed = sampled_latents(dir_ + "/both.h5");
  EXPECT_GT((mixed - high_alone).abs().max().item<double>(), 1e-4);
  EXPECT_GT((mixed - low_alone).abs().max().item<double>(), 1e-4);

  // Each expert's LoRA reaches that expert only: with every step the high
  // expert's, --lora-high is sampled as --lora on it alone, and --lora-low
  // changes nothing.
  const std::string lora = dir_ + "/lora.safetensors";
  wt::io::write_safetensors(lora,
                            {{"diffusion_model.blocks.0.self_attn.q.lora_A.weight", torch::randn({2, 64}) * 0.5},
                             {"diffusion_model.blocks.0.self_attn.q.lora_B.weight", torch::randn({64, 2}) * 0.5},
                             {"diffusion_model.blocks.1.ffn.2.lora_A.weight", torch::randn({2, 128}) * 0.5},
                             {"diffusion_model.blocks.1.ffn.2.lora_B.weight", torch::randn({64, 2}) * 0.5}},
                            torch::kFloat32);
  ASSERT_EQ(sample("--weights " + weights_ + " --lora " + lora + " --cfg 4" + common + "/high-lora.h5").status, 0);
  const auto high_with_lora = sampled_latents(dir_ + "/high-lora.h5");
  EXPECT_GT((high_with_lora - high_alone).abs().max().item<double>(), 1e-4);  // the LoRA matters
  const Job lora_high = sample(experts + " --boundary 0.001 --lora-high " + lora + common + "/lora-high.h5");
  ASSERT_EQ(lora_high.status, 0) << lora_high.output;
  EXPECT_TRUE(torch::equal(sampled_latents(dir_ + "/lora-high.h5"), high_with_lora));
  ASSERT_EQ(sample(experts + " --boundary 0.001 --lora-low " + lora + common + "/lora-low.h5").status, 0);
  EXPECT_TRUE(torch::equal(sampled_latents(dir_ + "/lora-low.h5"), high_alone));

  // What does not go together: one line each, status 2.
  for (const auto& [args, line] : std::vector<std::pair<std::string, std::string>>{
           {"--high-noise " + weights_, "options --high-noise, --low-noise: give both experts"},
           {experts + " --weights " + weights_, "options --high-noise, --low-noise: they replace --weights"},
           {"--weights " + weights_ + " --cfg 3,4", "option --cfg: '3,4': give one scale (LOW,HIGH needs two experts)"},
           {experts + " --lora x.safetensors", "option --lora: with two experts, give each its own with --lora-high"},
           {"--weights " + weights_ + " --boundary 0.9",
            "options --lora-high, --lora-low, --offload-experts, "
            "--boundary: need two experts"},
           {experts + " --boundary 1.5", "option --boundary: must be in (0, 1]"}}) {
    const Job bad = sample(args + common + "/bad.h5");
    EXPECT_EQ(bad.status, 2) << args << "\n" << bad.output;
    EXPECT_EQ(wt::testing::occurrences(bad.output, line), 1u) << args << "\n" << bad.output;
  }
}

// Damaged model folders as a download leaves them (issue 80): an A14B
// pipeline without its low-noise expert, a boundary_ratio out of range, and
// a shards' index naming a file two folders up. Each is one line and
// status 2, and nothing is written; the intact folder samples.
TEST_F(Wansample, ADamagedModelFolderIsOneLineAndWritesNothing) {
  auto config = wt::wan::load_model_config(kTiny);
  config.text_len = 512;  // a diffusers config's (WanPipeline pads prompts to 512 tokens)
  torch::manual_seed(11);
  wt::wan::WanModel model(config);
  auto pipeline = [&](const std::string& root, const std::vector<std::string>& saved, const nlohmann::json& index,
                      double shard_bytes = 1e9) {
    for (const auto& component : saved)
      wt::wan::save_diffusers_folder(*model, config, root, torch::kFloat32, shard_bytes, component);
    std::ofstream(root + "/model_index.json") << index.dump(2);
    return root;
  };
  const nlohmann::json transformer = {"diffusers", "WanTransformer3DModel"};
  const nlohmann::json a14b = {{"_class_name", "WanPipeline"},
                               {"boundary_ratio", 0.875},
                               {"transformer", transformer},
                               {"transformer_2", transformer}};
  auto run = [&](const std::string& root) {
    return launch(std::string(WANTRAIN_WANSAMPLE) + " --threads 1 --steps 2 --weights " + root + " --data " + dir_ +
                  "/data --out " + dir_ + "/out.h5");
  };
  const std::string intact = pipeline(dir_ + "/intact", {"transformer"},
                                      {{"_class_name", "WanPipeline"}, {"transformer", transformer}}, 20000);
  const Job good = run(intact);
  ASSERT_EQ(good.status, 0) << good.output;
  std::filesystem::remove(dir_ + "/out.h5");

  const std::string lost = pipeline(dir_ + "/lost-expert", {"transformer"}, a14b);
  auto out_of_range = a14b;
  out_of_range["boundary_ratio"] = 7;
  const std::string seven = pipeline(dir_ + "/boundary-7", {"transformer", "transformer_2"}, out_of_range);
  // The intact folder's index, its first tensor sent to a copy of its shard outside.
  const std::string index_file = intact + "/transformer/diffusion_pytorch_model.safetensors.index.json";
  auto index = nlohmann::json::parse(wt::testing::read_text(index_file));
  auto first = index["weight_map"].begin();
  std::filesystem::copy_file(intact + "/transformer/" + first.value().get<std::string>(),
                             dir_ + "/outside.safetensors");
  first.value() = "../../outside.safetensors";
  std::ofstream(index_file) << index.dump(2);

  for (const auto& [root, line] : std::vector<std::pair<std::string, std::string>>{
           {lost, lost + ": model_index.json names the component transformer_2 (WanTransformer3DModel), but " + lost +
                      "/transformer_2/ is missing"},
           {seven, seven + "/model_index.json: key \"boundary_ratio\": 7 is not a number in (0, 1)"},
           {intact, "weights index " + index_file + ": tensor '" + first.key() +
                        "' names a file outside the index's folder: ../../outside.safetensors leads out of " + intact +
                        "/transformer"}}) {
    const Job bad = run(root);
    EXPECT_EQ(bad.status, 2) << bad.output;
    EXPECT_EQ(wt::testing::occurrences(bad.output, "error: " + line), 1u) << line << "\n" << bad.output;
    EXPECT_FALSE(std::filesystem::exists(dir_ + "/out.h5")) << root;
  }
}

// A ti2v model continues a dataset sample's own first latent frame
// (--first-frame): the sample's frame 0 is exactly the data's.
TEST_F(Wansample, ATi2vModelHoldsTheFirstFrameItStartsFrom) {
  const std::string config = std::string(WANTRAIN_SOURCE_DIR) + "/data/configs/wan-tiny-ti2v.json";
  const std::string ti2v = write_weights(config, dir_ + "/ti2v.safetensors");
  const Job job = launch(std::string(WANTRAIN_WANSAMPLE) + " --model-config " + config + " --threads 1 --weights " +
                         ti2v + " --data " + dir_ + "/data --index 4 --steps 3 --first-frame --out " + dir_ + "/f.h5");
  ASSERT_EQ(job.status, 0) << job.output;
  const auto dataset = wt::data::Dataset::open(dir_ + "/data");
  const auto& s = dataset.shape();
  auto latents = torch::empty({s.channels, s.frames, s.height, s.width});
  auto text = torch::empty({s.text_len, s.text_dim});
  int32_t length = 0;
  wt::data::SampleReader(dataset).read(4, latents, text, length);
  const auto sampled = sampled_latents(dir_ + "/f.h5");
  EXPECT_TRUE(torch::equal(sampled.slice(1, 0, 1), latents.to(torch::kFloat32).slice(1, 0, 1)));
  EXPECT_FALSE(torch::equal(sampled.slice(1, 1), latents.to(torch::kFloat32).slice(1, 1)));
  const Job t2v = sample("--weights " + weights_ + " --data " + dir_ + "/data --first-frame --out " + dir_ + "/x.h5");
  EXPECT_EQ(t2v.status, 2) << t2v.output;
  EXPECT_EQ(
      wt::testing::occurrences(t2v.output, "option --first-frame: a ti2v model's, with --data (this model is t2v)"), 1u)
      << t2v.output;
}

}  // namespace wansample_test
