// wandata decode: what a dataset sample holds, as a person sees it: the
// sample's latents decoded by the Wan VAE into a video or PNG frames.
#include <fmt/format.h>
#include <torch/torch.h>

#include <iostream>

#include "commands.hpp"
#include "wantrain/app/float_dtype.hpp"
#include "wantrain/app/version.hpp"
#include "wantrain/data/dataset.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/util/options.hpp"
#include "wantrain/wan/model/weights.hpp"
#include "wantrain/wan/vae/video_vae.hpp"
#include "wantrain/wan/sample/video_output.hpp"

namespace wt {

int run_decode(distributed::World&, int argc, char** argv) {
  std::string config_file, data_dir, vae_file, vae_config, vae_dtype = "fp32", video, frames_dir;
  int64_t index = 0;
  double fps = 16;
  OptionSet options("wandata decode", "--data DIR --index I --vae FILE (--video OUT.mp4 | --frames-dir DIR)");
  options.group("decode")
      .standard_options(&config_file)
      .add("data", &data_dir, "the dataset")
      .add("index", &index, "which sample")
      .add("vae", &vae_file,
           "VAE weights, Wan2.1's or Wan2.2's (Wan2.1_VAE.pth, Wan2.2_VAE.pth, ComfyUI or diffusers layout)")
      .add("vae-config", &vae_config,
           "VAE shape as JSON (the official constructor's keys); default the released shape of the VAE --vae holds")
      .choice("vae-dtype", &vae_dtype, {"fp32", "bf16"}, "VAE weights and compute")
      .add("video", &video, "write the video here (.mp4: H.264; .mkv, .webm, .gif, .mov too)")
      .add("frames-dir", &frames_dir, "write the frames as PNGs into this folder")
      .add("fps", &fps, "the video's frame rate (Wan2.1: 16)");
  if (const auto outcome = options.parse(argc, argv); outcome != OptionSet::Outcome::Run) {
    std::cout << app::help_or_version(outcome, options);
    return kExitOk;
  }
  if (data_dir.empty() || vae_file.empty()) throw UsageError("options --data, --vae: required");
  if (video.empty() && frames_dir.empty()) throw UsageError("options --video, --frames-dir: give one or both");
  if (!(fps > 0)) throw UsageError("option --fps: must be positive");
  if (const auto why = unreadable_file_reason(wan::vae_weights_file(vae_file)); !why.empty())
    throw UsageError(fmt::format("option --vae: {}: {}", vae_file, why));
  const auto dataset = data::Dataset::open(data_dir);
  if (index < 0 || index >= dataset.size())
    throw UsageError(
        fmt::format("option --index: {} is outside the {} samples of {}", index, dataset.size(), data_dir));
  const auto& s = dataset.shape_of(index);  // its bucket's shape
  const auto config = wan::video_vae_config(vae_file, vae_config);
  if (s.channels != config.z_dim())
    throw UsageError(fmt::format("{}: latents of {} channels, and --vae is the {}{}", data_dir, s.channels,
                                 config.description(), vae_config.empty() ? "" : " (--vae-config)"));
  auto latents = torch::empty({s.channels, s.frames, s.height, s.width}, data::scalar_type(s.latents));
  auto text = torch::empty({s.text_len, s.text_dim}, data::scalar_type(s.text));
  int32_t text_len = 0;
  data::SampleReader reader(dataset);
  reader.read(index, latents, text, text_len);
  const auto vae = wan::open_video_vae(vae_file, config, app::float_dtype(vae_dtype));
  vae->eval();
  media::VideoWriterOptions writer;
  writer.fps = fps;
  const int64_t frames = wan::write_decoded_video(*vae, latents.to(torch::kFloat32), {video, frames_dir, writer, {}});
  const std::string prompt = reader.prompt(index);
  std::cout << fmt::format("wandata decode: sample {} of {}{}: {} frames of {}x{} to {}{}{}\n", index, data_dir,
                           prompt.empty() ? "" : " (\"" + prompt + "\")", frames, s.width * vae->spatial_factor(),
                           s.height * vae->spatial_factor(), video,
                           !video.empty() && !frames_dir.empty() ? " and " : "", frames_dir);
  return kExitOk;
}

}  // namespace wt
