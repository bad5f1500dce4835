// wandata encode: videos, images and captions -> a shard dataset of Wan VAE
// latents and umT5 embeddings (wan/encode/dataset_encoder.hpp does the work; this
// file reads the options and loads the models). Runs under mpirun: every
// rank encodes its share of the shards.
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <iostream>
#include <limits>
#include <optional>

#include "commands.hpp"
#include "wantrain/wan/encoders/clip_vision.hpp"
#include "wantrain/wan/encoders/t5_encoder.hpp"
#include "wantrain/app/device_option.hpp"
#include "wantrain/app/float_dtype.hpp"
#include "wantrain/app/version.hpp"
#include "wantrain/distributed/device_placement.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/media/buckets.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/util/options.hpp"
#include "wantrain/util/reporter.hpp"
#include "wantrain/util/text.hpp"
#include "wantrain/wan/encode/dataset_encoder.hpp"
#include "wantrain/wan/model/weights.hpp"
#include "wantrain/wan/plan/decode_memory.hpp"
#include "wantrain/wan/sample/vace_condition.hpp"
#include "wantrain/wan/vae/release_video.hpp"
#include "wantrain/wan/vae/video_vae.hpp"

namespace wt {
namespace {

// size, bucket_area, frames and bucket_step (0) left empty take the VAE's
// release (wan/vae/release_video.hpp) once --vae is read.
struct EncodeConfig {
  std::string config_file, input, out, vae, vae_config,
      vae_dtype = "fp32", vae_tiling = "off", t5, t5_config, t5_dtype = "bf16", tokenizer, size, buckets, bucket_area,
      frames, frame_buckets = "longest", caption_extension = ".txt", frame_extraction = "head", latent_dtype = "fp32",
      emb_dtype = "bf16", device = "auto", condition = "none", clip, clip_dtype = "fp32";
  int64_t frame_stride = 1, frame_sample = 1, text_len = 512, items_per_shard = 16, bucket_step = 0,
          max_pixels = int64_t(8192) * 8192, max_frames = 100000;
  double fps = 0;
  int decode_threads = 1, threads = 0;
  bool strict = false, bucket_no_upscale = false;
};

data::Stored stored(const std::string& name) {
  return name == "fp32" ? data::Stored::Float32 : name == "bf16" ? data::Stored::BFloat16 : data::Stored::Float16;
}

// --frames: one clip length, or the frame buckets, each 4k + 1 (checked by
// wan::check_buckets), in any order.
std::vector<int64_t> parse_frames(const std::string& text) {
  std::vector<int64_t> frames;
  for (const auto& part : split_list(text)) {
    const bool digits = !part.empty() && part.size() <= 7 && part.find_first_not_of("0123456789") == std::string::npos;
    if (!digits)
      throw UsageError(
          fmt::format("option --frames: '{}' is not a clip length or a list of them, e.g. 81 or "
                      "1,17,33,81",
                      text));
    frames.push_back(std::stoll(part));
  }
  if (frames.empty()) throw UsageError("option --frames: no clip length, e.g. 81 or 1,17,33,81");
  std::sort(frames.begin(), frames.end());
  if (const auto twice = std::adjacent_find(frames.begin(), frames.end()); twice != frames.end())
    throw UsageError(fmt::format("option --frames: {} is listed twice", *twice));
  return frames;
}

// The picture sizes: --size alone (one, today's fixed shape), or the
// resolution buckets of --buckets: `auto` (the maximal sizes within
// --bucket-area, sides multiples of --bucket-step) or a list. `vae`: the
// VAE named in the check of --bucket-step, whose `multiple` it must be.
std::vector<media::FrameSize> parse_sizes_options(const EncodeConfig& c, bool size_given, const std::string& vae,
                                                  int64_t multiple) {
  auto size_of = [](const std::string& text, const char* option) {
    const auto wh = parse_sizes(text, "WIDTHxHEIGHT", "832x480", option);
    return media::FrameSize{int(wh[0]), int(wh[1])};
  };
  if (c.buckets.empty()) return {size_of(c.size, "size")};
  if (size_given) throw UsageError("option --size: not with --buckets (the buckets are the sizes)");
  if (c.bucket_step < multiple || c.bucket_step % multiple)
    throw UsageError(
        fmt::format("option --bucket-step: {} is not a multiple of {} (the {}'s {}, then the DiT's 2x2 "
                    "patches)",
                    c.bucket_step, multiple, vae, multiple / 2));
  if (c.buckets == "auto") {
    const auto area = size_of(c.bucket_area, "bucket-area");
    if (int64_t(area.width) * area.height > c.max_pixels)
      throw UsageError(fmt::format("option --bucket-area: {} is more pixels than any picture taken (--max-pixels {})",
                                   c.bucket_area, c.max_pixels));
    auto sizes = media::auto_resolution_buckets(int64_t(area.width) * area.height, int(c.bucket_step));
    if (sizes.empty())
      throw UsageError(fmt::format("option --bucket-area: {} pixels hold no bucket of {}x{} or more", c.bucket_area,
                                   c.bucket_step, c.bucket_step));
    return sizes;
  }
  std::vector<media::FrameSize> sizes;
  for (const auto& part : split_list(c.buckets)) {
    const auto size = size_of(part, "buckets");
    if (size.width % c.bucket_step || size.height % c.bucket_step)
      throw UsageError(fmt::format("option --buckets: {} is not multiples of --bucket-step {}", part, c.bucket_step));
    for (const auto& other : sizes)
      if (other.width == size.width && other.height == size.height)
        throw UsageError(fmt::format("option --buckets: {} is listed twice", part));
    sizes.push_back(size);
  }
  return sizes;
}

std::string describe_sizes(const EncodeConfig& c, const wan::EncodeBuckets& b) {
  if (c.buckets.empty()) return fmt::format("{}x{}", b.sizes[0].width, b.sizes[0].height);
  return fmt::format("{} size{} ({}, nearest aspect ratio{})", b.sizes.size(), b.sizes.size() == 1 ? "" : "s",
                     c.buckets == "auto" ? fmt::format("auto within {} pixels", c.bucket_area) : c.buckets,
                     b.no_upscale ? ", never enlarged" : "");
}

// wandata encode's options, declared once: --help, the INI file and the parser read this table.
void declare_encode_options(OptionSet& options, EncodeConfig& c) {
  options.group("input")
      .standard_options(&c.config_file)
      .add("input", &c.input,
           "a folder of videos and images with sidecar captions (NAME.txt), a .csv with columns video or image and "
           "prompt (DiffSynth-Studio's metadata.csv), or a .jsonl of video_path or image_path and caption "
           "(musubi-tuner's); relative paths are relative to the list")
      .add("caption-extension", &c.caption_extension, "the sidecar captions' extension in a folder")
      .add("frames", &c.frames,
           "frames per clip, 4k + 1 (latent frames 1 + k; default the release's: 81 with Wan2.1's VAE, 121 with "
           "Wan2.2's); or frame buckets, e.g. 1,17,33,81: a video gives clips "
           "of the longest listed length it fills (--frame-buckets). With a list or --buckets an image is a 1-frame "
           "sample; with one length, only when it is 1")
      .choice("frame-buckets", &c.frame_buckets, {"longest", "all"},
              "with a --frames list: clips of the longest length a video fills, or of every length it fills")
      .add("fps", &c.fps,
           "resample clips to this frame rate by their timestamps (the releases: 16 for Wan2.1 and A14B, 24 for "
           "TI2V-5B); 0 keeps the source's")
      .choice("frame-extraction", &c.frame_extraction, {"head", "slide", "uniform"},
              "which clips of a video: head (the first --frames), slide (one every --frame-stride frames), uniform "
              "(--frame-sample clips spread evenly)")
      .add("frame-stride", &c.frame_stride, "frames between clip starts, with slide")
      .add("frame-sample", &c.frame_sample, "clips per video, with uniform")
      .add("size", &c.size,
           "WIDTHxHEIGHT of every sample, multiples of 16 (Wan2.1's VAE) or 32 (Wan2.2's): each frame is scaled to "
           "cover it (area filter) and centre-cropped (without --buckets; default the release's: 832x480 with "
           "Wan2.1's VAE, 1280x704 with Wan2.2's)")
      .add("buckets", &c.buckets,
           "resolution buckets: auto (every maximal size within --bucket-area, aspect 1:4 to 4:1) or a list, e.g. "
           "832x480,480x832,624x624; each item goes to the one nearest its aspect ratio, scaled to cover it and "
           "centre-cropped")
      .add("bucket-area", &c.bucket_area,
           "with --buckets auto: the pixel budget WIDTHxHEIGHT of a bucket (default the release's size: 832x480 with "
           "Wan2.1's VAE, 1280x704 with Wan2.2's)")
      .add("bucket-step", &c.bucket_step,
           "bucket sides are multiples of this (default the VAE's: 16 for Wan2.1's, its stride 8 times the DiT's "
           "2x2 patches; 32 for Wan2.2's)")
      .flag("bucket-no-upscale", &c.bucket_no_upscale,
            "with --buckets: an item smaller than its bucket gets a bucket of its own size (sides rounded down to "
            "--bucket-step; scaled down to the bucket's area if larger) instead of being enlarged")
      .add("max-pixels", &c.max_pixels, "refuse a picture larger than this many pixels (checked before decoding)")
      .add("max-frames", &c.max_frames, "refuse a video of more frames than this")
      .add("decode-threads", &c.decode_threads, "FFmpeg decoder threads (frame threads)")
      .flag("strict", &c.strict, "fail on the first bad item instead of skipping it with a line");
  options.group("models")
      .add("vae", &c.vae,
           "VAE weights, Wan2.1's or Wan2.2's (told apart by their tensors): Wan2.1_VAE.pth, Wan2.2_VAE.pth, "
           "ComfyUI's safetensors or diffusers' AutoencoderKLWan (Wan2.1)")
      .add("vae-config", &c.vae_config,
           "VAE shape as JSON (the official constructor's keys); default the released shape of the VAE --vae holds")
      .choice("vae-dtype", &c.vae_dtype, {"fp32", "bf16"},
              "VAE weights and compute: fp32 (bf16 shifts the latents, the first frame most)")
      .add("vae-tiling", &c.vae_tiling,
           "off|auto|WxH: encode the frames in tiles of WxH pixels, as diffusers' enable_tiling (auto: 256x256 "
           "tiles when the largest size's whole-frame pass would not fit the smallest rank's device beside the "
           "VAE); off by default, so that a dataset's latents do not depend on the machine")
      .add("t5", &c.t5,
           "umT5 encoder weights: models_t5_umt5-xxl-enc-bf16.pth or Hugging Face UMT5EncoderModel safetensors")
      .add("t5-config", &c.t5_config, "umT5 shape as JSON (the official constructor's keys); default umT5-XXL")
      .choice("t5-dtype", &c.t5_dtype, {"bf16", "fp32"}, "umT5 weights and compute (the release is bf16)")
      .add("tokenizer", &c.tokenizer, "umT5's spiece.model, or the folder holding it (google/umt5-xxl)")
      .add("text-len", &c.text_len, "text tokens L: longer prompts are cut (counted in the summary)")
      .choice("condition", &c.condition,
              {"none", "i2v", "flf2v", "vace", "fun-control", "fun-control-ref", "fun-control-mask"},
              "image-to-video data: store each sample's condition /y, the first frame (i2v) or the first and last "
              "(flf2v) encoded as Wan's image2video.py does, and with --clip their CLIP features /clip_fea; vace: "
              "each sample's VACE context /vace_context from the item's control video, mask and reference pictures "
              "(NAME.control.mp4, NAME.mask.mp4, NAME.ref.png beside NAME.mp4, or the listing's vace_video, "
              "vace_video_mask and vace_reference_image), as Wan2.1's vace.py encodes them; fun-control: /y from "
              "the item's control video (NAME.control.mp4, or the listing's control_video) and the clip's first "
              "frame, and with --clip the first frame's CLIP features, as VideoX-Fun's Wan2.1-Fun-Control reads "
              "them; fun-control-ref: the same with another frame of each clip as a reference after the start "
              "(and its CLIP features), for a V1.1 model trained as VideoX-Fun's --control_ref_image random; "
              "fun-control-mask: Wan2.2-Fun's /y, the control video's latents then the first frame's mask and "
              "latents (no CLIP)")
      .add("clip", &c.clip,
           "CLIP image encoder for Wan2.1 I2V/FLF2V and Wan2.1-Fun-Control "
           "(models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth or "
           "safetensors of its names, ComfyUI's clip_vision_h.safetensors, or a CLIPVisionModel folder: a diffusers "
           "pipeline's image_encoder/ or root); Wan2.2's I2V reads no CLIP features")
      .choice("clip-dtype", &c.clip_dtype, {"fp32", "bf16"}, "CLIP weights and compute")
      .add("device", &c.device, "auto (CUDA when LibTorch sees one), cpu, cuda or cuda:N")
      .add("threads", &c.threads, "CPU threads for the models (0: LibTorch's default)");
  options.group("output")
      .add("out", &c.out, "the dataset folder (created; a run of the same settings goes on where it stopped)")
      .add("items-per-shard", &c.items_per_shard, "items per shard file; shard k is encoded by rank k mod N")
      .choice("latent-dtype", &c.latent_dtype, {"fp32", "bf16", "fp16"}, "how latents are stored")
      .choice("emb-dtype", &c.emb_dtype, {"bf16", "fp32", "fp16"},
              "how text embeddings are stored (umT5 outputs overflow fp16: bf16 keeps their range)");
}

// The options into the encoder's typed settings.
wan::DatasetEncoderSettings encoder_settings(const EncodeConfig& c, const wan::EncodeBuckets& buckets) {
  wan::DatasetEncoderSettings s;
  s.listing = c.input;
  s.out = c.out;
  s.listing_options.caption_extension = c.caption_extension;
  s.selection.fps = c.fps;
  s.selection.extraction = media::parse_frame_extraction(c.frame_extraction);
  s.selection.stride = c.frame_stride;
  s.selection.samples = c.frame_sample;
  s.buckets = buckets;
  s.limits = {c.max_pixels, c.max_frames};
  s.items_per_shard = c.items_per_shard;
  s.latent_dtype = stored(c.latent_dtype);
  s.emb_dtype = stored(c.emb_dtype);
  s.strict = c.strict;
  s.condition_images = c.condition == "i2v" ? 1 : c.condition == "flf2v" ? 2 : 0;
  s.vace = c.condition == "vace";
  s.fun_control = c.condition == "fun-control" || c.condition == "fun-control-ref" || c.condition == "fun-control-mask";
  s.fun_control_mask = c.condition == "fun-control-mask";
  s.fun_control_reference = c.condition == "fun-control-ref";
  s.listing_options.control_files = s.vace || s.fun_control;
  s.decode_threads = c.decode_threads;
  s.models_fingerprint =
      fmt::format("vae {} ({}, {}), t5 {} ({}, {}), tokenizer {}, text_len {}", c.vae,
                  c.vae_config.empty() ? "Wan2.1" : c.vae_config, c.vae_dtype, c.t5,
                  c.t5_config.empty() ? "umT5-XXL" : c.t5_config, c.t5_dtype, c.tokenizer, c.text_len);
  if (!c.clip.empty()) s.models_fingerprint += fmt::format(", clip {} ({})", c.clip, c.clip_dtype);

  return s;
}

// The VAE's tiles: --vae-tiling's, or with auto the default tiles when the
// largest size's whole frame would not fit the device of the rank with the
// least memory beside the VAE's weights (the decode's per-pixel figure stands
// in for the encode's), the same on every rank.
std::optional<wan::VaeTiling> encode_tiling(const distributed::World& world, const wan::VaeTilingChoice& choice,
                                            const EncodeConfig& c, const wan::VideoVaeConfig& vae,
                                            const wan::EncodeBuckets& buckets, const c10::Device& device) {
  media::FrameSize largest{0, 0};
  for (const auto& size : buckets.sizes)
    if (size.width * size.height > largest.width * largest.height) largest = size;
  const auto dtype = app::float_dtype(c.vae_dtype);
  double mine = 0;
  world.agree([&] { mine = wan::memory_beside_vae(device, c.vae, dtype); });
  double available = std::numeric_limits<double>::infinity();
  for (const auto& text : world.all_gather(fmt::format("{:.17g}", mine), "all_gather (each rank's memory for the VAE)"))
    available = std::min(available, std::stod(text));
  std::optional<wan::VaeTiling> tiling;
  world.agree(
      [&] { tiling = wan::decode_tiling(choice, vae, dtype, largest.width, largest.height, available, "vae_tiling"); });
  return tiling;
}

// Rank 0's summary: the totals, each bucket's shape and samples, then the skipped items.

void print_summary(const EncodeConfig& c, const wan::DatasetEncoderSummary& summary) {
  std::string lines;
  for (const auto& b : summary.buckets)
    lines += fmt::format("\n  {} frame{} at {}x{} (latents {}x{}x{}x{}): {} sample{} in {} shard{}", b.bucket.frames,
                         b.bucket.frames == 1 ? "" : "s", b.bucket.size.width, b.bucket.size.height, b.shape.channels,
                         b.shape.frames, b.shape.height, b.shape.width, b.samples, b.samples == 1 ? "" : "s", b.shards,
                         b.shards == 1 ? "" : "s");
  if (!summary.skipped.empty()) lines += "\nskipped:";
  for (const auto& line : summary.skipped) lines += "\n  " + line;
  std::cout << fmt::format(
      "wandata encode: {} items, {} samples in {} shard{} ({} kept from before), {} skipped, {} prompts cut at "
      "{} tokens; {} ({:.2f} samples/s; rank 0: VAE {:.1f} s, umT5 {:.1f} s, waiting for decoding {:.1f} s); "
      "{} bucket{}:{}\n",
      summary.items, summary.samples, summary.shards, summary.shards == 1 ? "" : "s", summary.shards_kept,
      summary.skipped.size(), summary.truncated_prompts, c.text_len, format_duration(summary.seconds),
      summary.samples / std::max(summary.seconds, 1e-9), summary.vae_seconds, summary.text_seconds,
      summary.waiting_seconds, summary.buckets.size(), summary.buckets.size() == 1 ? "" : "s", lines);
}

}  // namespace

int run_encode(distributed::World& world, int argc, char** argv) {
  EncodeConfig c;
  OptionSet options("wandata encode",
                    "--input FOLDER|LIST.csv|LIST.jsonl --out DIR --vae FILE --t5 FILE "
                    "--tokenizer PATH [options]");
  declare_encode_options(options, c);
  if (const auto outcome = options.parse(argc, argv); outcome != OptionSet::Outcome::Run) {
    if (world.is_root()) std::cout << app::help_or_version(outcome, options);
    return kExitOk;
  }
  for (const auto& [option, value] :
       {std::pair{"input", c.input}, {"out", c.out}, {"vae", c.vae}, {"t5", c.t5}, {"tokenizer", c.tokenizer}})
    if (value.empty()) throw UsageError(fmt::format("option --{}: required", option));
  if (!c.clip.empty() && (c.condition == "none" || c.condition == "vace" || c.condition == "fun-control-mask"))
    throw UsageError(
        c.condition == "fun-control-mask"
            ? "option --clip: Wan2.2-Fun models (--condition fun-control-mask) read no CLIP features"
            : "option --clip: the CLIP features are of an image condition: give --condition i2v, flf2v, fun-control "
              "or fun-control-ref");
  for (const auto& [option, path] : {std::pair{"vae", wan::vae_weights_file(c.vae)},
                                     {"t5", wan::t5_weights_file(c.t5)},
                                     {"clip", wan::clip_weights_file(c.clip)}})
    if (const auto why = path.empty() ? std::string() : unreadable_file_reason(path); !why.empty())
      throw UsageError(fmt::format("option --{}: {}: {}", option, path, why));
  auto given = [&](const std::string& name) {
    for (const auto& r : options.resolved())
      if (r.name == name) return r.source != "default";
    return false;
  };
  // The VAE's kind (read from its tensors' names and shapes, nothing loaded
  // yet) sets the defaults: the release's video, and sizes in its multiple.
  const auto vae_config = wan::video_vae_config(c.vae, c.vae_config);
  const auto release = wan::release_video(vae_config);
  const std::string vae_name = std::string(wan::vae_version_name(vae_config.version)) + " VAE";
  if (c.size.empty()) c.size = release.size_text();
  if (c.bucket_area.empty()) c.bucket_area = release.size_text();
  if (c.frames.empty()) c.frames = std::to_string(release.frames);
  if (!given("bucket-step")) c.bucket_step = release.size_multiple;
  wan::EncodeBuckets buckets;
  buckets.sizes = parse_sizes_options(c, given("size"), vae_name, release.size_multiple);
  buckets.frames = parse_frames(c.frames);
  buckets.choice = c.frame_buckets == "all" ? media::FrameBucketChoice::All : media::FrameBucketChoice::Longest;
  buckets.bucketed = !c.buckets.empty() || buckets.frames.size() > 1;
  buckets.no_upscale = c.bucket_no_upscale;
  buckets.step = int(c.bucket_step);
  for (const char* option : {"bucket-area", "bucket-step", "bucket-no-upscale"})
    if (given(option) && (c.buckets.empty() || (std::string(option) == "bucket-area" && c.buckets != "auto")))
      throw UsageError(fmt::format("option --{}: only with --buckets{}", option,
                                   std::string(option) == "bucket-area" ? " auto" : ""));
  set_option_names(options.setting_names({{"sizes", c.buckets.empty() ? "size" : "buckets"}, {"step", "bucket-step"}}));
  wan::check_buckets(buckets, release.size_multiple);
  if (c.items_per_shard < 1) throw UsageError("option --items-per-shard: must be at least 1");
  if (c.fps < 0) throw UsageError("option --fps: must be 0 (the source's rate) or positive");
  if (c.frame_stride < 1 || c.frame_sample < 1)
    throw UsageError("options --frame-stride, --frame-sample: must be at least 1");
  if (c.max_pixels < 1 || c.max_frames < 1) throw UsageError("options --max-pixels, --max-frames: must be positive");
  if (c.text_len < 1) throw UsageError("option --text-len: must be at least 1");
  if (c.threads > 0) torch::set_num_threads(c.threads);
  const auto tiling_choice = wan::VaeTilingChoice::parse(c.vae_tiling);  // a typo costs no VAE load
  const wan::DatasetEncoderSettings s = encoder_settings(c, buckets);
  const auto chosen = distributed::choose_device(app::parse_device(c.device), "device");
  if (!chosen.warning.empty()) report_warning("{}", chosen.warning);
  std::shared_ptr<wan::VideoVae> vae;
  wan::ClipVision clip(nullptr);
  std::unique_ptr<wan::TextEncoder> text;
  world.agree([&] {
    vae = wan::open_video_vae(c.vae, vae_config, app::float_dtype(c.vae_dtype));
    vae->to(chosen.device);
    vae->eval();
    if (!c.clip.empty()) clip = wan::load_clip_vision(c.clip, app::float_dtype(c.clip_dtype), chosen.device);
    text = std::make_unique<wan::TextEncoder>(
        wan::TextEncoderFiles{c.t5, c.t5_config, c.tokenizer, app::float_dtype(c.t5_dtype), c.text_len}, chosen.device);
  });
  vae->set_tiling(encode_tiling(world, tiling_choice, c, vae_config, buckets, chosen.device));
  if (world.is_root())
    report_info("wandata encode: {} -> {}: {} frames a clip{} at {}, on {} rank{} ({})", c.input, c.out,
                wan::frames_text(buckets.frames),
                buckets.frames.size() > 1 ? fmt::format(" ({} a video fills)", c.frame_buckets) : "",
                describe_sizes(c, buckets), world.size(), world.size() == 1 ? "" : "s", chosen.device.str());
  if (world.is_root())
    report_info("wandata encode: --vae {}: {}, {}{}", c.vae, vae->description(), c.vae_dtype,
                vae->tiling() ? ", " + vae->tiling()->describe(vae->patch_size()) : std::string());

  if (world.is_root() && s.condition_images > 0)
    report_info("wandata encode: condition {}: /y{}", c.condition,
                clip ? fmt::format(" and /clip_fea ({} tokens of {} a picture; CLIP weights in {})",
                                   clip->config().tokens(), clip->config().dim, clip->weights_layout())
                     : std::string(" (no --clip: for Wan2.2's I2V, which reads no CLIP features)"));
  if (world.is_root() && s.fun_control) {
    report_info(
        "wandata encode: condition {}: /y of {} channels (the control video's latents and the first "
        "frame's{}){}",
        c.condition, (s.fun_control_reference ? 3 : 2) * vae->z_dim() + (s.fun_control_mask ? 4 : 0),
        s.fun_control_mask        ? ", with its mask"
        : s.fun_control_reference ? ", then another frame's as the reference"
                                  : "",
        clip ? fmt::format(" and /clip_fea ({} tokens of {}; CLIP weights in {})",
                           (s.fun_control_reference ? 2 : 1) * clip->config().tokens(), clip->config().dim,
                           clip->weights_layout())
             : std::string());
    if (!clip && !s.fun_control_mask)
      report_warning(
          "wandata encode: no --clip: the data fit only a Fun-Control model without the CLIP branch (every released "
          "Wan2.1-Fun-Control model reads CLIP features: give --clip)");
  }
  if (world.is_root() && s.vace)
    report_info(
        "wandata encode: condition vace: /vace_context of {} channels (twice the VAE's {} latent channels, and "
        "the mask's {})",
        wan::vace_context_channels(*vae), vae->z_dim(), vae->spatial_factor() * vae->spatial_factor());
  const auto summary = wan::encode_dataset(s, *vae, *text, world, clip ? &clip : nullptr);
  if (world.is_root()) print_summary(c, summary);
  return kExitOk;
}

}  // namespace wt
