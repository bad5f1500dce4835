// wandata encode, decode and wansample --prompt end to end, as a user runs
// them: media made by the ffmpeg CLI with sidecar captions, a .csv and a
// .jsonl listing the same, small models drawn here (a Wan2.1-layout VAE,
// a umT5 encoder and a tokenizer spm_train trains), then the dataset read
// back, compared across rank counts and across a kill, and sampled back
// into a video.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>
#include <tuple>

#include <nlohmann/json.hpp>

#include "../common/build_paths.hpp"
#include "../common/launch.hpp"
#include "../common/sample_shard.hpp"
#include "../common/train_runs.hpp"
#include "../common/sparse_weights.hpp"
#include "wantrain/data/dataset.hpp"
#include "wantrain/io/safetensors.hpp"
#include "wantrain/media/media_reader.hpp"
#include "wantrain/wan/encoders/clip_vision.hpp"
#include "wantrain/wan/encoders/t5_encoder.hpp"
#include "wantrain/wan/sample/image_condition.hpp"
#include "wantrain/wan/sample/vace_condition.hpp"
#include "wantrain/wan/sample/fun_control_condition.hpp"
#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/model/weights.hpp"
#include "wantrain/wan/plan/memory_plan.hpp"
#include "wantrain/wan/vae/video_vae.hpp"
#include "wantrain/wan/vae/wan_vae.hpp"

namespace {

namespace fs = std::filesystem;
using wt::testing::launch;

const std::string kTiny = std::string(WANTRAIN_SOURCE_DIR) + "/data/configs/wan-tiny.json";
constexpr const char* kVaeConfig = R"({"dim": 8, "dim_mult": [1, 2, 2, 2]})";
// wan-tiny's text_dim (64); a vocabulary the tokenizer below fits in.
constexpr const char* kT5Config = R"({"vocab": 300, "dim": 64, "dim_attn": 64, "dim_ffn": 96, "num_heads": 4,
                                      "num_layers": 2, "num_buckets": 32})";

void run_ok(const std::string& command) {
  const auto job = launch(command);
  ASSERT_EQ(job.status, 0) << command << "\n" << job.output;
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

void write_module(torch::nn::Module& module, const std::string& path) {
  wt::io::NamedTensors tensors;
  for (const auto& p : module.named_parameters()) tensors.emplace_back(p.key(), p.value());
  wt::io::write_safetensors(path, tensors, torch::kFloat32);
}

// Models, tokenizer and media, made once for the suite.
struct Setup {
  std::string dir, vae, vae_config, t5, t5_config, tokenizer, dit, clips, error;
};

const Setup& setup() {
  static const Setup s = [] {
    Setup s;
    s.dir = wt::testing::fresh("encode-setup");
    fs::create_directories(s.dir + "/clips");
    s.clips = s.dir + "/clips";
    s.vae_config = s.dir + "/vae.json";
    s.t5_config = s.dir + "/t5.json";
    write_text(s.vae_config, kVaeConfig);
    write_text(s.t5_config, kT5Config);
    torch::manual_seed(3);
    wt::wan::WanVae vae(wt::wan::load_vae_config(s.vae_config));
    s.vae = s.dir + "/vae.safetensors";
    write_module(*vae, s.vae);
    wt::wan::T5Encoder t5(wt::wan::load_t5_config(s.t5_config));
    s.t5 = s.dir + "/t5.safetensors";
    write_module(*t5, s.t5);
    wt::wan::WanModel dit(wt::wan::load_model_config(kTiny));
    {
      torch::NoGradGuard no_grad;
      dit->head->head->weight.normal_(0.0, 0.05);  // a sample that depends on the model
    }
    s.dit = s.dir + "/dit.safetensors";
    wt::wan::save_weights(*dit, s.dit, torch::kFloat32);
    // A tokenizer with umT5's special ids (pad 0, EOS 1, unk 2, no BOS).
    std::string corpus;
    for (int i = 0; i < 40; ++i)
      corpus +=
          "a red ball rolls across the green grass under a blue sky while a small dog runs after it\n"
          "the camera pans slowly over a quiet city street at night with lights reflecting on wet stones\n";
    write_text(s.dir + "/corpus.txt", corpus);
    const auto spm = launch(
        "spm_train --input=" + s.dir + "/corpus.txt --model_prefix=" + s.dir +
        "/spiece --vocab_size=120 --hard_vocab_limit=false --model_type=unigram --character_coverage=1.0 --pad_id=0 "
        "--eos_id=1 --unk_id=2 --bos_id=-1 --num_threads=1 --minloglevel=2");
    if (spm.status != 0) s.error = "spm_train: " + spm.output;
    s.tokenizer = s.dir;  // the folder holding spiece.model
    // Clips of 9, 13 and 5 frames, a still, and bad items.
    const std::string ff = "ffmpeg -hide_banner -loglevel error -y -f lavfi -i ";
    for (const auto& [name, source] : {std::pair{"a.mp4", "testsrc2=size=80x48:rate=16 -frames:v 9 -pix_fmt yuv420p"},
                                       {"b.mkv", "mandelbrot=size=40x40:rate=8 -frames:v 13 -c:v ffv1"},
                                       {"c.webm", "testsrc=size=64x64:rate=16 -frames:v 5"},
                                       {"d.png", "testsrc2=size=48x32:rate=1 -frames:v 1"}}) {
      const auto job = launch(ff + source + " " + s.clips + "/" + name);
      if (job.status != 0) s.error += std::string(name) + ": " + job.output;
    }
    write_text(s.clips + "/a.txt", "a red ball rolls across the green grass");
    write_text(s.clips + "/b.txt", "the camera pans slowly over a quiet city street at night");
    write_text(s.clips + "/c.txt", "a small dog runs");
    write_text(s.clips + "/d.txt", "a blue sky");
    write_text(s.clips + "/e.mp4", "not a video at all");
    write_text(s.clips + "/e.txt", "a broken file");
    fs::copy_file(s.clips + "/a.mp4", s.clips + "/f.mp4");  // no caption
    fs::copy_file(s.clips + "/a.mp4", s.clips + "/g.mp4");
    write_text(s.clips + "/g.txt", "caf\xe9 latin-1, not UTF-8");
    return s;
  }();
  return s;
}

// The models' options, and a picture size of its own (--size or --buckets) in `extra`.
std::string models_args(const Setup& s, const std::string& input, const std::string& out, const std::string& extra) {
  return "encode --input " + input + " --out " + out + " --vae " + s.vae + " --vae-config " + s.vae_config + " --t5 " +
         s.t5 + " --t5-config " + s.t5_config + " --t5-dtype fp32 --tokenizer " + s.tokenizer + " --text-len 16 " +
         extra;
}

std::string encode_args(const Setup& s, const std::string& input, const std::string& out, const std::string& extra) {
  return models_args(s, input, out, "--size 32x32 " + extra);
}

std::string wandata(const std::string& args) { return std::string(WANTRAIN_WANDATA) + " " + args; }

// Every sample's latents, text embedding and prompt, in dataset order.
struct Samples {
  std::vector<at::Tensor> latents, text;
  std::vector<int32_t> lengths;
  std::vector<std::string> prompts;
};

Samples read_dataset(const wt::data::Dataset& dataset) {
  wt::data::SampleReader reader(dataset);
  Samples out;
  for (int64_t i = 0; i < dataset.size(); ++i) {
    const auto& s = dataset.shape_of(i);
    auto latents = torch::empty({s.channels, s.frames, s.height, s.width}, wt::data::scalar_type(s.latents));
    auto text = torch::empty({s.text_len, s.text_dim}, wt::data::scalar_type(s.text));
    int32_t len = 0;
    reader.read(i, latents, text, len);
    out.latents.push_back(latents);
    out.text.push_back(text);
    out.lengths.push_back(len);
    out.prompts.push_back(reader.prompt(i));
  }
  return out;
}

Samples read_all(const std::string& dir) { return read_dataset(wt::data::Dataset::open(dir)); }

// A one-sample shard as wansample writes it.
Samples read_shard(const std::string& path) {
  return read_dataset(wt::data::Dataset::of(fs::path(path).parent_path().string(), {wt::data::inspect_shard(path)}));
}

void expect_identical(const Samples& a, const Samples& b) {
  ASSERT_EQ(a.latents.size(), b.latents.size());
  for (size_t i = 0; i < a.latents.size(); ++i) {
    EXPECT_TRUE(torch::equal(a.latents[i], b.latents[i])) << "sample " << i;
    EXPECT_TRUE(torch::equal(a.text[i], b.text[i])) << "sample " << i;
    EXPECT_EQ(a.lengths[i], b.lengths[i]);
    EXPECT_EQ(a.prompts[i], b.prompts[i]);
  }
}

}  // namespace

// The folder: the good clips become samples, each bad item one line, and
// the job goes on; --strict fails on the first.
TEST(Encode, AFolderOfClipsBecomesADatasetAndEachBadItemIsOneLine) {
  const auto& s = setup();
  ASSERT_TRUE(s.error.empty()) << s.error;
  const std::string out = wt::testing::fresh("encode-folder");
  const auto job = launch(wandata(encode_args(s, s.clips, out, "--frames 5 --items-per-shard 2")));
  ASSERT_EQ(job.status, 0) << job.output;
  // a (9 frames), b (13), c (5) give one head clip each, 2 items a shard;
  // d (a still) has 1 frame.
  EXPECT_NE(job.output.find("7 items, 3 samples in 2 shards (0 kept from before), 4 skipped"), std::string::npos)
      << job.output;
  EXPECT_NE(job.output.find("\n  5 frames at 32x32 (latents 16x2x4x4): 3 samples in 2 shards\n"), std::string::npos)
      << job.output;
  for (const std::string& line :
       std::vector<std::string>{"clips/d.png: too few frames: 1 at its own rate, --frames 5 needs 5",
                                "clips/e.mp4: not a video or image FFmpeg reads", "clips/f.mp4: no caption",
                                "clips/g.mp4: its caption is not UTF-8"})
    EXPECT_NE(job.output.find(line), std::string::npos) << line << "\n" << job.output;
  const auto samples = read_all(out);
  ASSERT_EQ(samples.latents.size(), 3u);
  EXPECT_EQ(samples.latents[0].sizes(), (at::IntArrayRef{16, 2, 4, 4}));  // 5 frames -> 2, 32 / 8
  EXPECT_EQ(samples.prompts[1], "the camera pans slowly over a quiet city street at night");
  EXPECT_EQ(samples.text[0].scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::all(samples.text[0].slice(0, samples.lengths[0]) == 0).item<bool>());  // zero past the tokens
  EXPECT_GT(samples.lengths[0], 1);

  const auto strict =
      launch(wandata(encode_args(s, s.clips, wt::testing::fresh("encode-strict"), "--frames 5 --strict")));
  EXPECT_EQ(strict.status, 2) << strict.output;
  EXPECT_NE(strict.output.find("clips/d.png: too few frames"), std::string::npos) << strict.output;
  EXPECT_NE(strict.output.find("(--strict)"), std::string::npos) << strict.output;

  // Over a limit: b.mkv's 13 frames against --max-frames 10.
  const auto limited =
      launch(wandata(encode_args(s, s.clips, wt::testing::fresh("encode-limited"), "--frames 5 --max-frames 10")));
  EXPECT_NE(limited.output.find("clips/b.mkv: more than 10 frames, over the limit (--max-frames)"), std::string::npos)
      << limited.output;
  EXPECT_NE(limited.output.find("7 items, 2 samples"), std::string::npos) << limited.output;

  // A still with --frames 1, and every clip with slide.
  const auto stills = launch(wandata(encode_args(s, s.clips, wt::testing::fresh("encode-stills"), "--frames 1")));
  EXPECT_NE(stills.output.find("7 items, 4 samples"), std::string::npos) << stills.output;
  const auto slide = launch(wandata(encode_args(s, s.clips, wt::testing::fresh("encode-slide"),
                                                "--frames 5 --frame-extraction slide --frame-stride 4")));
  // a: starts 0, 4; b: 0, 4, 8; c: 0.
  EXPECT_NE(slide.output.find("7 items, 6 samples"), std::string::npos) << slide.output;
}

// DiffSynth-Studio's metadata.csv and musubi-tuner's .jsonl listing the same
// items give the same samples as the folder; 2 ranks give what 1 gives.
TEST(Encode, ListsAndRankCountsGiveTheSameSamplesBitForBit) {
  const auto& s = setup();
  ASSERT_TRUE(s.error.empty()) << s.error;
  const std::string one = wt::testing::fresh("encode-one"), two = wt::testing::fresh("encode-two");
  run_ok(wandata(encode_args(s, s.clips, one, "--frames 5 --items-per-shard 2")));
  run_ok(wt::testing::mpi_command(2, WANTRAIN_WANDATA, encode_args(s, s.clips, two, "--frames 5 --items-per-shard 2")));
  expect_identical(read_all(one), read_all(two));

  write_text(s.dir + "/metadata.csv",
             "video,prompt\n"
             "clips/a.mp4,a red ball rolls across the green grass\n"
             "clips/b.mkv,\"the camera pans slowly over a quiet city street at night\"\n"
             "clips/c.webm,a small dog runs\n");
  write_text(s.dir + "/list.jsonl",
             "{\"video_path\": \"clips/a.mp4\", \"caption\": \"a red ball rolls across the green grass\"}\n"
             "{\"video_path\": \"" +
                 s.clips +
                 "/b.mkv\", \"caption\": \"the camera pans slowly over a quiet city street at night\"}\n"
                 "{\"video_path\": \"clips/c.webm\", \"caption\": \"a small dog runs\"}\n");
  const std::string csv = wt::testing::fresh("encode-csv"), jsonl = wt::testing::fresh("encode-jsonl");
  run_ok(wandata(encode_args(s, s.dir + "/metadata.csv", csv, "--frames 5")));
  run_ok(wandata(encode_args(s, s.dir + "/list.jsonl", jsonl, "--frames 5")));
  expect_identical(read_all(csv), read_all(one));
  expect_identical(read_all(jsonl), read_all(one));
}

