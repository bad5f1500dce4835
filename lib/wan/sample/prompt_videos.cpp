#include "wantrain/wan/sample/prompt_videos.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>

#include "wantrain/media/video_writer.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/util/reporter.hpp"
#include "wantrain/wan/plan/decode_memory.hpp"
#include "wantrain/wan/sample/image_condition.hpp"
#include "wantrain/wan/sample/picture_start.hpp"
#include "wantrain/wan/sample/sampling_core.hpp"
#include "wantrain/wan/sample/sample_outputs.hpp"
#include "wantrain/wan/vae/release_video.hpp"
#include "wantrain/wan/vae/video_vae.hpp"

namespace wt::wan {
PromptVideos::PromptVideos(const WanConfig& config, PromptVideoOptions options, const c10::Device& device)
    : config_(config), options_(std::move(options)) {
  vae_config_ = video_vae_config(options_.vae, options_.vae_config);
  if (vae_config_.z_dim() != config_.out_dim)
    throw SettingError("vae",
                       fmt::format("{} is the {}, whose latents have {} channels; the model makes {}", options_.vae,
                                   vae_config_.description(), vae_config_.z_dim(), config_.out_dim));
  const int64_t spatial = vae_config_.spatial_factor(), temporal = vae_config_.temporal_factor();
  if (options_.vae_tiling.mode == VaeTilingChoice::Mode::Tiles)
    check_tiling(VaeTiling::of_tile(options_.vae_tiling.width, options_.vae_tiling.height, spatial), spatial,
                 "vae_tiling");
  const int64_t multiple = spatial * config_.patch_size[1];
  const bool ti2v = config_.model_type == ModelType::TI2V;
  std::vector<std::string> problems;
  for (size_t i = 0; i < options_.prompts.size(); ++i) {
    const auto& line = options_.prompts[i];
    auto wrong = [&](const std::string& why) {
      problems.push_back(fmt::format("{}:{}: {}", options_.prompts_file, line.line, why));
    };
    Prompt p;
    p.line = line;
    p.index = int64_t(i);
    int64_t frames = options_.latents[0], height = options_.latents[1], width = options_.latents[2];
    if (line.frames > 0) {
      if ((line.frames - 1) % temporal != 0) {
        wrong(fmt::format("--frames {}: video frames are {}k + 1 (the VAE's stride)", line.frames, temporal));
        continue;
      }
      frames = 1 + (line.frames - 1) / temporal;
    }
    if (line.width > 0) {
      if (line.width % multiple != 0 || line.height % multiple != 0) {
        wrong(fmt::format("--size {}x{}: sides must be multiples of {} (the VAE's {}, then the model's patches)",
                          line.width, line.height, multiple, spatial));
        continue;
      }
      height = line.height / spatial;
      width = line.width / spatial;
    }
    p.shape = {1, config_.in_dim - config_.condition_channels(), frames, height, width};
    if (!line.image.empty()) {
      if (!config_.image_conditioned() && !ti2v) {
        wrong(fmt::format("--image: the model is {}: it starts from no picture", model_type_name(config_.model_type)));
        continue;
      }
      if (config_.model_type == ModelType::FLF2V) {
        wrong(
            "--image: a flf2v model needs a first and a last frame; a prompt file gives one (use wansample "
            "--image --last-image)");
        continue;
      }
      if (const auto why = unreadable_file_reason(line.image); !why.empty()) {
        wrong(fmt::format("--image {}: {}", line.image, why));
        continue;
      }
      if (config_.image_branch() && options_.clip.empty()) {
        wrong(fmt::format("--image: the {} model reads the picture's CLIP features: give the CLIP image encoder ({})",
                          model_type_name(config_.model_type), setting_reference("sample_clip")));
        continue;
      }
    } else if (config_.image_conditioned()) {
      wrong(fmt::format("the {} model starts from a picture: give the line --image FILE",
                        model_type_name(config_.model_type)));
      continue;
    }
    if (int64_t(i) % options_.ranks == options_.rank) mine_.push_back(std::move(p));
  }
  if (!problems.empty()) {
    std::string message;
    for (const auto& problem : problems) message += (message.empty() ? "" : "\n") + problem;
    throw UsageError(message);
  }
  if (mine_.empty()) return;
  // This rank's prompts and negative prompts, encoded once; the encoder is
  // freed when this scope ends.
  auto files = options_.t5;
  files.text_len = config_.text_len;
  TextEncoder encoder(files, device);
  if (encoder.dim() != config_.text_dim)
    throw SettingError("t5", fmt::format("{} makes embeddings of {} values a token; the model reads {}", files.weights,
                                         encoder.dim(), config_.text_dim));
  std::vector<std::string> texts;
  for (const auto& p : mine_) {
    texts.push_back(p.line.prompt);
    if (p.line.negative_prompt && !p.line.negative_prompt->empty()) texts.push_back(*p.line.negative_prompt);
  }
  const auto encoded = encoder.encode(texts);
  if (encoded.truncated > 0)
    report_warning("{}: {} prompts are cut at the model's {} tokens", options_.prompts_file, encoded.truncated,
                   config_.text_len);
  int64_t row = 0;
  for (auto& p : mine_) {
    p.context = encoded.embedding[row++].clone();
    if (p.line.negative_prompt && !p.line.negative_prompt->empty()) p.negative = encoded.embedding[row++].clone();
  }
}

std::vector<train::SampleVideo> PromptVideos::draw(WanModelImpl& model, int64_t step,
                                                   const HighNoiseModel* high) const {
  std::vector<train::SampleVideo> videos;
  if (mine_.empty()) return videos;
  const auto device = model.parameters().front().device();
  auto vae = open_video_vae(options_.vae, vae_config_, options_.vae_dtype);
  vae->to(device);
  vae->eval();
  ClipVision clip(nullptr);
  const bool pictures = std::any_of(mine_.begin(), mine_.end(), [](const Prompt& p) { return !p.line.image.empty(); });
  if (pictures && config_.image_branch()) clip = load_clip_vision(options_.clip, options_.clip_dtype, device);
  const std::string folder = fmt::format("{}/step-{:08d}", options_.directory, step);
  std::error_code error;
  if (options_.decode) std::filesystem::create_directories(folder, error);
  const double beside_vae = memory_beside_vae(device, options_.vae, options_.vae_dtype);
  for (const auto& p : mine_) {
    const auto start = std::chrono::steady_clock::now();
    // Tiles, for this video's frame: with auto, when its whole-frame decode does not fit the device beside the
    // VAE's weights, as wansample decides (the same on every run: not from what happens to be free).
    const int64_t s = vae_config_.spatial_factor(), width = p.shape[4] * s, height = p.shape[3] * s;
    vae->set_tiling(
        decode_tiling(options_.vae_tiling, vae_config_, options_.vae_dtype, width, height, beside_vae, "vae_tiling"));
    PictureStart picture;
    if (!p.line.image.empty())
      picture = start_from_picture(config_, *vae, clip.is_empty() ? nullptr : clip.get(), read_picture(p.line.image),
                                   at::Tensor(), p.shape, device);
    SampleModels models;
    models.model = &model;
    if (high) models.high = *high;
    SampleCondition condition;
    condition.context = p.context;
    condition.negative = p.negative;
    condition.image = picture.image;
    condition.first_frame = picture.first_frame;
    auto sampler = options_.sampler;
    if (p.line.steps > 0) sampler.steps = p.line.steps;
    if (p.line.cfg) sampler.cfg = *p.line.cfg;
    const auto noise = seeded_noise(p.shape, p.line.seed.value_or(options_.seed)).to(device);
    const auto latents = draw_latents(models, condition, sampler, noise, options_.compute_dtype);  // [C, F, H, W]
    if (!options_.decode) continue;
    train::SampleVideo video;
    video.index = p.index;
    video.prompt = p.line.prompt;
    video.rank = options_.rank;
    video.path = fmt::format("{}/{:02d}.mp4", folder, p.index);
    VideoOutput output;
    output.video = video.path;
    output.writer.fps = options_.fps > 0 ? options_.fps : release_video(vae_config_).fps;
    DecodedVideo decoded(*vae, output);
    // A sample is for looking at: a full or read-only disk costs its video, not the run.
    try {
      decoded.write({latents, {}});
    } catch (const Error& e) {
      report_warning("{} (prompt {:02d}'s video is not saved; training goes on)", e.what(), p.index);
      video.path.clear();
    }
    video.strip = decoded.strip();
    video.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    videos.push_back(std::move(video));
  }
  return videos;
}

}  // namespace wt::wan
