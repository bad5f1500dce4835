// wandata encode: videos, images and captions -> a shard dataset of Wan VAE
// latents and umT5 embeddings (wan/dataset_encoder.hpp does the work; this
// file reads the options and loads the models). Runs under mpirun: every
// rank encodes its share of the shards.
#include <fmt/format.h>
#include <torch/torch.h>

#include <iostream>

#include "commands.hpp"
#include "wantrain/app/device_option.hpp"
#include "wantrain/app/float_dtype.hpp"
#include "wantrain/app/version.hpp"
#include "wantrain/distributed/device_placement.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/util/options.hpp"
#include "wantrain/util/reporter.hpp"
#include "wantrain/util/text.hpp"
#include "wantrain/wan/dataset_encoder.hpp"
#include "wantrain/wan/model/weights.hpp"
#include "wantrain/wan/vae/vae_weights.hpp"

namespace wt {
namespace {

struct EncodeConfig {
  std::string config_file, input, out, vae, vae_config,
      vae_dtype = "fp32", t5, t5_config, t5_dtype = "bf16", tokenizer, size = "832x480", caption_extension = ".txt",
      frame_extraction = "head", latent_dtype = "fp32", emb_dtype = "bf16", device = "auto";
  int64_t frames = 81, frame_stride = 1, frame_sample = 1, text_len = 512, items_per_shard = 16,
          max_pixels = int64_t(8192) * 8192, max_frames = 100000;
  double fps = 0;
  int decode_threads = 1, threads = 0;
  bool strict = false;
};

data::Stored stored(const std::string& name) {
  return name == "fp32" ? data::Stored::Float32 : name == "bf16" ? data::Stored::BFloat16 : data::Stored::Float16;
}

}  // namespace

int run_encode(distributed::World& world, int argc, char** argv) {
  EncodeConfig c;
  OptionSet options("wandata encode",
                    "--input FOLDER|LIST.csv|LIST.jsonl --out DIR --vae FILE --t5 FILE "
                    "--tokenizer PATH [options]");
  options.group("input")
      .standard_options(&c.config_file)
      .add("input", &c.input,
           "a folder of videos and images with sidecar captions (NAME.txt), a .csv with columns video or image and "
           "prompt (DiffSynth-Studio's metadata.csv), or a .jsonl of video_path or image_path and caption "
           "(musubi-tuner's); relative paths are relative to the list")
      .add("caption-extension", &c.caption_extension, "the sidecar captions' extension in a folder")
      .add("frames", &c.frames, "frames per clip, 4k + 1 (1 for images); latent frames 1 + k")
      .add("fps", &c.fps, "resample clips to this frame rate by their timestamps (Wan2.1: 16); 0 keeps the source's")
      .choice("frame-extraction", &c.frame_extraction, {"head", "slide", "uniform"},
              "which clips of a video: head (the first --frames), slide (one every --frame-stride frames), uniform "
              "(--frame-sample clips spread evenly)")
      .add("frame-stride", &c.frame_stride, "frames between clip starts, with slide")
      .add("frame-sample", &c.frame_sample, "clips per video, with uniform")
      .add("size", &c.size,
           "video WIDTHxHEIGHT, multiples of 16: each frame is scaled to cover it (area filter) and centre-cropped")
      .add("max-pixels", &c.max_pixels, "refuse a picture larger than this many pixels (checked before decoding)")
      .add("max-frames", &c.max_frames, "refuse a video of more frames than this")
      .add("decode-threads", &c.decode_threads, "FFmpeg decoder threads (frame threads)")
      .flag("strict", &c.strict, "fail on the first bad item instead of skipping it with a line");
  options.group("models")
      .add("vae", &c.vae, "Wan2.1 VAE weights: Wan2.1_VAE.pth, ComfyUI's safetensors or diffusers' AutoencoderKLWan")
      .add("vae-config", &c.vae_config, "VAE shape as JSON (the official constructor's keys); default Wan2.1's")
      .choice("vae-dtype", &c.vae_dtype, {"fp32", "bf16"},
              "VAE weights and compute: fp32 (bf16 shifts the latents, the first frame most)")
      .add("t5", &c.t5,
           "umT5 encoder weights: models_t5_umt5-xxl-enc-bf16.pth or Hugging Face UMT5EncoderModel safetensors")
      .add("t5-config", &c.t5_config, "umT5 shape as JSON (the official constructor's keys); default umT5-XXL")
      .choice("t5-dtype", &c.t5_dtype, {"bf16", "fp32"}, "umT5 weights and compute (the release is bf16)")
      .add("tokenizer", &c.tokenizer, "umT5's spiece.model, or the folder holding it (google/umt5-xxl)")
      .add("text-len", &c.text_len, "text tokens L: longer prompts are cut (counted in the summary)")
      .add("device", &c.device, "auto (CUDA when LibTorch sees one), cpu, cuda or cuda:N")
      .add("threads", &c.threads, "CPU threads for the models (0: LibTorch's default)");
  options.group("output")
      .add("out", &c.out, "the dataset folder (created; a run of the same settings goes on where it stopped)")
      .add("items-per-shard", &c.items_per_shard, "items per shard file; shard k is encoded by rank k mod N")
      .choice("latent-dtype", &c.latent_dtype, {"fp32", "bf16", "fp16"}, "how latents are stored")
      .choice("emb-dtype", &c.emb_dtype, {"bf16", "fp32", "fp16"},
              "how text embeddings are stored (umT5 outputs overflow fp16: bf16 keeps their range)");
  if (const auto outcome = options.parse(argc, argv); outcome != OptionSet::Outcome::Run) {
    if (world.is_root()) std::cout << app::help_or_version(outcome, options);
    return kExitOk;
  }
  for (const auto& [option, value] :
       {std::pair{"input", c.input}, {"out", c.out}, {"vae", c.vae}, {"t5", c.t5}, {"tokenizer", c.tokenizer}})
    if (value.empty()) throw UsageError(fmt::format("option --{}: required", option));
  for (const auto& [option, path] : {std::pair{"vae", c.vae}, {"t5", c.t5}})
    if (const auto why = unreadable_file_reason(path); !why.empty())
      throw UsageError(fmt::format("option --{}: {}: {}", option, path, why));
  const auto wh = parse_sizes(c.size, "WIDTHxHEIGHT", "832x480", "size");
  const int64_t width = wh[0], height = wh[1];
  if (c.fps < 0) throw UsageError("option --fps: must be 0 (the source's rate) or positive");
  if (c.frame_stride < 1 || c.frame_sample < 1)
    throw UsageError("options --frame-stride, --frame-sample: must be at least 1");
  if (c.max_pixels < 1 || c.max_frames < 1) throw UsageError("options --max-pixels, --max-frames: must be positive");
  if (c.text_len < 1) throw UsageError("option --text-len: must be at least 1");
  if (c.threads > 0) torch::set_num_threads(c.threads);

  wan::DatasetEncoderSettings s;
  s.listing = c.input;
  s.out = c.out;
  s.listing_options.caption_extension = c.caption_extension;
  s.selection.frames = c.frames;
  s.selection.fps = c.fps;
  s.selection.extraction = media::parse_frame_extraction(c.frame_extraction);
  s.selection.stride = c.frame_stride;
  s.selection.samples = c.frame_sample;
  s.size = {int(width), int(height)};
  s.limits = {c.max_pixels, c.max_frames};
  s.items_per_shard = c.items_per_shard;
  s.latent_dtype = stored(c.latent_dtype);
  s.emb_dtype = stored(c.emb_dtype);
  s.strict = c.strict;
  s.decode_threads = c.decode_threads;
  s.models_fingerprint =
      fmt::format("vae {} ({}, {}), t5 {} ({}, {}), tokenizer {}, text_len {}", c.vae,
                  c.vae_config.empty() ? "Wan2.1" : c.vae_config, c.vae_dtype, c.t5,
                  c.t5_config.empty() ? "umT5-XXL" : c.t5_config, c.t5_dtype, c.tokenizer, c.text_len);

  const auto chosen = distributed::choose_device(app::parse_device(c.device), "device");
  if (!chosen.warning.empty()) report_warning("{}", chosen.warning);
  wan::WanVae vae(nullptr);
  std::unique_ptr<wan::TextEncoder> text;
  world.agree([&] {
    const auto config = c.vae_config.empty() ? wan::VaeConfig{} : wan::load_vae_config(c.vae_config);
    const auto weights = wan::open_vae_weights(c.vae);
    vae = wan::WanVae(config, app::float_dtype(c.vae_dtype));
    wan::load_weights(*vae, weights);
    vae->to(chosen.device);
    vae->eval();
    text = std::make_unique<wan::TextEncoder>(
        wan::TextEncoderFiles{c.t5, c.t5_config, c.tokenizer, app::float_dtype(c.t5_dtype), c.text_len}, chosen.device);
  });
  if (world.is_root())
    report_info("wandata encode: {} -> {}: {} frames a clip at {}x{}, on {} rank{} ({})", c.input, c.out, c.frames,
                width, height, world.size(), world.size() == 1 ? "" : "s", chosen.device.str());

  const auto summary = wan::encode_dataset(s, vae, *text, world);
  if (world.is_root()) {
    std::string skipped;
    for (const auto& line : summary.skipped) skipped += "\n  " + line;
    std::cout << fmt::format(
        "wandata encode: {} items, {} samples in {} shard{} ({} kept from before), {} skipped, {} prompts cut at "
        "{} tokens; {} ({:.2f} samples/s; rank 0: VAE {:.1f} s, umT5 {:.1f} s, waiting for decoding {:.1f} s){}{}\n",
        summary.items, summary.samples, summary.shards, summary.shards == 1 ? "" : "s", summary.shards_kept,
        summary.skipped.size(), summary.truncated_prompts, c.text_len, format_duration(summary.seconds),
        summary.samples / std::max(summary.seconds, 1e-9), summary.vae_seconds, summary.text_seconds,
        summary.waiting_seconds, summary.skipped.empty() ? "" : "; skipped:", skipped);
  }
  return kExitOk;
}

}  // namespace wt