// A job killed mid-run and started again keeps its finished shards and ends
// with the dataset an uninterrupted run makes; other settings are refused.
TEST(Encode, AKilledEncodeResumesToTheSameDataset) {
  const auto& s = setup();
  ASSERT_TRUE(s.error.empty()) << s.error;
  const std::string whole = wt::testing::fresh("encode-whole"), killed = wt::testing::fresh("encode-killed");
  run_ok(wandata(encode_args(s, s.clips, whole, "--frames 5 --items-per-shard 1")));
  const std::string command = "WANTRAIN_TEST_DELAY=encode_item:1 exec " +
                              wandata(encode_args(s, s.clips, killed, "--frames 5 --items-per-shard 1"));
  std::thread killer([&] {
    // Kill it as soon as the first shard is complete.
    for (int i = 0; i < 600 && !fs::exists(killed + "/shard-00000.json"); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    launch("pkill -KILL -f 'out " + killed + " '");
  });
  const auto first = launch(command);
  killer.join();
  EXPECT_EQ(first.status, 128 + SIGKILL) << first.output;
  ASSERT_TRUE(fs::exists(killed + "/shard-00000.json"));
  ASSERT_FALSE(fs::exists(killed + "/shard-00002.json"));  // a, b and c: a shard each
  const auto again = launch(wandata(encode_args(s, s.clips, killed, "--frames 5 --items-per-shard 1")));
  ASSERT_EQ(again.status, 0) << again.output;
  EXPECT_NE(again.output.find("kept from before"), std::string::npos) << again.output;
  EXPECT_EQ(again.output.find("(0 kept from before)"), std::string::npos) << again.output;
  expect_identical(read_all(killed), read_all(whole));
  for (const auto& entry : fs::directory_iterator(killed))
    EXPECT_EQ(entry.path().string().find(".partial"), std::string::npos) << entry.path();

  // A shard lost after its record was written (deleted, or left out of a copy): encoded again, not counted.
  fs::remove(killed + "/shard-00001.h5");
  const auto healed = launch(wandata(encode_args(s, s.clips, killed, "--frames 5 --items-per-shard 1")));
  ASSERT_EQ(healed.status, 0) << healed.output;
  EXPECT_EQ(wt::testing::occurrences(healed.output, killed + "/shard-00001.h5: missing, though its record " + killed +
                                                        "/shard-00001.json is there: encoding it again"),
            1u)
      << healed.output;
  expect_identical(read_all(killed), read_all(whole));

  const auto other = launch(wandata(encode_args(s, s.clips, killed, "--frames 9 --items-per-shard 1")));
  EXPECT_EQ(other.status, 2) << other.output;
  EXPECT_NE(other.output.find(killed + ": encoded with frames = 5 before, 9 now"), std::string::npos) << other.output;
}

namespace {

// A folder of mixed media for buckets: stills of 2:1 (two) and 1:2, videos
// of 5, 9 and 13 frames at 16 fps near 2:1, and one too short for 5 frames.
std::string bucket_clips() {
  static const std::string dir = [] {
    const auto& s = setup();
    const std::string d = s.dir + "/mixed";
    fs::create_directories(d);
    const std::string ff = "ffmpeg -hide_banner -loglevel error -y -f lavfi -i ";
    for (const auto& [name, source] : {std::pair{"p1.png", "testsrc2=size=96x48:rate=1 -frames:v 1"},
                                       {"p2.jpg", "testsrc=size=64x40:rate=1 -frames:v 1"},
                                       {"q.png", "testsrc2=size=40x80:rate=1 -frames:v 1"},
                                       {"short.mp4", "testsrc2=size=80x40:rate=16 -frames:v 3 -pix_fmt yuv420p"},
                                       {"v13.mkv", "mandelbrot=size=80x40:rate=16 -frames:v 13 -c:v ffv1"},
                                       {"v5.mp4", "testsrc=size=80x48:rate=16 -frames:v 5 -pix_fmt yuv420p"},
                                       {"v9.mp4", "testsrc2=size=80x40:rate=16 -frames:v 9 -pix_fmt yuv420p"}}) {
      const auto job = launch(ff + source + " " + d + "/" + name);
      if (job.status != 0) return "ffmpeg " + std::string(name) + ": " + job.output;
      write_text(d + "/" + fs::path(name).stem().string() + ".txt",
                 std::string("a red ball rolls across the green grass ") + name);
    }
    return d;
  }();
  return dir;
}

// Each shard's samples, shard by shard (one shape each).
std::vector<Samples> read_shards(const std::string& dir, int64_t shards) {
  std::vector<Samples> out;
  for (int64_t k = 0; k < shards; ++k) out.push_back(read_shard(wt::data::shard_path(dir, k)));
  return out;
}

}  // namespace

// --buckets auto within 64x32 pixels is {64x32, 32x64}; --frames 5,9 makes
// each video's longest clip it fills, each still a 1-frame sample: four
// buckets, ordered by frames, height, width, each bucket's items in
// listing order (p1, p2, q, short, v13, v5, v9), one item a shard.
TEST(Encode, BucketsGiveShardsOfOneShapeTheSameOnAnyRankCountAndAcrossAKill) {
  const auto& s = setup();
  ASSERT_TRUE(s.error.empty()) << s.error;
  const std::string clips = bucket_clips();
  ASSERT_TRUE(fs::is_directory(clips)) << clips;
  const std::string options = "--buckets auto --bucket-area 64x32 --frames 5,9 --fps 16 --items-per-shard 1";
  const std::string one = wt::testing::fresh("encode-buckets-one"), two = wt::testing::fresh("encode-buckets-two");
  const auto job = launch(wandata(models_args(s, clips, one, options)));
  ASSERT_EQ(job.status, 0) << job.output;
  EXPECT_NE(job.output.find("7 items, 6 samples in 6 shards (0 kept from before), 1 skipped"), std::string::npos)
      << job.output;
  // The latents: 16 channels, 1 + (F - 1) / 4 frames, H / 8, W / 8.
  for (const char* line :
       {"4 buckets:\n  1 frame at 64x32 (latents 16x1x4x8): 2 samples in 2 shards\n"
        "  1 frame at 32x64 (latents 16x1x8x4): 1 sample in 1 shard\n"
        "  5 frames at 64x32 (latents 16x2x4x8): 1 sample in 1 shard\n"
        "  9 frames at 64x32 (latents 16x3x4x8): 2 samples in 2 shards\n",
        "\nskipped:\n", "mixed/short.mp4: too few frames: 3 at 16 fps, --frames 5,9 needs at least 5"})
    EXPECT_NE(job.output.find(line), std::string::npos) << line << "\n" << job.output;
  // Shard by shard: p1, p2 | q | v5 | v13, v9.
  const std::vector<std::tuple<int64_t, int64_t, int64_t, std::string>> expected{
      {1, 4, 8, "p1.png"}, {1, 4, 8, "p2.jpg"},  {1, 8, 4, "q.png"},
      {2, 4, 8, "v5.mp4"}, {3, 4, 8, "v13.mkv"}, {3, 4, 8, "v9.mp4"}};
  for (size_t k = 0; k < expected.size(); ++k) {
    const auto info = wt::data::inspect_shard(wt::data::shard_path(one, int64_t(k)));
    const auto& [frames, height, width, name] = expected[k];
    EXPECT_EQ(info.samples, 1) << k;
    EXPECT_EQ(std::tuple(info.shape.frames, info.shape.height, info.shape.width), std::tuple(frames, height, width))
        << "shard " << k;
    EXPECT_EQ(read_shard(info.path).prompts[0], "a red ball rolls across the green grass " + name) << k;
  }

  // A dataset of four buckets that wantrain reads and wandata verifies.
  const auto dataset = wt::data::Dataset::open(one);
  EXPECT_EQ(dataset.size(), 6);
  EXPECT_EQ(dataset.buckets().size(), 4u);
  run_ok(wandata("verify " + one));
  // ... and wantrain trains on, every step one bucket's sample.
  const auto trained =
      launch(std::string(WANTRAIN_WANTRAIN) + " --model-config " + kTiny + " --data " + one + " --output-dir " +
             wt::testing::fresh("encode-buckets-train") + " --threads 1 --batch-size 1 --steps 8 --log-every 1");
  ASSERT_EQ(trained.status, 0) << trained.output;
  EXPECT_NE(trained.output.find("6 steps per epoch; 6 samples per epoch (all)"), std::string::npos) << trained.output;
  EXPECT_NE(trained.output.find("trained 8 steps"), std::string::npos) << trained.output;

  // Two ranks: the same samples in the same shards.
  run_ok(wt::testing::mpi_command(2, WANTRAIN_WANDATA, models_args(s, clips, two, options)));
  const auto whole = read_shards(one, 6);
  const auto both = read_shards(two, 6);
  for (size_t k = 0; k < whole.size(); ++k) expect_identical(whole[k], both[k]);
  expect_identical(read_all(one), read_all(two));

  // Killed after its first shard, then run again: the same dataset.
  const std::string killed = wt::testing::fresh("encode-buckets-killed");
  std::thread killer([&] {
    for (int i = 0; i < 600 && !fs::exists(killed + "/shard-00000.json"); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    launch("pkill -KILL -f 'out " + killed + " '");
  });
  const auto first =
      launch("WANTRAIN_TEST_DELAY=encode_item:1 exec " + wandata(models_args(s, clips, killed, options)));
  killer.join();
  EXPECT_EQ(first.status, 128 + SIGKILL) << first.output;
  ASSERT_TRUE(fs::exists(killed + "/items.json"));
  ASSERT_FALSE(fs::exists(killed + "/shard-00005.json"));
  const auto again = launch(wandata(models_args(s, clips, killed, options)));
  ASSERT_EQ(again.status, 0) << again.output;
  EXPECT_EQ(again.output.find("(0 kept from before)"), std::string::npos) << again.output;
  const auto resumed = read_shards(killed, 6);
  for (size_t k = 0; k < whole.size(); ++k) expect_identical(whole[k], resumed[k]);
  EXPECT_FALSE(fs::exists(wt::data::shard_path(killed, 6)));

  // Other buckets on the same folder are another job.
  const auto other =
      launch(wandata(models_args(s, clips, killed, "--buckets 64x32 --frames 5,9 --fps 16 --items-per-shard 1")));
  EXPECT_EQ(other.status, 2) << other.output;
  EXPECT_NE(other.output.find(killed + ": encoded with sizes = 64x32,32x64 before, 64x32 now"), std::string::npos)
      << other.output;
}

// Every length a video fills (--frame-buckets all), and no item enlarged
// (--bucket-no-upscale): an item smaller than its nearest bucket (128x64 or
// 64x128, 8192 pixels) gets one of its own size, sides rounded down to 16:
// p1 96x48, p2 (64x40) 64x32, q (40x80) 32x80, short, v13 and v9 (80x40)
// 80x32, v5 80x48. v13 and v9 give clips of 5 and 9 frames, v5 of 5.
TEST(Encode, EveryFrameLengthAndNoUpscaleMakeTheirBuckets) {
  const auto& s = setup();
  ASSERT_TRUE(s.error.empty()) << s.error;
  const std::string clips = bucket_clips();
  ASSERT_TRUE(fs::is_directory(clips)) << clips;
  const std::string out = wt::testing::fresh("encode-buckets-all");
  const auto job = launch(wandata(models_args(
      s, clips, out, "--buckets 128x64,64x128 --bucket-no-upscale --frames 5,9 --frame-buckets all --fps 16")));
  ASSERT_EQ(job.status, 0) << job.output;
  for (const char* line : {"7 items, 8 samples in 6 shards (0 kept from before), 1 skipped",
                           "6 buckets:\n  1 frame at 64x32 (latents 16x1x4x8): 1 sample in 1 shard\n"
                           "  1 frame at 96x48 (latents 16x1x6x12): 1 sample in 1 shard\n"
                           "  1 frame at 32x80 (latents 16x1x10x4): 1 sample in 1 shard\n"
                           "  5 frames at 80x32 (latents 16x2x4x10): 2 samples in 1 shard\n"
                           "  5 frames at 80x48 (latents 16x2x6x10): 1 sample in 1 shard\n"
                           "  9 frames at 80x32 (latents 16x3x4x10): 2 samples in 1 shard\n"})
    EXPECT_NE(job.output.find(line), std::string::npos) << line << "\n" << job.output;
}

// Bad bucket options are one line naming the option, before any model loads.
TEST(Encode, BadBucketOptionsAreOneLineNamingTheOption) {
  const auto& s = setup();
  ASSERT_TRUE(s.error.empty()) << s.error;
  const std::string out = wt::testing::fresh("encode-bad-buckets");
  for (const auto& [options, line] : std::vector<std::pair<std::string, std::string>>{
           {"--buckets 64x32,40x32", "option --buckets: 40x32 is not multiples of --bucket-step 16"},
           {"--buckets 64x32,64x32", "option --buckets: 64x32 is listed twice"},
           {"--buckets auto --bucket-area 8x8", "option --bucket-area: 8x8 pixels hold no bucket of 16x16 or more"},
           {"--buckets auto --bucket-step 8", "option --bucket-step: 8 is not a multiple of 16"},
           {"--buckets auto --bucket-area 8192x8193",
            "option --bucket-area: 8192x8193 is more pixels than any picture"},
           {"--size 32x32 --buckets auto", "option --size: not with --buckets"},
           {"--size 32x32 --bucket-no-upscale", "option --bucket-no-upscale: only with --buckets"},
           {"--buckets 64x32 --bucket-area 64x32", "option --bucket-area: only with --buckets auto"},
           {"--size 40x32", "option --size: 40x32: width and height must be multiples of 16"},
           {"--size 32x32 --frames 5,8", "option --frames: 8: Wan needs 4k + 1 frames"},
           {"--size 32x32 --frames 5,x", "option --frames: '5,x' is not a clip length"},
           {"--size 32x32 --frames 9,5,9", "option --frames: 9 is listed twice"}}) {
    const auto job = launch(wandata(models_args(s, s.clips, out, options)));
    EXPECT_EQ(job.status, 2) << options << "\n" << job.output;
    EXPECT_NE(job.output.find(line), std::string::npos) << options << "\n" << job.output;
    EXPECT_FALSE(fs::exists(out)) << options;
  }
}

// The way out: a dataset sample decoded to a video; a prompt sampled with
// the DiT and decoded to an mp4 and PNG frames; --noise starts from a file.
TEST(Encode, DecodeAndPromptSamplingWriteVideos) {
  const auto& s = setup();
  ASSERT_TRUE(s.error.empty()) << s.error;
  const std::string data = wt::testing::fresh("encode-decode");
  run_ok(wandata(encode_args(s, s.clips, data, "--frames 5")));
  // Encoded in tiles (--vae-tiling): the same samples, each latent from its tiles.
  const std::string tiled_data = wt::testing::fresh("encode-tiled");
  const auto tiled_encode = launch(wandata(encode_args(s, s.clips, tiled_data, "--frames 5 --vae-tiling 16x16")));
  ASSERT_EQ(tiled_encode.status, 0) << tiled_encode.output;
  EXPECT_EQ(wt::testing::occurrences(tiled_encode.output, ", tiles of 16x16 pixels, stride 8x8"), 1u)
      << tiled_encode.output;
  const auto whole_latents = read_all(data), tiled_latents = read_all(tiled_data);
  ASSERT_EQ(whole_latents.latents.size(), tiled_latents.latents.size());
  EXPECT_EQ(whole_latents.latents[0].sizes(), tiled_latents.latents[0].sizes());
  EXPECT_FALSE(torch::equal(whole_latents.latents[0], tiled_latents.latents[0]));
  const std::string video = data + "/sample0.mp4";
  run_ok(wandata("decode --data " + data + " --index 0 --vae " + s.vae + " --vae-config " + s.vae_config + " --video " +
                 video + " --frames-dir " + data + "/frames"));
  const auto info = wt::media::probe_media(video);
  EXPECT_EQ(info.frames(), 5);
  EXPECT_EQ(info.width, 32);
  EXPECT_EQ(info.codec, "h264");
  EXPECT_TRUE(fs::exists(data + "/frames/frame-00004.png"));

  const std::string out = wt::testing::fresh("encode-prompt");
  fs::create_directories(out);
  const std::string sample = std::string(WANTRAIN_WANSAMPLE) + " --weights " + s.dit + " --model-config " + kTiny +
                             " --prompt 'a red ball rolls' --negative-prompt 'a blue sky' --t5 " + s.t5 +
                             " --t5-config " + s.t5_config + " --t5-dtype fp32 --tokenizer " + s.tokenizer +
                             " --size 48x32 --frames 9 --steps 3 --vae " + s.vae + " --vae-config " + s.vae_config;
  const auto job = launch(sample + " --out " + out + "/a.h5 --video " + out + "/a.mp4 --seed 7");
  ASSERT_EQ(job.status, 0) << job.output;
  EXPECT_EQ(wt::testing::occurrences(job.output, "wansample: unconditional branch: --negative-prompt's embedding"), 1u)
      << job.output;
  const auto made = wt::media::probe_media(out + "/a.mp4");
  EXPECT_EQ(made.frames(), 9);
  EXPECT_EQ(made.width, 48);
  EXPECT_EQ(made.height, 32);
  // The VAE in tiles (--vae-tiling): the same latents, the video decoded tile by tile, and the plan says so.
  const auto tiled = launch(sample + " --out " + out + "/t.h5 --video " + out + "/t.mp4 --seed 7 --vae-tiling 16x16");
  ASSERT_EQ(tiled.status, 0) << tiled.output;
  EXPECT_EQ(wt::testing::occurrences(tiled.output, "VAE: tiles of 16x16 pixels, stride 8x8"), 1u) << tiled.output;
  EXPECT_TRUE(torch::equal(read_shard(out + "/t.h5").latents[0], read_shard(out + "/a.h5").latents[0]));
  const auto tiled_video = wt::media::probe_media(out + "/t.mp4");
  EXPECT_EQ(tiled_video.frames(), 9);
  EXPECT_EQ(tiled_video.width, 48);
  const auto tiled_plan =
      launch(sample + " --out " + out + "/t.h5 --dry-run --video " + out + "/t.mp4 --vae-tiling 16x16");
  EXPECT_EQ(wt::testing::occurrences(tiled_plan.output, "decoding on rank 0 (the DiT freed; the VAE, tile by tile)"),
            1u)
      << tiled_plan.output;
  for (const auto& [tiling, line] : std::vector<std::pair<std::string, std::string>>{
           {"12x12",
            "option --vae-tiling: tiles of 12x12 pixels, stride 4x4: this VAE needs strides of at least 8 pixels "
            "and at most the tile, each a multiple of 8 (so tiles of 16 or more)"},
           {"on", "option --vae-tiling: 'on': expected auto, off, or the tile's WIDTHxHEIGHT in pixels"}}) {
    const auto bad_tiles = launch(sample + " --out " + out + "/x.h5 --video " + out + "/x.mp4 --vae-tiling " + tiling);
    EXPECT_EQ(bad_tiles.status, 2) << bad_tiles.output;
    EXPECT_EQ(wt::testing::occurrences(bad_tiles.output, line), 1u) << bad_tiles.output;
    EXPECT_FALSE(fs::exists(out + "/x.h5"));
  }
  // The seed's noise written to a file and given back gives the same latents.
  auto generator = at::make_generator<at::CPUGeneratorImpl>(7);
  const auto noise = torch::randn({1, 16, 3, 4, 6}, generator, torch::kFloat32)[0];
  {
    std::ofstream bin(out + "/noise.bin", std::ios::binary);
    bin.write(static_cast<const char*>(noise.contiguous().data_ptr()), std::streamsize(noise.numel() * 4));
  }
  run_ok(std::string(WANTRAIN_PYTHON) + " -c \"import h5py, numpy; h5py.File('" + out +
         "/noise.h5', 'w')['noise'] = numpy.fromfile('" + out + "/noise.bin', dtype='float32').reshape(16, 3, 4, 6)\"");
  run_ok(sample + " --out " + out + "/b.h5 --frames-dir " + out + "/b --noise " + out + "/noise.h5 --seed 99");
  const auto a = read_shard(out + "/a.h5"), b = read_shard(out + "/b.h5");
  ASSERT_EQ(a.latents.size(), 1u);
  EXPECT_TRUE(torch::equal(a.latents[0], b.latents[0]));
  EXPECT_TRUE(fs::exists(out + "/b/frame-00008.png"));
  // The unconditional branch without --negative-prompt: a model of no
  // released shape (wan-tiny) gets the all-zero context that --text-drop
  // trains, as --negative-prompt '' gives it; another prompt's embedding
  // samples otherwise.
  std::string unconditional = sample;
  const std::string negative = " --negative-prompt 'a blue sky'";
  unconditional.replace(unconditional.find(negative), negative.size(), "");
  const auto zero = launch(unconditional + " --out " + out + "/z.h5 --frames-dir " + out + "/z --seed 7");
  ASSERT_EQ(zero.status, 0) << zero.output;
  EXPECT_EQ(wt::testing::occurrences(zero.output,
                                     "unconditional branch: the all-zero context that wantrain --text-drop trains "
                                     "(a model of no released shape)"),
            1u)
      << zero.output;
  EXPECT_EQ(zero.output.find("release settings"), std::string::npos) << zero.output;
  run_ok(unconditional + " --negative-prompt '' --out " + out + "/e.h5 --frames-dir " + out + "/e --seed 7");
  const auto z = read_shard(out + "/z.h5"), e = read_shard(out + "/e.h5");
  EXPECT_TRUE(torch::equal(z.latents[0], e.latents[0]));
  EXPECT_FALSE(torch::equal(z.latents[0], a.latents[0]));
  // A released shape samples with its release's settings (but --steps 3,
  // given) and negative prompt, and says so before anything is built; here the small umT5's
  // embeddings then do not fit the 1.3B model: one line, status 2.
  // (The 1.3B's weights as a header over a hole: they pass the header
  // check, and nothing reads them.)
  const std::string released_config = std::string(WANTRAIN_SOURCE_DIR) + "/data/configs/wan2.1-t2v-1.3b.json";
  const std::string released_weights = out + "/wan2.1-t2v-1.3b.safetensors";
  wt::testing::write_sparse_weights(wt::wan::load_model_config(released_config), released_weights);
  std::string released = unconditional;
  released.replace(released.find(kTiny), kTiny.size(), released_config);
  released.replace(released.find(s.dit), s.dit.size(), released_weights);
  const auto release = launch(released + " --out " + out + "/r.h5 --frames-dir " + out + "/r");
  EXPECT_EQ(release.status, 2) << release.output;
  EXPECT_EQ(wt::testing::occurrences(release.output,
                                     "wansample: Wan2.1 T2V-1.3B's release settings: 3 steps, shift 5, cfg 5"),
            1u)
      << release.output;
  EXPECT_EQ(
      wt::testing::occurrences(release.output, "wansample: unconditional branch: Wan2.1 T2V-1.3B's negative prompt"),
      1u)
      << release.output;
  EXPECT_EQ(wt::testing::occurrences(release.output, "do not fit model config"), 1u) << release.output;
  EXPECT_FALSE(fs::exists(out + "/r.h5"));
  // --dry-run: the plan of each rank, phase by phase, and nothing written.
  // The encoders' line is umT5's and the VAE's weights in fp32, counted
  // here from their files.
  auto file_bytes = [](const std::string& path) {
    double elements = 0;
    for (const auto& [name, shape] : wt::wan::open_weights(path).shapes)
      elements += double(c10::multiply_integers(shape));
    return 4 * elements;
  };
  const auto dry = launch(sample + " --out " + out + "/d.h5 --video " + out + "/d.mp4 --dry-run");
  ASSERT_EQ(dry.status, 0) << dry.output;
  EXPECT_EQ(wt::testing::occurrences(dry.output, "wansample: dry run: what each rank holds (nothing was loaded)"), 1u)
      << dry.output;
  const std::string encoders = wt::wan::format_bytes(file_bytes(s.t5) + file_bytes(s.vae));
  EXPECT_TRUE(std::regex_search(dry.output, std::regex("encoders \\(umT5 on rank 0[^\n]* " + encoders + "\n")))
      << encoders << "\n"
      << dry.output;
  for (const char* phase : {"sampling (the DiT weights, one forward's activations)",
                            "decoding on rank 0 (the DiT freed; the VAE and its activations)", "peak"})
    EXPECT_EQ(wt::testing::occurrences(dry.output, phase), 1u) << phase << "\n" << dry.output;
  EXPECT_FALSE(fs::exists(out + "/d.h5"));
  EXPECT_FALSE(fs::exists(out + "/d.mp4"));
  // On 2 ranks with sharded weights: a column for rank 0 and one for the others.
  const auto dry2 =
      launch(wt::testing::mpi_command(2, WANTRAIN_WANSAMPLE,
                                      sample.substr(std::string(WANTRAIN_WANSAMPLE).size()) + " --out " + out +
                                          "/d.h5 --video " + out + "/d.mp4 --dry-run --shard-weights"));
  ASSERT_EQ(dry2.status, 0) << dry2.output;
  EXPECT_EQ(wt::testing::occurrences(dry2.output, "what each rank holds on 2 ranks"), 1u) << dry2.output;
  EXPECT_EQ(wt::testing::occurrences(dry2.output, "rank 0  other ranks"), 1u) << dry2.output;
  std::string odd = sample;
  odd.replace(odd.find("--size 48x32"), 12, "--size 40x32");
  const auto bad = launch(odd + " --out " + out + "/c.h5 --video " + out + "/c.mp4");
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_NE(bad.output.find("multiples of 16"), std::string::npos) << bad.output;
}

// Videos of a prompt file drawn during training (--sample-prompts): each
// prompt at its own size and length, spread over the two ranks, written as
// mp4 and logged to metrics.jsonl and TensorBoard (read back by an
// independent reader); bad lines are one line each before any step.
TEST(Encode, PromptVideosAreDrawnDuringTrainingOverTheRanks) {
  const auto& s = setup();
  ASSERT_TRUE(s.error.empty()) << s.error;
  const std::string data = wt::testing::fresh("encode-prompt-videos-data");
  run_ok(wandata(encode_args(s, s.clips, data, "--frames 5")));  // 32x32, 5 frames
  const std::string dir = wt::testing::fresh("encode-prompt-videos");
  fs::create_directories(dir);
  write_text(dir + "/prompts.txt",
             "a red ball rolls --seed 3\n"
             "# a comment, then a blank line\n\n"
             "a small dog runs --size 48x32 --frames 9 --n a blue sky\n"
             "the camera pans --d 5 --s 2 --g 3\n");
  const std::string models = " --t5 " + s.t5 + " --t5-config " + s.t5_config + " --t5-dtype fp32 --tokenizer " +
                             s.tokenizer + " --vae " + s.vae + " --vae-config " + s.vae_config;
  auto train = [&](const std::string& out, const std::string& prompts) {
    return launch(wt::testing::mpi_command(
        2, WANTRAIN_WANTRAIN,
        "--model-config " + kTiny + " --data " + data + " --output-dir " + out +
            " --threads 1 --backend mpi --batch-size 1 --steps 2 --sample-every 2 --sample-steps 2 "
            "--sample-prompts " +
            prompts + models));
  };
  const std::string out = dir + "/run";
  const auto job = train(out, dir + "/prompts.txt");
  ASSERT_EQ(job.status, 0) << job.output;
  const std::string step = out + "/samples/step-00000002/";
  for (const auto& [name, frames, width] :
       {std::tuple{"00.mp4", 5, 32}, std::tuple{"01.mp4", 9, 48}, std::tuple{"02.mp4", 5, 32}}) {
    ASSERT_TRUE(fs::exists(step + name)) << name << "\n" << job.output;
    const auto info = wt::media::probe_media(step + name);
    EXPECT_EQ(info.frames(), frames) << name;
    EXPECT_EQ(info.width, width) << name;
    EXPECT_EQ(info.height, 32) << name;
  }
  EXPECT_EQ(
      wt::testing::occurrences(job.output, "sample prompts: 3 prompts of " + dir + "/prompts.txt, spread over 2 ranks"),
      1u)
      << job.output;
  // The memory plan counts the VAE and its decode of the largest prompt's
  // frame (48x32: 22.4 KiB a pixel in fp32, plan/decode_memory.hpp).
  const std::string videos =
      wt::wan::format_bytes(wt::wan::weights_bytes(s.vae, torch::kFloat32) + 22.4 * 1024 * 48 * 32);
  EXPECT_TRUE(std::regex_search(job.output, std::regex("prompt videos +" + videos + "  the VAE and its decode")))
      << videos << "\n"
      << job.output;
  // Prompt i drawn by rank i % 2.
  EXPECT_EQ(wt::testing::occurrences(job.output, "prompt 00 \"a red ball rolls\": " + step + "00.mp4"), 1u)
      << job.output;
  EXPECT_EQ(wt::testing::occurrences(job.output, "prompt 01 \"a small dog runs\": " + step + "01.mp4"), 1u)
      << job.output;
  EXPECT_NE(job.output.find("s, rank 1)"), std::string::npos) << job.output;
  int logged = 0;
  std::istringstream metrics(wt::testing::read_text(out + "/metrics.jsonl"));
  for (std::string line; std::getline(metrics, line);)
    if (line.find("\"prompt_video\"") != std::string::npos) {
      const auto j = nlohmann::json::parse(line);
      EXPECT_EQ(j["step"], 2);
      EXPECT_EQ(j["prompt_index"], logged);
      EXPECT_EQ(j["prompt_video"], fmt::format("{}{:02d}.mp4", step, logged));
      ++logged;
    }
  EXPECT_EQ(logged, 3);
  const std::string check = std::string(WANTRAIN_PYTHON) + " " + WANTRAIN_SOURCE_DIR +
                            "/tests/report/tfevents_reader.py check " + out +
                            "/tb --image prompts/00=2 --image prompts/01=2 --image prompts/02=2";
  const auto read = launch(check);
  EXPECT_EQ(read.status, 0) << check << "\n" << read.output;

  // On sample ranks of their own (--sample-ranks 2 of 4): the same videos,
  // each drawn by both sample ranks (its tokens split over them), written
  // once by the first, logged in samples/metrics.jsonl and tb/samples; here
  // decoded in tiles (--vae-tiling).
  const std::string apart = dir + "/apart";
  const auto on_sample_ranks = launch(wt::testing::mpi_command(
      4, WANTRAIN_WANTRAIN,
      "--model-config " + kTiny + " --data " + data + " --output-dir " + apart +
          " --threads 1 --backend mpi --batch-size 1 --steps 2 --sample-every 2 --sample-steps 2 --sample-ranks 2 "
          "--vae-tiling 16x16 --sample-prompts " +
          dir + "/prompts.txt" + models));
  ASSERT_EQ(on_sample_ranks.status, 0) << on_sample_ranks.output;
  for (const auto& [name, frames, width] :
       {std::tuple{"00.mp4", 5, 32}, std::tuple{"01.mp4", 9, 48}, std::tuple{"02.mp4", 5, 32}}) {
    const std::string video = apart + "/samples/step-00000002/" + name;
    ASSERT_TRUE(fs::exists(video)) << name << "\n" << on_sample_ranks.output;
    const auto info = wt::media::probe_media(video);
    EXPECT_EQ(info.frames(), frames) << name;
    EXPECT_EQ(info.width, width) << name;
  }
  EXPECT_EQ(wt::testing::occurrences(wt::testing::read_text(apart + "/samples/metrics.jsonl"), "\"prompt_video\""), 3u);
  EXPECT_EQ(wt::testing::occurrences(on_sample_ranks.output, "s, rank 0)"), 3u) << on_sample_ranks.output;
  const auto read_apart =
      launch(std::string(WANTRAIN_PYTHON) + " " + WANTRAIN_SOURCE_DIR + "/tests/report/tfevents_reader.py check " +
             apart + "/tb/samples --image prompts/00=2 --image prompts/01=2 --image prompts/02=2");
  EXPECT_EQ(read_apart.status, 0) << read_apart.output;

  // Tiles the VAE cannot take: one line, before any step.
  const auto bad_tiles = train(dir + "/bad-tiles", dir + "/prompts.txt --vae-tiling 12x12");
  EXPECT_EQ(bad_tiles.status, 2) << bad_tiles.output;
  EXPECT_EQ(wt::testing::occurrences(bad_tiles.output, "option --vae-tiling: tiles of 12x12 pixels, stride 4x4"), 1u)
      << bad_tiles.output;
  EXPECT_EQ(bad_tiles.output.find("step 1"), std::string::npos) << bad_tiles.output;
  // Bad lines: each its line naming the file and line, status 2, before any step.
  write_text(dir + "/bad.txt", "fine\n--size 10x10\nx --frames four\ny --colour red\n");
  const auto bad = train(dir + "/bad", dir + "/bad.txt");
  EXPECT_EQ(bad.status, 2) << bad.output;
  for (const std::string& expected :
       {dir + "/bad.txt:2: the line has settings but no prompt before them",
        dir + "/bad.txt:3: --frames 'four': a frame count must be a positive whole number",
        dir + "/bad.txt:4: --colour: no such setting"})
    EXPECT_EQ(wt::testing::occurrences(bad.output, expected), 1u) << expected << "\n" << bad.output;
  EXPECT_EQ(bad.output.find("step 1"), std::string::npos) << bad.output;
  // Lines that do not fit the model and its VAE, found before training too.
  write_text(dir + "/unfit.txt", "fine\nx --frames 4\ny --size 40x32\nz --image " + s.clips + "/d.png\n");
  const auto unfit = train(dir + "/unfit", dir + "/unfit.txt");
  EXPECT_EQ(unfit.status, 2) << unfit.output;
  for (const std::string& expected : {dir + "/unfit.txt:2: --frames 4: video frames are 4k + 1",
                                      dir + "/unfit.txt:3: --size 40x32: sides must be multiples of 16",
                                      dir + "/unfit.txt:4: --image: the model is t2v: it starts from no picture"})
    EXPECT_EQ(wt::testing::occurrences(unfit.output, expected), 1u) << expected << "\n" << unfit.output;
  EXPECT_FALSE(fs::exists(dir + "/unfit/metrics.jsonl")) << unfit.output;
}

// Image to video end to end: clips encoded with their first frame's
// condition (y by the VAE, CLIP features by a small CLIP tower drawn here),
// then a picture sampled into a video by an i2v model.
namespace {

// A CLIP tower of ViT-H's layout, small: 28 px, 14 px patches (5 tokens), 2
// heads of 80, drawn from a seed and written to `path` in the released names.
wt::wan::ClipVision small_clip(const std::string& path) {
  wt::wan::ClipVisionConfig clip_config;
  clip_config.image_size = 28;
  clip_config.dim = 160;
  clip_config.num_heads = 2;
  clip_config.num_layers = 3;
  torch::manual_seed(5);
  wt::wan::ClipVision clip(clip_config);
  wt::io::NamedTensors tensors;
  for (const auto& p : clip->named_parameters()) tensors.emplace_back("visual." + p.key(), p.value());
  wt::io::write_safetensors(path, tensors, torch::kFloat32);
  clip->eval();
  return clip;
}

}  // namespace

TEST(Encode, TheImageConditionIsEncodedAndAPictureBecomesAVideo) {
  const auto& s = setup();
  ASSERT_TRUE(s.error.empty()) << s.error;
  const std::string dir = wt::testing::fresh("encode-i2v");
  fs::create_directories(dir);
  small_clip(dir + "/clip.safetensors");
  const std::string data = dir + "/data";
  const auto bad = launch(wandata(encode_args(s, s.clips, data, "--frames 5 --clip " + dir + "/clip.safetensors")));
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_NE(bad.output.find("option --clip: the CLIP features are of an image condition: give --condition i2v, "
                            "flf2v, fun-control or fun-control-ref"),
            std::string::npos)
      << bad.output;
  run_ok(wandata(encode_args(s, s.clips, data,
                             "--frames 5 --condition i2v --clip " + dir + "/clip.safetensors --latent-dtype fp32")));
  {  // the job's record says so; a text-to-video job's has no such key (an earlier wandata's goes on)
    std::ifstream record(data + "/encode.json");
    const auto settings = nlohmann::json::parse(record);
    EXPECT_EQ(settings.value("condition", ""), "i2v") << settings.dump();
  }
  const auto dataset = wt::data::Dataset::open(data);
  const auto& shape = dataset.shape();
  ASSERT_EQ(shape.condition_channels, 4 + 16);
  ASSERT_EQ(shape.clip_tokens, 5);
  ASSERT_EQ(shape.clip_dim, 160);
  wt::data::SampleReader reader(dataset);
  for (int64_t i = 0; i < dataset.size(); ++i) {
    auto latents = torch::empty({shape.channels, shape.frames, shape.height, shape.width});
    auto text = torch::empty({shape.text_len, shape.text_dim}, wt::data::scalar_type(shape.text));
    wt::data::SampleCondition condition{torch::empty({20, shape.frames, shape.height, shape.width}),
                                        torch::empty({5, 160}, wt::data::scalar_type(shape.text))};
    int32_t len = 0;
    reader.read(i, latents, text, len, &condition);
    // The mask marks latent frame 0; a causal VAE's first latent frame sees
    // the first pixel frame alone, so y's latents there are the clip's own.
    EXPECT_TRUE(torch::equal(condition.y.narrow(0, 0, 4), wt::wan::frame_mask(5, shape.height, shape.width, false)));
    EXPECT_LT((condition.y.narrow(0, 4, 16).select(1, 0) - latents.select(1, 0)).abs().max().item<float>(), 1e-4)
        << "sample " << i;
    EXPECT_GT(condition.y.narrow(0, 4, 16).select(1, 1).abs().max().item<float>(), 0.0f);  // the encoded zero frames
    EXPECT_TRUE(torch::isfinite(condition.clip_fea).all().item<bool>());
  }

  // First and last frames: a still (d.png, a 1-frame sample of the buckets)
  // has no last frame, and is skipped with its line.
  const std::string flf2v = dir + "/flf2v";
  const auto both = launch(wandata(models_args(s, s.clips, flf2v, "--buckets 32x32 --frames 5 --condition flf2v")));
  ASSERT_EQ(both.status, 0) << both.output;
  EXPECT_NE(both.output.find("clips/d.png: a still or a clip under 5 frames has no last frame to give (the flf2v "
                             "condition)"),
            std::string::npos)
      << both.output;

  // An i2v model of wan-tiny's width reading those: a picture to a video.
  const std::string config = dir + "/i2v.json";
  write_text(config, R"({"model_type": "i2v", "image_dim": 160, "image_tokens": 5, "dim": 64, "ffn_dim": 128,
    "num_heads": 4, "num_layers": 2, "freq_dim": 256, "text_dim": 64, "text_len": 16, "patch_size": [1, 2, 2],
    "in_dim": 36, "out_dim": 16, "eps": 1e-6, "qk_norm": true, "cross_attn_norm": true})");
  wt::wan::WanModel dit(wt::wan::load_model_config(config));
  {
    torch::NoGradGuard no_grad;
    dit->head->head->weight.normal_(0.0, 0.05);
  }
  wt::wan::save_weights(*dit, dir + "/i2v.safetensors", torch::kFloat32);
  const std::string sample = std::string(WANTRAIN_WANSAMPLE) + " --weights " + dir +
                             "/i2v.safetensors --model-config " + config + " --prompt 'a red ball rolls' --t5 " + s.t5 +
                             " --t5-config " + s.t5_config + " --t5-dtype fp32 --tokenizer " + s.tokenizer +
                             " --frames 5 --steps 3 --vae " + s.vae + " --vae-config " + s.vae_config;
  // The 48x32 picture within 1024 pixels: 32x16 (sqrt(1024 * 2/3) = 26 -> 16, sqrt(1024 * 3/2) = 39 -> 32).
  const auto job = launch(sample + " --image " + s.clips + "/d.png --clip " + dir +
                          "/clip.safetensors --max-area 1024" + " --out " + dir + "/a.h5 --video " + dir + "/a.mp4");
  ASSERT_EQ(job.status, 0) << job.output;
  EXPECT_NE(job.output.find("wansample: starting from " + s.clips + "/d.png at 32x16 (VAE and CLIP)"),
            std::string::npos)
      << job.output;
  const auto made = wt::media::probe_media(dir + "/a.mp4");
  EXPECT_EQ(made.frames(), 5);
  EXPECT_EQ(made.width, 32);
  EXPECT_EQ(made.height, 16);
  // What it needs, and what a text-to-video model does not take: one line each.
  for (const auto& [extra, line] : std::vector<std::pair<std::string, std::string>>{
           {" --size 32x16", "option --image: the i2v model starts from a picture: give --image FILE and --clip FILE"},
           {" --image " + s.clips + "/d.png --size 32x16",
            "option --clip: the i2v model reads the picture's CLIP features: give the CLIP encoder"}}) {
    const auto refused = launch(sample + extra + " --out " + dir + "/b.h5 --video " + dir + "/b.mp4");
    EXPECT_EQ(refused.status, 2) << refused.output;
    EXPECT_NE(refused.output.find(line), std::string::npos) << refused.output;
  }
  const auto t2v =
      launch(std::string(WANTRAIN_WANSAMPLE) + " --weights " + s.dit + " --model-config " + kTiny +
             " --prompt 'a red ball rolls' --t5 " + s.t5 + " --t5-config " + s.t5_config +
             " --t5-dtype fp32 --tokenizer " + s.tokenizer + " --frames 5 --steps 3 --vae " + s.vae + " --vae-config " +
             s.vae_config + " --image " + s.clips + "/d.png --out " + dir + "/c.h5 --video " + dir + "/c.mp4");
  EXPECT_EQ(t2v.status, 2) << t2v.output;
  EXPECT_NE(t2v.output.find("option --image: the model (" + kTiny + ") is t2v: it starts from no picture"),
            std::string::npos)
      << t2v.output;

  // A ti2v model (Wan2.2 TI2V): the picture, covered to the video's size,
  // is the first latent frame exactly as the VAE encodes it; the size is
  // textimage2video.py's best_output_size: within 1024 pixels, sides
  // multiples of 16, the 48x32 picture's 3:2 is nearer 32x32 (width fitted
  // first: 39 -> 32, 1024 / 32 -> 32) than 64x16 (height first: 26 -> 16,
  // 1024 / 16 -> 64).
  const std::string ti2v_config = std::string(WANTRAIN_SOURCE_DIR) + "/data/configs/wan-tiny-ti2v.json";
  wt::wan::WanModel ti2v(wt::wan::load_model_config(ti2v_config));
  {
    torch::NoGradGuard no_grad;
    ti2v->head->head->weight.normal_(0.0, 0.05);
  }
  wt::wan::save_weights(*ti2v, dir + "/ti2v.safetensors", torch::kFloat32);
  std::filesystem::create_directories(dir + "/ti2v-sample");
  const auto from_picture = launch(
      std::string(WANTRAIN_WANSAMPLE) + " --weights " + dir + "/ti2v.safetensors --model-config " + ti2v_config +
      " --prompt 'a red ball rolls' --t5 " + s.t5 + " --t5-config " + s.t5_config + " --t5-dtype fp32 --tokenizer " +
      s.tokenizer + " --frames 5 --steps 3 --threads 1 --vae " + s.vae + " --vae-config " + s.vae_config + " --image " +
      s.clips + "/d.png --max-area 1024 --out " + dir + "/ti2v-sample/s.h5 --video " + dir + "/ti2v.mp4");
  ASSERT_EQ(from_picture.status, 0) << from_picture.output;
  EXPECT_NE(from_picture.output.find("wansample: starting from " + s.clips +
                                     "/d.png at 32x32 (its latents are the first frame)"),
            std::string::npos)
      << from_picture.output;
  EXPECT_EQ(wt::media::probe_media(dir + "/ti2v.mp4").frames(), 5);
  const auto sampled = wt::data::Dataset::open(dir + "/ti2v-sample");
  const auto& made_shape = sampled.shape();
  auto latents = torch::empty({made_shape.channels, made_shape.frames, made_shape.height, made_shape.width});
  auto text = torch::empty({made_shape.text_len, made_shape.text_dim});
  int32_t length = 0;
  wt::data::SampleReader(sampled).read(0, latents, text, length);
  const auto vae = wt::wan::open_video_vae(s.vae, s.vae_config);
  torch::NoGradGuard no_grad;
  const auto picture = wt::wan::cover_picture(wt::wan::read_picture(s.clips + "/d.png"), 32, 32);
  const auto encoded = vae->encode(picture.unsqueeze(1).unsqueeze(0))[0];  // [C, 1, 4, 4]
  EXPECT_LT((latents.slice(1, 0, 1) - encoded).abs().max().item<float>(), 1e-5);

  // A VAE whose latents are not the model's channels (a 48-channel TI2V
  // model given a 16-channel VAE): one line naming both, status 2.
  const std::string wide_config = dir + "/ti2v-48.json";
  write_text(wide_config, R"({"model_type": "ti2v", "dim": 64, "ffn_dim": 128, "num_heads": 4, "num_layers": 2,
    "freq_dim": 256, "text_dim": 64, "text_len": 16, "patch_size": [1, 2, 2], "in_dim": 48, "out_dim": 48,
    "eps": 1e-6, "qk_norm": true, "cross_attn_norm": true})");
  wt::wan::WanModel wide(wt::wan::load_model_config(wide_config));
  wt::wan::save_weights(*wide, dir + "/ti2v-48.safetensors", torch::kFloat32);
  const auto mismatched =
      launch(std::string(WANTRAIN_WANSAMPLE) + " --weights " + dir + "/ti2v-48.safetensors --model-config " +
             wide_config + " --prompt 'a red ball rolls' --t5 " + s.t5 + " --t5-config " + s.t5_config +
             " --tokenizer " + s.tokenizer + " --frames 5 --steps 1 --vae " + s.vae + " --vae-config " + s.vae_config +
             " --out " + dir + "/w.h5 --video " + dir + "/w.mp4");
  EXPECT_EQ(mismatched.status, 2) << mismatched.output;
  EXPECT_NE(mismatched.output.find("option --vae: " + s.vae +
                                   " is the Wan2.1 VAE (16 channels, 4x8x8), whose "
                                   "latents have 16 channels; the model (" +
                                   wide_config + ") makes 48"),
            std::string::npos)
      << mismatched.output;
}

// Wan2.2's VAE sets the defaults of TI2V-5B's release (1280x704, 121
// frames; sides multiples of 32), so the README's TI2V-5B encode line runs
// as written: here with its files replaced by small models drawn here, a
// small Wan2.2-layout VAE (z_dim 4), and 2 ranks for its 8. A fixed --size
// needs no bucket option (issue 55: it failed on --bucket-step, never given);
// wansample's defaults follow the VAE too.
TEST(Encode, Wan22sVaeSetsTheDefaultsOfTi2vAndItsReadmeLineRuns) {
  const auto& s = setup();
  ASSERT_TRUE(s.error.empty()) << s.error;
  const std::string dir = wt::testing::fresh("encode-wan22");
  fs::create_directories(dir);
  const std::string vae_config = dir + "/vae22.json", vae = dir + "/vae22.safetensors";
  write_text(vae_config, R"({"version": "2.2", "dim": 8, "dec_dim": 12, "z_dim": 4, "dim_mult": [1, 2, 2, 2],
    "num_res_blocks": 1, "temperal_downsample": [false, true, true]})");
  {
    torch::manual_seed(5);
    const auto made = wt::wan::make_video_vae(wt::wan::load_video_vae_config(vae_config));
    write_module(*made, vae);
  }

  // The line, from the README: its continuation lines joined, the released
  // files replaced by the small models (with the configs they need).
  std::ifstream readme(std::string(WANTRAIN_SOURCE_DIR) + "/README.md");
  std::string line, command;
  bool in_block = false;
  while (std::getline(readme, line)) {
    if (line == "W=Wan2.2-TI2V-5B") in_block = true;
    if (!in_block || (line.find("wandata encode") == std::string::npos && command.empty())) continue;
    const bool continued = !line.empty() && line.back() == '\\';
    command += continued ? line.substr(0, line.size() - 1) : line;
    if (!continued) break;
  }
  ASSERT_EQ(command.rfind("mpirun -np 8 wandata encode ", 0), 0u) << "README.md: no TI2V-5B encode line: " << command;
  auto replace = [&](const std::string& what, const std::string& with) {
    const auto at = command.find(what);
    ASSERT_NE(at, std::string::npos) << what << " is not in the README's line: " << command;
    command.replace(at, what.size(), with);
  };
  replace("mpirun -np 8 wandata ", "");
  replace("my-clips/", s.clips);
  replace("data/mine-ti2v", dir + "/defaults");
  replace("$W/Wan2.2_VAE.pth", vae + " --vae-config " + vae_config);
  replace("$W/models_t5_umt5-xxl-enc-bf16.pth", s.t5 + " --t5-config " + s.t5_config);
  replace("$W/google/umt5-xxl", s.tokenizer);
  const std::string as_written = command;

  // As written: the release's shape. The test's clips (at most 13 frames)
  // are all too short for 121 frames, each one line, and nothing is encoded.
  const auto defaults = launch(wt::testing::mpi_command(2, WANTRAIN_WANDATA, as_written));
  ASSERT_EQ(defaults.status, 0) << as_written << "\n" << defaults.output;
  EXPECT_NE(defaults.output.find(": 121 frames a clip at 1280x704, on 2 ranks"), std::string::npos) << defaults.output;
  EXPECT_NE(defaults.output.find("--vae " + vae + ": Wan2.2 VAE (4 channels, 4x16x16)"), std::string::npos)
      << defaults.output;
  EXPECT_TRUE(std::regex_search(defaults.output,
                                std::regex("/a\\.mp4: too few frames: [0-9]+ at 24 fps, --frames 121 needs 121")))
      << defaults.output;

  // With a --size and --frames the clips fill (issue 55's line): encoded at
  // 64x64, latents of 64 / 16 pixels and 1 + 8 / 4 frames.
  const std::string sized = dir + "/sized";
  command = as_written;
  replace(dir + "/defaults", sized + " --size 64x64 --frames 9");
  run_ok(wandata(command));
  const auto data = wt::data::Dataset::open(sized);
  ASSERT_GT(data.size(), 0);
  EXPECT_EQ(data.shape().channels, 4);
  EXPECT_EQ(data.shape().frames, 3);
  EXPECT_EQ(data.shape().height, 4);
  EXPECT_EQ(data.shape().width, 4);

  // Buckets step in 32s unless told otherwise; a step or size that does not
  // fit Wan2.2's VAE is one line naming the option, status 2.
  const auto models = " --vae " + vae + " --vae-config " + vae_config + " --t5 " + s.t5 + " --t5-config " +
                      s.t5_config + " --tokenizer " + s.tokenizer + " --text-len 16 --frames 5";
  const std::string bucketed = dir + "/bucketed";
  const auto buckets = launch(
      wandata("encode --input " + s.clips + " --out " + bucketed + models + " --buckets auto --bucket-area 64x64"));
  ASSERT_EQ(buckets.status, 0) << buckets.output;
  const auto made = wt::data::Dataset::open(bucketed);
  ASSERT_GT(made.buckets().size(), 0u);
  for (const auto& b : made.buckets()) {
    EXPECT_EQ(b.shape.height % 2, 0) << b.name();  // latents: pixels / 16, so sides of 32k pixels
    EXPECT_EQ(b.shape.width % 2, 0) << b.name();
  }
  for (const auto& [extra, error] :
       {std::pair{std::string(" --buckets auto --bucket-step 16"),
                  std::string("option --bucket-step: 16 is not a multiple of 32 (the Wan2.2 VAE's 16, then the DiT's "
                              "2x2 patches)")},
        {std::string(" --size 48x48"),
         std::string("option --size: 48x48: width and height must be multiples of 32 (the VAE's 16, then the DiT's "
                     "2x2 patches)")}}) {
    const auto bad = launch(wandata("encode --input " + s.clips + " --out " + dir + "/bad" + models + extra));
    EXPECT_EQ(bad.status, 2) << extra << "\n" << bad.output;
    EXPECT_NE(bad.output.find(error), std::string::npos) << extra << "\n" << bad.output;
  }

  // wansample with Wan2.2's VAE: a prompt's video is 1280x704 unless --size
  // says otherwise (named in the check of --frames), and plays at 24 fps.
  const std::string ti2v_config = dir + "/ti2v.json";
  write_text(ti2v_config, R"({"model_type": "ti2v", "dim": 32, "ffn_dim": 64, "num_heads": 2, "num_layers": 1,
    "freq_dim": 256, "text_dim": 64, "text_len": 16, "patch_size": [1, 2, 2], "in_dim": 4, "out_dim": 4,
    "eps": 1e-6, "qk_norm": true, "cross_attn_norm": true})");
  wt::wan::WanModel ti2v(wt::wan::load_model_config(ti2v_config));
  wt::wan::save_weights(*ti2v, dir + "/ti2v.safetensors", torch::kFloat32);
  const std::string sample =
      std::string(WANTRAIN_WANSAMPLE) + " --weights " + dir + "/ti2v.safetensors --model-config " + ti2v_config +
      " --prompt 'a red ball rolls' --t5 " + s.t5 + " --t5-config " + s.t5_config + " --tokenizer " + s.tokenizer +
      " --steps 1 --vae " + vae + " --vae-config " + vae_config + " --out " + dir + "/s.h5 --video " + dir + "/s.mp4";
  const auto default_size = launch(sample + " --frames 6");
  EXPECT_EQ(default_size.status, 2) << default_size.output;
  EXPECT_NE(
      default_size.output.find("options --frames, --size: 6 and 1280x704: with --prompt, video frames are 4k + 1 and "
                               "the size multiples of 32"),
      std::string::npos)
      << default_size.output;
  run_ok(sample + " --frames 9 --size 64x32");
  const auto video = wt::media::probe_media(dir + "/s.mp4");
  EXPECT_EQ(video.frames(), 9);
  EXPECT_NEAR(video.fps(), 24.0, 0.01);
}

// VACE data as a user lays it out: a clip with its control video, mask
// video and reference picture beside it (walk.control.mp4, walk.mask.mp4,
// walk.ref.png), the same named by a DiffSynth-Studio metadata.csv; each
// sample's /vace_context is what vace_condition builds from the control's
// frames that go with the clip's, and the control files are no items of
// their own. A control shorter than the clip, another number of reference
// pictures and a mask without a control are one line each. A VACE model
// trains on it (the reference frame before the latents), 2 ranks = 1 rank,
// and wansample --data samples with the sample's own control.
TEST(Encode, VaceControlFilesBecomeEachSamplesContextAndAVaceModelTrainsOnThem) {
  const auto& s = setup();
  ASSERT_TRUE(s.error.empty()) << s.error;
  const std::string dir = wt::testing::fresh("encode-vace"), clips = dir + "/clips";
  fs::create_directories(clips);
  const std::string ff = "ffmpeg -hide_banner -loglevel error -y -f lavfi -i ";
  for (const auto& [name, source] :
       {std::pair{"walk.mp4", "testsrc2=size=80x48:rate=16 -frames:v 9 -pix_fmt yuv420p"},
        {"walk.control.mp4", "mandelbrot=size=64x64:rate=16 -frames:v 9 -pix_fmt yuv420p"},
        {"walk.mask.mp4",
         "color=c=white:size=32x32:rate=16 -frames:v 9 -vf drawbox=x=0:y=0:w=16:h=32:color=black:t=fill "
         "-pix_fmt yuv420p"},
        {"walk.ref.png", "testsrc=size=48x24:rate=1 -frames:v 1"},
        {"run.mp4", "testsrc=size=48x48:rate=16 -frames:v 9 -pix_fmt yuv420p"},
        {"run.control.mp4", "testsrc2=size=64x64:rate=16 -frames:v 9 -pix_fmt yuv420p"},
        {"run.ref.png", "mandelbrot=size=32x32:rate=1 -frames:v 1"},
        {"short.mp4", "testsrc2=size=80x48:rate=16 -frames:v 9 -pix_fmt yuv420p"},
        {"short.control.mp4", "mandelbrot=size=64x64:rate=16 -frames:v 3 -pix_fmt yuv420p"},
        {"short.ref.png", "testsrc=size=48x24:rate=1 -frames:v 1"},
        {"norefs.mp4", "testsrc2=size=80x48:rate=16 -frames:v 9 -pix_fmt yuv420p"},
        {"lonely.mp4", "testsrc2=size=80x48:rate=16 -frames:v 9 -pix_fmt yuv420p"},
        {"lonely.mask.mp4", "color=c=white:size=32x32:rate=16 -frames:v 9 -pix_fmt yuv420p"},
        {"lonely.ref.png", "testsrc=size=48x24:rate=1 -frames:v 1"}}) {
    const auto job = launch(ff + source + " " + clips + "/" + name);
    ASSERT_EQ(job.status, 0) << name << ": " << job.output;
  }
  for (const char* name : {"walk", "run", "short", "norefs", "lonely"})
    write_text(clips + "/" + name + ".txt", "a red ball rolls");
  const std::string data = dir + "/data";
  const auto encoded = launch(wandata(encode_args(s, clips, data, "--frames 5 --condition vace --latent-dtype fp32")));
  ASSERT_EQ(encoded.status, 0) << encoded.output;
  for (const std::string& line : std::vector<std::string>{
           "clips/short.mp4: " + clips +
               "/short.control.mp4: 3 frames, shorter than the clip's 5 (its frame k goes with "
               "the clip's frame k)",
           "clips/norefs.mp4: 0 reference pictures, and the dataset's samples have 1 (the first usable item's)",
           "clips/lonely.mp4: " + clips + "/lonely.mask.mp4: a mask without a control video to keep or remake"})
    EXPECT_NE(encoded.output.find(line), std::string::npos) << line << "\n" << encoded.output;
  const auto dataset = wt::data::Dataset::open(data);
  ASSERT_EQ(dataset.size(), 2) << encoded.output;  // run and walk: their control files are no items
  const auto& shape = dataset.shape();
  ASSERT_EQ(shape.vace_channels, 2 * 16 + 64);
  ASSERT_EQ(shape.vace_references, 1);
  EXPECT_EQ(wt::data::inspect_shard(dataset.shards().front().path).version, wt::data::kShardVersion);
  auto latents = torch::empty({shape.channels, shape.frames, shape.height, shape.width});
  auto text = torch::empty({shape.text_len, shape.text_dim}, wt::data::scalar_type(shape.text));
  wt::data::SampleCondition stored;
  stored.vace_context = torch::empty({96, 1 + shape.frames, shape.height, shape.width});
  int32_t len = 0;
  wt::data::SampleReader(dataset).read(1, latents, text, len, &stored);  // walk's (listing order)
  const auto vae = wt::wan::open_video_vae(s.vae, s.vae_config);
  vae->eval();
  const wt::wan::VaceSource source{
      wt::wan::read_control_video(clips + "/walk.control.mp4", 5, 32, 32),
      wt::wan::mask_of_video(wt::wan::read_control_video(clips + "/walk.mask.mp4", 5, 32, 32)),
      {wt::wan::fit_reference(wt::wan::read_picture(clips + "/walk.ref.png"), 32, 32)}};
  const auto expected = wt::wan::vace_context(*vae, source, 5, 32, 32);
  EXPECT_LT((stored.vace_context - expected).abs().max().item<double>(), 1e-5 * expected.abs().max().item<double>());
  // The same item from DiffSynth-Studio's metadata.csv: the same sample.
  write_text(dir + "/metadata.csv",
             "video,prompt,vace_video,vace_video_mask,vace_reference_image\n"
             "clips/walk.mp4,a red ball rolls,clips/walk.control.mp4,clips/walk.mask.mp4,clips/walk.ref.png\n");
  run_ok(
      wandata(encode_args(s, dir + "/metadata.csv", dir + "/csv", "--frames 5 --condition vace --latent-dtype fp32")));
  const auto from_csv = wt::data::Dataset::open(dir + "/csv");
  wt::data::SampleCondition listed;
  listed.vace_context = torch::empty_like(stored.vace_context);
  wt::data::SampleReader(from_csv).read(0, latents, text, len, &listed);
  EXPECT_TRUE(torch::equal(listed.vace_context, stored.vace_context));

  // A VACE model of wan-tiny's width: 2 steps on 1 and on 2 ranks, the same
  // loss; a t2v model refuses the data in one line.
  const std::string config = dir + "/vace.json";
  write_text(config, R"({"model_type": "vace", "vace_layers": [0], "vace_in_dim": 96, "dim": 64, "ffn_dim": 128,
    "num_heads": 4, "num_layers": 2, "freq_dim": 256, "text_dim": 64, "text_len": 16, "patch_size": [1, 2, 2],
    "in_dim": 16, "out_dim": 16, "eps": 1e-6, "qk_norm": true, "cross_attn_norm": true})");
  auto train = [&](int ranks, const std::string& out, const std::string& model, const std::string& extra = "") {
    return launch(wt::testing::mpi_command(ranks, WANTRAIN_WANTRAIN,
                                           "--model-config " + model + " --data " + data + " --output-dir " + out +
                                               " --threads 1 --backend mpi --batch-size " + std::to_string(2 / ranks) +
                                               " --steps 2 --lr 1e-3 --sample-every 2 --sample-steps 2" + extra));
  };
  const auto one = train(1, dir + "/one", config), two = train(2, dir + "/two", config);
  ASSERT_EQ(one.status, 0) << one.output;
  ASSERT_EQ(two.status, 0) << two.output;
  std::ifstream a(dir + "/one/metrics.jsonl"), b(dir + "/two/metrics.jsonl");
  std::string la, lb;
  double loss_one = 0, loss_two = 0;
  while (std::getline(a, la)) {
    const auto j = nlohmann::json::parse(la, nullptr, false);
    if (j.contains("loss") && j.value("step", 0) == 2) loss_one = j["loss"].get<double>();
  }
  while (std::getline(b, lb)) {
    const auto j = nlohmann::json::parse(lb, nullptr, false);
    if (j.contains("loss") && j.value("step", 0) == 2) loss_two = j["loss"].get<double>();
  }
  EXPECT_GT(loss_one, 0.0) << one.output;
  EXPECT_NEAR(loss_two, loss_one, 1e-5 * loss_one);
  EXPECT_TRUE(fs::exists(dir + "/one/samples/step-00000002.png")) << one.output;
  const auto t2v = train(1, dir + "/t2v", kTiny);
  EXPECT_EQ(t2v.status, 2) << t2v.output;
  EXPECT_EQ(wt::testing::occurrences(t2v.output,
                                     "the shards hold a VACE context /vace_context that a t2v model does not read"),
            1u)
      << t2v.output;
  // LoRA on the VACE blocks alone (--trainable vace): the adapters are theirs only.
  const auto lora = train(1, dir + "/lora", config, " --lora-rank 4 --trainable vace");
  ASSERT_EQ(lora.status, 0) << lora.output;
  const auto adapters = wt::io::SafetensorsFile::open(dir + "/lora/lora.safetensors");
  size_t vace_adapters = 0;
  for (const auto& entry : adapters.entries()) {
    if (entry.name.find("lora_") == std::string::npos) continue;
    EXPECT_NE(entry.name.find("vace_blocks.0."), std::string::npos) << entry.name;
    ++vace_adapters;
  }
  EXPECT_EQ(vace_adapters, 2u * 12u);  // A and B of the block's ten Linears, before_proj and after_proj
  // The VACE paper's start: a text-to-video model's weights (wan-tiny's, the
  // base of this config) under a fresh branch, the branch's adapters trained.
  wt::wan::save_weights(*wt::wan::WanModel(wt::wan::load_model_config(kTiny)), dir + "/t2v.safetensors");
  const auto from_t2v =
      train(1, dir + "/from-t2v", config, " --lora-rank 4 --trainable vace --init " + dir + "/t2v.safetensors");
  ASSERT_EQ(from_t2v.status, 0) << from_t2v.output;
  EXPECT_EQ(
      wt::testing::occurrences(from_t2v.output,
                               "init: " + dir + "/t2v.safetensors: " +
                                   std::to_string(wt::wan::parameter_shapes(wt::wan::load_model_config(kTiny)).size()) +
                                   " tensors of a text-to-video model loaded; the VACE "
                                   "branch's "),
      1u)
      << from_t2v.output;
  for (const auto& [model, extra, line] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {kTiny, " --lora-rank 4 --trainable vace",
            "option --trainable: vace trains a VACE model's VACE branch, and model config " + kTiny +
                " (t2v) has none"},
           {config, " --mode distill --teacher " + dir + "/one/model.safetensors --teacher-config " + config,
            "option --mode: distillation of a VACE model is not in wantrain yet (--teacher-config " + config +
                " (the teacher's) is vace, --model-config " + config + " is vace)"}}) {
    const auto refused = train(1, dir + "/refused", model, extra);
    EXPECT_EQ(refused.status, 2) << refused.output;
    EXPECT_EQ(wt::testing::occurrences(refused.output, line), 1u) << refused.output;
  }
  // wansample from the data: the sample's own control, its reference frame dropped.
  const auto sample = launch(std::string(WANTRAIN_WANSAMPLE) + " --checkpoint " + dir + "/one/latest --data " + data +
                             " --index 1 --steps 2 --out " + dir + "/sample.h5 --vae " + s.vae + " --vae-config " +
                             s.vae_config + " --video " + dir + "/sample.mp4");
  ASSERT_EQ(sample.status, 0) << sample.output;
  EXPECT_EQ(read_shard(dir + "/sample.h5").latents.front().sizes(), latents.sizes());
  EXPECT_EQ(wt::media::probe_media(dir + "/sample.mp4").frames(), 5);
}

// walk.mp4 and run.mp4 (9 frames) with their control videos and captions
// in DIR/clips, which it returns.
std::string clips_with_controls(const std::string& dir) {
  const std::string clips = dir + "/clips";
  fs::create_directories(clips);
  const std::string ff = "ffmpeg -hide_banner -loglevel error -y -f lavfi -i ";
  for (const auto& [name, source] : {std::pair{"walk.mp4", "testsrc2=size=80x48:rate=16 -frames:v 9 -pix_fmt yuv420p"},
                                     {"walk.control.mp4", "mandelbrot=size=64x64:rate=16 -frames:v 9 -pix_fmt yuv420p"},
                                     {"run.mp4", "testsrc=size=48x48:rate=16 -frames:v 9 -pix_fmt yuv420p"},
                                     {"run.control.mp4", "testsrc2=size=64x64:rate=16 -frames:v 9 -pix_fmt yuv420p"}})
    run_ok(ff + source + " " + clips + "/" + name);
  for (const char* name : {"walk", "run"}) write_text(clips + "/" + name + ".txt", "a red ball rolls");
  return clips;
}

// A run's loss at step 2, from its metrics.jsonl (0 when it has none).
double second_step_loss(const std::string& metrics) {
  std::ifstream in(metrics);
  double loss = 0;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.contains("loss") && j.value("step", 0) == 2) loss = j["loss"].get<double>();
  }
  return loss;
}

// The /y `dataset` stores for walk (its sample 1, in listing order), which
// must be fun_control_y of clips/walk.control.mp4 and walk.mp4's first
// frame at 32 x 32 x 5 (Wan2.2-Fun's layout `with_mask`).
at::Tensor walks_fun_control_y(const Setup& s, const wt::data::Dataset& dataset, const std::string& clips,
                               bool with_mask) {
  const auto& shape = dataset.shape();
  auto latents = torch::empty({shape.channels, shape.frames, shape.height, shape.width});
  auto text = torch::empty({shape.text_len, shape.text_dim}, wt::data::scalar_type(shape.text));
  wt::data::SampleCondition stored;
  stored.y = torch::empty({shape.condition_channels, shape.frames, shape.height, shape.width});
  int32_t len = 0;
  wt::data::SampleReader(dataset).read(1, latents, text, len, &stored);
  const auto vae = wt::wan::open_video_vae(s.vae, s.vae_config);
  vae->eval();
  const auto clip = wt::wan::read_control_video(clips + "/walk.mp4", 5, 32, 32);
  const auto expected = wt::wan::fun_control_y(
      *vae, {wt::wan::read_control_video(clips + "/walk.control.mp4", 5, 32, 32), clip.select(1, 0), {}}, 5, 32, 32,
      with_mask);
  EXPECT_LT((stored.y - expected).abs().max().item<double>(), 1e-5 * expected.abs().max().item<double>());
  return stored.y;
}

// Fun-Control data (VideoX-Fun's Wan2.1-Fun-Control): a clip with its
// control video beside it (walk.control.mp4), or named by a metadata.csv's
// control_video column; each sample's /y is fun_control_y of the control's
// frames that go with the clip's and the clip's first frame (its start
// picture). A clip without a control, a control shorter than the clip and a
// VACE mask are one line each. A Fun-Control model (in_dim 3 x 16) trains
// on it, 2 ranks = 1 rank; wansample --data samples with the sample's own
// condition, and a control video given with --data is one line.
TEST(Encode, FunControlVideosBecomeEachSamplesConditionAndAFunControlModelTrainsOnThem) {
  const auto& s = setup();
  ASSERT_TRUE(s.error.empty()) << s.error;
  const std::string dir = wt::testing::fresh("encode-fun-control"), clips = dir + "/clips";
  fs::create_directories(clips);
  const std::string ff = "ffmpeg -hide_banner -loglevel error -y -f lavfi -i ";
  for (const auto& [name, source] :
       {std::pair{"walk.mp4", "testsrc2=size=80x48:rate=16 -frames:v 9 -pix_fmt yuv420p"},
        {"walk.control.mp4", "mandelbrot=size=64x64:rate=16 -frames:v 9 -pix_fmt yuv420p"},
        {"run.mp4", "testsrc=size=48x48:rate=16 -frames:v 9 -pix_fmt yuv420p"},
        {"run.control.mp4", "testsrc2=size=64x64:rate=16 -frames:v 9 -pix_fmt yuv420p"},
        {"short.mp4", "testsrc2=size=80x48:rate=16 -frames:v 9 -pix_fmt yuv420p"},
        {"short.control.mp4", "mandelbrot=size=64x64:rate=16 -frames:v 3 -pix_fmt yuv420p"},
        {"bare.mp4", "testsrc2=size=80x48:rate=16 -frames:v 9 -pix_fmt yuv420p"},
        {"masked.mp4", "testsrc2=size=80x48:rate=16 -frames:v 9 -pix_fmt yuv420p"},
        {"masked.control.mp4", "mandelbrot=size=64x64:rate=16 -frames:v 9 -pix_fmt yuv420p"},
        {"masked.mask.mp4", "color=c=white:size=32x32:rate=16 -frames:v 9 -pix_fmt yuv420p"}}) {
    const auto job = launch(ff + source + " " + clips + "/" + name);
    ASSERT_EQ(job.status, 0) << name << ": " << job.output;
  }
  for (const char* name : {"walk", "run", "short", "bare", "masked"})
    write_text(clips + "/" + name + ".txt", "a red ball rolls");
  const std::string data = dir + "/data";
  const auto encoded =
      launch(wandata(encode_args(s, clips, data, "--frames 5 --condition fun-control --latent-dtype fp32")));
  ASSERT_EQ(encoded.status, 0) << encoded.output;
  for (const std::string& line : std::vector<std::string>{
           "clips/short.mp4: " + clips +
               "/short.control.mp4: 3 frames, shorter than the clip's 5 (its frame k goes with the clip's frame k)",
           "clips/bare.mp4: no control video (NAME.control.mp4 beside it, or the listing's control_video)",
           "clips/masked.mp4: " + clips +
               "/masked.mask.mp4: a VACE control's mask (a Fun-Control model reads the control video alone)"})
    EXPECT_NE(encoded.output.find(line), std::string::npos) << line << "\n" << encoded.output;
  const auto dataset = wt::data::Dataset::open(data);
  ASSERT_EQ(dataset.size(), 2) << encoded.output;  // run and walk
  const auto& shape = dataset.shape();
  ASSERT_EQ(shape.condition_channels, 2 * 16);
  auto latents = torch::empty({shape.channels, shape.frames, shape.height, shape.width});
  auto text = torch::empty({shape.text_len, shape.text_dim}, wt::data::scalar_type(shape.text));
  int32_t len = 0;
  wt::data::SampleCondition stored;
  stored.y = walks_fun_control_y(s, dataset, clips, /*with_mask=*/false);
  EXPECT_EQ(stored.y.narrow(0, 16, 16).narrow(1, 1, shape.frames - 1).abs().max().item<double>(),
            0.0);  // start: frame 0 only
  // The same item from a metadata.csv's control_video column: the same sample.
  write_text(dir + "/metadata.csv",
             "video,prompt,control_video\nclips/walk.mp4,a red ball rolls,clips/walk.control.mp4\n");
  run_ok(wandata(
      encode_args(s, dir + "/metadata.csv", dir + "/csv", "--frames 5 --condition fun-control --latent-dtype fp32")));
  wt::data::SampleCondition listed;
  listed.y = torch::empty_like(stored.y);
  wt::data::SampleReader(wt::data::Dataset::open(dir + "/csv")).read(0, latents, text, len, &listed);
  EXPECT_TRUE(torch::equal(listed.y, stored.y));

  // A Fun-Control model of wan-tiny's width (no CLIP branch: none was
  // encoded): 2 steps on 1 and on 2 ranks with the control and the start
  // frame dropped half the time, the same loss; without the drops, another.
  const std::string config = dir + "/fun-control.json";
  write_text(config, R"({"model_type": "i2v", "dim": 64, "ffn_dim": 128, "num_heads": 4, "num_layers": 2,
    "freq_dim": 256, "text_dim": 64, "text_len": 16, "patch_size": [1, 2, 2], "in_dim": 48, "out_dim": 16,
    "eps": 1e-6, "qk_norm": true, "cross_attn_norm": true})");
  auto train = [&](int ranks, const std::string& out, const std::string& model, const std::string& extra) {
    return launch(wt::testing::mpi_command(ranks, WANTRAIN_WANTRAIN,
                                           "--model-config " + model + " --data " + data + " --output-dir " + out +
                                               " --threads 1 --backend mpi --batch-size " + std::to_string(2 / ranks) +
                                               " --steps 2 --lr 1e-3" + extra));
  };
  const std::string drops = " --control-drop 0.5 --start-drop 0.5 --seed 3";
  const auto one = train(1, dir + "/one", config, drops), two = train(2, dir + "/two", config, drops);
  ASSERT_EQ(one.status, 0) << one.output;
  ASSERT_EQ(two.status, 0) << two.output;
  EXPECT_NE(one.output.find("i2v (Fun-Control)"), std::string::npos) << one.output;
  const double loss_one = second_step_loss(dir + "/one/metrics.jsonl"),
               loss_two = second_step_loss(dir + "/two/metrics.jsonl");
  EXPECT_GT(loss_one, 0.0) << one.output;
  EXPECT_NEAR(loss_two, loss_one, 1e-5 * loss_one);
  const auto kept = train(1, dir + "/kept", config, " --seed 3");
  ASSERT_EQ(kept.status, 0) << kept.output;
  EXPECT_GT(std::abs(second_step_loss(dir + "/kept/metrics.jsonl") - loss_one), 1e-6 * loss_one);
  const auto t2v = train(1, dir + "/t2v", kTiny, " --control-drop 0.1");
  EXPECT_EQ(t2v.status, 2) << t2v.output;
  EXPECT_EQ(wt::testing::occurrences(t2v.output, "option --control-drop: model config " + kTiny +
                                                     " (t2v) is not a Fun-Control model, whose control and start "
                                                     "frame it drops"),
            1u)
      << t2v.output;
  // wansample from the data: the sample's own condition.
  const std::string sample = std::string(WANTRAIN_WANSAMPLE) + " --checkpoint " + dir + "/one/latest --data " + data +
                             " --index 1 --steps 2 --out " + dir + "/sample.h5 --vae " + s.vae + " --vae-config " +
                             s.vae_config;
  const auto sampled = launch(sample + " --video " + dir + "/sample.mp4");
  ASSERT_EQ(sampled.status, 0) << sampled.output;
  EXPECT_EQ(read_shard(dir + "/sample.h5").latents.front().sizes(), latents.sizes());
  EXPECT_EQ(wt::media::probe_media(dir + "/sample.mp4").frames(), 5);
  const auto refused = launch(sample + " --control-video " + clips + "/walk.control.mp4");
  EXPECT_EQ(refused.status, 2) << refused.output;
  EXPECT_EQ(
      wt::testing::occurrences(
          refused.output, "option --control-video: with --prompt or --text (--data samples bring their own condition)"),
      1u)
      << refused.output;
}

// A V1.1 model's data (--condition fun-control-ref): /y is fun-control's
// [control, start] and then another frame of the clip (one of frames 1 to 4,
// alone through the VAE) in latent frame 0 as the reference; /clip_fea the
// start's CLIP features, then that frame's. A V1.1 model (ref_conv, CLIP
// branch) trains on them, 2 ranks = 1 rank with the reference shown and
// dropped half the time, and showing the reference changes the step; a V1.0
// model and --ref-drop without such data are one line each; wansample
// --data shows the start.
TEST(Encode, FunControlReferenceDataHoldAnotherFrameAndAV11ModelTrainsOnThem) {
  const auto& s = setup();
  ASSERT_TRUE(s.error.empty()) << s.error;
  const std::string dir = wt::testing::fresh("encode-fun-control-ref"), clips = clips_with_controls(dir);
  small_clip(dir + "/clip.safetensors");
  auto clip = wt::wan::load_clip_vision(dir + "/clip.safetensors");  // as wandata reads it
  const std::string options = "--frames 5 --latent-dtype fp32 --clip " + dir + "/clip.safetensors --condition ";
  const std::string data = dir + "/data", plain = dir + "/plain";
  const auto encoded = launch(wandata(encode_args(s, clips, data, options + "fun-control-ref")));
  ASSERT_EQ(encoded.status, 0) << encoded.output;
  EXPECT_NE(encoded.output.find("/y of 48 channels (the control video's latents and the first frame's, then another "
                                "frame's as the reference) and /clip_fea (10 tokens of 160"),
            std::string::npos)
      << encoded.output;
  run_ok(wandata(encode_args(s, clips, plain, options + "fun-control")));
  {
    std::ifstream record(data + "/encode.json");
    EXPECT_EQ(nlohmann::json::parse(record).value("condition", ""), "fun-control-ref");
  }
  const auto dataset = wt::data::Dataset::open(data), plain_dataset = wt::data::Dataset::open(plain);
  ASSERT_EQ(dataset.size(), 2);
  const auto& shape = dataset.shape();
  ASSERT_EQ(shape.condition_channels, 3 * 16);
  ASSERT_EQ(shape.clip_tokens, 2 * 5);
  const auto vae = wt::wan::open_video_vae(s.vae, s.vae_config);
  vae->eval();
  torch::NoGradGuard no_grad;
  for (int64_t i = 0; i < 2; ++i) {
    auto latents = torch::empty({shape.channels, shape.frames, shape.height, shape.width});
    auto text = torch::empty({shape.text_len, shape.text_dim}, wt::data::scalar_type(shape.text));
    int32_t len = 0;
    wt::data::SampleCondition with{torch::empty({48, shape.frames, shape.height, shape.width}),
                                   torch::empty({10, 160}, wt::data::scalar_type(shape.text))},
        without{torch::empty({32, shape.frames, shape.height, shape.width}),
                torch::empty({5, 160}, wt::data::scalar_type(shape.text))};
    wt::data::SampleReader(dataset).read(i, latents, text, len, &with);
    wt::data::SampleReader(plain_dataset).read(i, latents, text, len, &without);
    EXPECT_TRUE(torch::equal(with.y.narrow(0, 0, 32), without.y)) << "sample " << i;
    EXPECT_TRUE(torch::equal(with.clip_fea.narrow(0, 0, 5), without.clip_fea)) << "sample " << i;
    const auto reference = with.y.narrow(0, 32, 16);
    EXPECT_EQ(reference.narrow(1, 1, shape.frames - 1).abs().max().item<double>(), 0.0);
    // Which frame: the one whose picture latents and CLIP features these are.
    const auto frames = wt::wan::read_control_video(clips + (i == 0 ? "/run.mp4" : "/walk.mp4"), 5, 32, 32);
    int64_t found = -1;
    for (int64_t k = 0; k < 5; ++k) {
      const auto picture = wt::wan::picture_latents(*vae, frames.select(1, k), 32, 32);
      if ((reference.select(1, 0) - picture).abs().max().item<double>() < 1e-5 * picture.abs().max().item<double>())
        found = k;
    }
    ASSERT_GE(found, 1) << "sample " << i << ": another frame than the start";
    const auto features = wt::wan::image_clip_features(*clip, frames.select(1, found), {});
    EXPECT_LT((with.clip_fea.narrow(0, 5, 5) - features).abs().max().item<double>(),
              0x1.0p-8 * features.abs().max().item<double>())  // stored as the text is: bf16
        << "sample " << i;
  }

  // A V1.1 model of wan-tiny's width with the small CLIP branch: 2 steps on 1
  // and 2 ranks, the reference shown and dropped half the time.
  const std::string v11 = dir + "/v11.json", v10 = dir + "/v10.json";
  const std::string fields = R"("model_type": "i2v", "image_dim": 160, "image_tokens": 5, "dim": 64, "ffn_dim": 128,
    "num_heads": 4, "num_layers": 2, "freq_dim": 256, "text_dim": 64, "text_len": 16, "patch_size": [1, 2, 2],
    "in_dim": 48, "out_dim": 16, "eps": 1e-6, "qk_norm": true, "cross_attn_norm": true)";
  write_text(v11, "{" + fields + R"(, "add_ref_conv": true, "in_dim_ref_conv": 16})");
  write_text(v10, "{" + fields + "}");
  auto train = [&](int ranks, const std::string& out, const std::string& model, const std::string& on,
                   const std::string& extra) {
    return launch(wt::testing::mpi_command(ranks, WANTRAIN_WANTRAIN,
                                           "--model-config " + model + " --data " + on + " --output-dir " + out +
                                               " --threads 1 --backend mpi --batch-size " + std::to_string(2 / ranks) +
                                               " --steps 2 --lr 1e-3 --seed 3" + extra));
  };
  const std::string shown = " --ref-other-frame 0.5 --ref-drop 0.5";
  const auto one = train(1, dir + "/one", v11, data, shown), two = train(2, dir + "/two", v11, data, shown);
  ASSERT_EQ(one.status, 0) << one.output;
  ASSERT_EQ(two.status, 0) << two.output;
  const double loss_one = second_step_loss(dir + "/one/metrics.jsonl");
  EXPECT_GT(loss_one, 0.0);
  EXPECT_NEAR(second_step_loss(dir + "/two/metrics.jsonl"), loss_one, 1e-5 * loss_one);
  // Every sample shown its other frame, against every sample shown its start.
  const auto other = train(1, dir + "/other", v11, data, " --ref-other-frame 1");
  const auto start = train(1, dir + "/start", v11, data, " --ref-other-frame 0");
  ASSERT_EQ(other.status, 0) << other.output;
  ASSERT_EQ(start.status, 0) << start.output;
  const double loss_other = second_step_loss(dir + "/other/metrics.jsonl");
  EXPECT_GT(std::abs(second_step_loss(dir + "/start/metrics.jsonl") - loss_other), 1e-6 * loss_other)
      << "the reference frame shown changes the step";
  const auto old_model = train(1, dir + "/v10", v10, data, "");
  EXPECT_EQ(old_model.status, 2) << old_model.output;
  EXPECT_EQ(wt::testing::occurrences(old_model.output,
                                     "/y has 48 channels, the model reads 32 (the shards' hold a reference frame too, "
                                     "which a Fun-Control V1.1 model reads: add_ref_conv"),
            1u)
      << old_model.output;
  const auto no_reference = train(1, dir + "/no-reference", v11, plain, " --ref-drop 0.1");
  EXPECT_EQ(no_reference.status, 2) << no_reference.output;
  EXPECT_EQ(wt::testing::occurrences(no_reference.output,
                                     "option --ref-drop: drops the reference frame that a Fun-Control V1.1 model"),
            1u)
      << no_reference.output;
  // wansample from the data: the start shown.
  const auto sample = launch(std::string(WANTRAIN_WANSAMPLE) + " --checkpoint " + dir + "/one/latest --data " + data +
                             " --index 1 --steps 2 --out " + dir + "/sample.h5");
  ASSERT_EQ(sample.status, 0) << sample.output;
}

// Wan2.2-Fun's data (--condition fun-control-mask): /y is the control's
// latents, then the clip's first frame's i2v condition (its mask: latent
// frame 0 marked), as fun_control_y builds it with_mask; a Wan2.2-Fun model
// trains on it (1 rank = 2 ranks with the drops), Wan2.1-Fun-Control data
// are one line for it, and --clip is refused (Wan2.2-Fun reads no CLIP).
TEST(Encode, Wan22FunControlDataHoldTheStartsMaskAndAWan22FunModelTrainsOnThem) {
  const auto& s = setup();
  ASSERT_TRUE(s.error.empty()) << s.error;
  const std::string dir = wt::testing::fresh("encode-fun-control-mask"), clips = clips_with_controls(dir);
  const std::string data = dir + "/data", v21 = dir + "/v21";
  const auto encoded =
      launch(wandata(encode_args(s, clips, data, "--frames 5 --condition fun-control-mask --latent-dtype fp32")));
  ASSERT_EQ(encoded.status, 0) << encoded.output;
  EXPECT_EQ(wt::testing::occurrences(encoded.output, "condition fun-control-mask: /y of 36 channels"), 1u)
      << encoded.output;
  const auto dataset = wt::data::Dataset::open(data);
  ASSERT_EQ(dataset.size(), 2) << encoded.output;
  const auto& shape = dataset.shape();
  ASSERT_EQ(shape.condition_channels, 2 * 16 + 4);
  const auto mask = walks_fun_control_y(s, dataset, clips, /*with_mask=*/true).narrow(0, 16, 4);
  EXPECT_EQ(mask.select(1, 0).min().item<double>(), 1.0);  // latent frame 0 kept
  EXPECT_EQ(mask.narrow(1, 1, shape.frames - 1).abs().max().item<double>(), 0.0);

  const std::string config = dir + "/fun22.json";
  write_text(config, R"({"model_type": "i2v", "dim": 64, "ffn_dim": 128, "num_heads": 4, "num_layers": 2,
    "freq_dim": 256, "text_dim": 64, "text_len": 16, "patch_size": [1, 2, 2], "in_dim": 52, "out_dim": 16,
    "eps": 1e-6, "qk_norm": true, "cross_attn_norm": true, "add_ref_conv": true, "in_dim_ref_conv": 16})");
  auto train = [&](int ranks, const std::string& out, const std::string& from, const std::string& extra) {
    return launch(wt::testing::mpi_command(ranks, WANTRAIN_WANTRAIN,
                                           "--model-config " + config + " --data " + from + " --output-dir " + out +
                                               " --threads 1 --backend mpi --batch-size " + std::to_string(2 / ranks) +
                                               " --steps 2 --lr 1e-3 --log-every 1" + extra));
  };
  const std::string drops = " --control-drop 0.5 --start-drop 0.5 --seed 3";
  const auto one = train(1, dir + "/one", data, drops), two = train(2, dir + "/two", data, drops);
  ASSERT_EQ(one.status, 0) << one.output;
  ASSERT_EQ(two.status, 0) << two.output;
  EXPECT_NE(one.output.find("i2v (Wan2.2-Fun-Control)"), std::string::npos) << one.output;
  const auto a = wt::testing::train_runs::training_lines(dir + "/one"),
             b = wt::testing::train_runs::training_lines(dir + "/two");
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_NEAR(b[1]["loss"].get<double>(), a[1]["loss"].get<double>(), 1e-5 * a[1]["loss"].get<double>());

  run_ok(wandata(encode_args(s, clips, v21, "--frames 5 --condition fun-control --latent-dtype fp32")));
  const auto refused = train(1, dir + "/refused", v21, "");
  EXPECT_EQ(refused.status, 2) << refused.output;
  EXPECT_EQ(wt::testing::occurrences(refused.output,
                                     "/y has 32 channels, the model reads 36 (a Fun-Control "
                                     "model's: wandata encode --condition fun-control-mask)"),
            1u)
      << refused.output;
  const auto clip_refused = launch(wandata(encode_args(
      s, clips, dir + "/with-clip", "--frames 5 --condition fun-control-mask --clip " + dir + "/clip.safetensors")));
  EXPECT_EQ(clip_refused.status, 2) << clip_refused.output;
  EXPECT_EQ(wt::testing::occurrences(clip_refused.output,
                                     "option --clip: Wan2.2-Fun models (--condition "
                                     "fun-control-mask) read no CLIP features"),
            1u)
      << clip_refused.output;
}

// Wan2.2-Fun-5B-Control's data: --condition fun-control-mask through a
// Wan2.2 VAE of the release's 48 channels makes /y of 2 x 48 + 4 channels
// whose start latents are the clip's own latent frame 0 (the same picture
// through the same causal VAE: what training holds clean). A 5B-Control
// model trains on them with the start held (1 rank = 2 ranks, with start
// and control drops, its training sample drawn), and wansample --data holds
// the sample's start: the video's frame 0 is its start's latents.
TEST(Encode, Wan22Fun5BControlDataHoldTheStartAndTheModelTrainsAndSamplesWithIt) {
  const auto& s = setup();
  ASSERT_TRUE(s.error.empty()) << s.error;
  const std::string dir = wt::testing::fresh("encode-fun-control-5b"), clips = clips_with_controls(dir);
  const std::string vae_config = dir + "/vae22.json", vae = dir + "/vae22.safetensors", data = dir + "/data";
  write_text(vae_config, R"({"version": "2.2", "dim": 8, "dec_dim": 12, "z_dim": 48, "dim_mult": [1, 2, 2, 2],
    "num_res_blocks": 1, "temperal_downsample": [false, true, true]})");
  {
    torch::manual_seed(9);
    write_module(*wt::wan::make_video_vae(wt::wan::load_video_vae_config(vae_config)), vae);
  }
  auto args = encode_args(s, clips, data, "--frames 5 --condition fun-control-mask --latent-dtype fp32");
  const std::string wan21 = "--vae " + s.vae + " --vae-config " + s.vae_config;
  ASSERT_NE(args.find(wan21), std::string::npos);
  args.replace(args.find(wan21), wan21.size(), "--vae " + vae + " --vae-config " + vae_config);
  const auto encoded = launch(wandata(args));
  ASSERT_EQ(encoded.status, 0) << encoded.output;
  EXPECT_EQ(wt::testing::occurrences(encoded.output, "condition fun-control-mask: /y of 100 channels"), 1u)
      << encoded.output;
  const auto dataset = wt::data::Dataset::open(data);
  ASSERT_EQ(dataset.size(), 2) << encoded.output;
  const auto& shape = dataset.shape();
  ASSERT_EQ(shape.channels, 48);
  ASSERT_EQ(shape.condition_channels, 100);
  std::vector<at::Tensor> starts;
  for (int64_t i = 0; i < dataset.size(); ++i) {
    auto latents = torch::empty({shape.channels, shape.frames, shape.height, shape.width});
    auto text = torch::empty({shape.text_len, shape.text_dim}, wt::data::scalar_type(shape.text));
    wt::data::SampleCondition stored;
    stored.y = torch::empty({shape.condition_channels, shape.frames, shape.height, shape.width});
    int32_t len = 0;
    wt::data::SampleReader(dataset).read(i, latents, text, len, &stored);
    const auto start = stored.y.narrow(0, 52, 48).select(1, 0);
    EXPECT_EQ(stored.y.narrow(0, 48, 4).select(1, 0).min().item<double>(), 1.0);  // the mask keeps frame 0
    EXPECT_LT((start - latents.select(1, 0)).abs().max().item<double>(), 1e-5 * start.abs().max().item<double>())
        << "sample " << i;
    starts.push_back(start);
  }

  const std::string config = dir + "/fun5b.json";
  write_text(config, R"({"model_type": "ti2v", "dim": 64, "ffn_dim": 128, "num_heads": 4, "num_layers": 2,
    "freq_dim": 256, "text_dim": 64, "text_len": 16, "patch_size": [1, 2, 2], "in_dim": 148, "out_dim": 48,
    "eps": 1e-6, "qk_norm": true, "cross_attn_norm": true, "add_ref_conv": true, "in_dim_ref_conv": 48})");
  auto train = [&](int ranks, const std::string& out, const std::string& extra = "") {
    return launch(wt::testing::mpi_command(
        ranks, WANTRAIN_WANTRAIN,
        "--model-config " + config + " --data " + data + " --output-dir " + out +
            " --threads 1 --backend mpi --batch-size " + std::to_string(2 / ranks) +
            " --steps 2 --lr 1e-3 --log-every 1 --control-drop 0.5 --start-drop 0.5 --seed 3 --sample-every 2 "
            "--sample-index 1 --sample-steps 2" +
            extra));
  };
  const auto one = train(1, dir + "/one"), two = train(2, dir + "/two");
  ASSERT_EQ(one.status, 0) << one.output;
  ASSERT_EQ(two.status, 0) << two.output;
  EXPECT_NE(one.output.find("i2v (Wan2.2-Fun-5B-Control: a start held as frame 0)"), std::string::npos) << one.output;
  const double loss_one = second_step_loss(dir + "/one/metrics.jsonl");
  EXPECT_GT(loss_one, 0.0);
  EXPECT_NEAR(second_step_loss(dir + "/two/metrics.jsonl"), loss_one, 1e-5 * loss_one);
  EXPECT_TRUE(fs::exists(dir + "/one/samples/step-00000002.png")) << one.output;

  const auto first_frame = train(1, dir + "/first-frame", " --condition first-frame");
  EXPECT_EQ(first_frame.status, 2) << first_frame.output;
  EXPECT_EQ(wt::testing::occurrences(first_frame.output,
                                     "is Wan2.2-Fun-5B-Control, which holds each sample's start "
                                     "frame where its data show one"),
            1u)
      << first_frame.output;

  const auto sample = launch(std::string(WANTRAIN_WANSAMPLE) + " --checkpoint " + dir + "/one/latest --data " + data +
                             " --index 1 --steps 2 --out " + dir + "/sample.h5");
  ASSERT_EQ(sample.status, 0) << sample.output;
  const auto sampled = wt::testing::sampled_latents(dir + "/sample.h5");  // [C, F, H, W]
  EXPECT_TRUE(torch::equal(sampled.select(1, 0), starts[1])) << "the sample's frame 0 is its start's latents";
  EXPECT_GT((sampled.select(1, 1) - starts[1]).abs().max().item<double>(), 1e-3);
}
