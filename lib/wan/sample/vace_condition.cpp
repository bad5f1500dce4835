#include "wantrain/wan/sample/vace_condition.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <algorithm>

#include "wantrain/media/media_reader.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/wan/vae/video_frames.hpp"

namespace wt::wan {

int64_t vace_context_channels(const VideoVae& vae) {
  return 2 * vae.z_dim() + vae.spatial_factor() * vae.spatial_factor();
}

at::Tensor vace_mask_channels(const at::Tensor& mask, int64_t s, int64_t references) {
  if (mask.dim() != 4 || mask.size(0) != 1 || mask.size(2) % s || mask.size(3) % s)
    throw Error(fmt::format("a VACE mask is [1, F, H, W] with H and W multiples of {}, got [{}]", s,
                            fmt::join(mask.sizes(), ",")));
  const int64_t frames = mask.size(1), h = mask.size(2) / s, w = mask.size(3) / s;
  // [F, h, s, w, s] -> [s, s, F, h, w]: pixel (i, j) of each block is channel i * s + j.
  auto folded =
      mask[0].to(torch::kFloat32).reshape({frames, h, s, w, s}).permute({2, 4, 0, 1, 3}).reshape({s * s, frames, h, w});
  // F.interpolate(mode='nearest-exact') to the latent frames, the sizes given (no scale factors).
  folded = at::_upsample_nearest_exact3d(folded.unsqueeze(0), {(frames + 3) / 4, h, w}, std::nullopt, std::nullopt,
                                         std::nullopt)
               .squeeze(0);
  if (references == 0) return folded;
  return torch::cat({torch::zeros({s * s, references, h, w}, folded.options()), folded}, 1);
}

at::Tensor vace_context(VideoVae& vae, const VaceSource& source, int64_t frames, int64_t height, int64_t width) {
  const int64_t s = vae.spatial_factor();
  if (frames < 1 || (frames - 1) % 4 != 0)
    throw UsageError(fmt::format("a VACE context needs 1 + 4k frames, got {}", frames));
  if (height % s || width % s || height < s || width < s)
    throw UsageError(fmt::format("a VACE context of {}x{} is not a multiple of the VAE's {} pixels", width, height, s));
  const std::vector<int64_t> video_shape{3, frames, height, width}, mask_shape{1, frames, height, width};
  if (source.video.defined() && source.video.sizes() != at::IntArrayRef(video_shape))
    throw UsageError(fmt::format("the VACE video must be [{}] (3 channels, frames, height, width), got [{}]",
                                 fmt::join(video_shape, ","), fmt::join(source.video.sizes(), ",")));
  if (source.mask.defined() && source.mask.sizes() != at::IntArrayRef(mask_shape))
    throw UsageError(fmt::format("the VACE mask must be [{}] (1 channel, frames, height, width), got [{}]",
                                 fmt::join(mask_shape, ","), fmt::join(source.mask.sizes(), ",")));
  for (const auto& picture : source.references)
    if (picture.sizes() != at::IntArrayRef({3, height, width}))
      throw UsageError(fmt::format("a VACE reference picture must be [3,{},{}] (fitted to the video), got [{}]", height,
                                   width, fmt::join(picture.sizes(), ",")));
  torch::NoGradGuard no_grad;
  const auto options = torch::TensorOptions().dtype(torch::kFloat32).device(vae.parameters().front().device());
  const auto video = source.video.defined() ? source.video.to(options) : torch::zeros(video_shape, options);
  const auto mask = source.mask.defined() ? source.mask.to(options) : torch::ones(mask_shape, options);
  // The pixels to keep and the pixels to make, each through the VAE on its own.
  const auto made = (mask > 0.5).to(torch::kFloat32);
  const auto encode = [&](const at::Tensor& pixels) { return vae.encode(pixels.unsqueeze(0))[0].to(options); };
  std::vector<at::Tensor> latent_frames;
  for (const auto& picture : source.references) {
    const auto latents = encode(picture.to(options).unsqueeze(1));  // [z, 1, h, w]
    latent_frames.push_back(torch::cat({latents, torch::zeros_like(latents)}, 0));
  }
  latent_frames.push_back(torch::cat({encode(video * (1 - made)), encode(video * made)}, 0));
  // vace.py folds the mask as given, not binarised (vace_encode_frames
  // binarises its own copy only).
  const auto masks = vace_mask_channels(mask, s, int64_t(source.references.size()));
  return torch::cat({torch::cat(latent_frames, 1), masks}, 0);
}

at::Tensor fit_reference(const at::Tensor& picture, int64_t height, int64_t width) {
  if (picture.dim() != 3 || picture.size(0) != 3)
    throw Error(fmt::format("a reference picture is [3, H, W], got [{}]", fmt::join(picture.sizes(), ",")));
  if (picture.size(1) == height && picture.size(2) == width) return picture;
  const double scale = std::min(double(height) / double(picture.size(1)), double(width) / double(picture.size(2)));
  const int64_t h = std::max<int64_t>(1, int64_t(double(picture.size(1)) * scale));
  const int64_t w = std::max<int64_t>(1, int64_t(double(picture.size(2)) * scale));
  namespace F = torch::nn::functional;
  const auto resized =
      F::interpolate(
          picture.to(torch::kFloat32).unsqueeze(0),
          F::InterpolateFuncOptions().size(std::vector<int64_t>{h, w}).mode(torch::kBilinear).align_corners(false))
          .squeeze(0);
  auto canvas = torch::ones({3, height, width}, resized.options());  // white in [-1, 1]
  canvas.narrow(1, (height - h) / 2, h).narrow(2, (width - w) / 2, w).copy_(resized);
  return canvas;
}

at::Tensor read_control_video(const std::string& path, int64_t frames, int64_t height, int64_t width) {
  const auto info = media::probe_media(path);
  if (info.frames() < frames)
    throw UsageError(fmt::format("{}: {} frame{}, shorter than the sample's {}", path, info.frames(),
                                 info.frames() == 1 ? "" : "s", frames));
  std::vector<int64_t> wanted(size_t(frames), 0);
  for (size_t i = 0; i < wanted.size(); ++i) wanted[i] = int64_t(i);
  media::DecodeOptions options;
  options.size = {int(width), int(height)};
  std::vector<media::Image> decoded(wanted.size());
  media::decode_frames(path, wanted, options, [&](size_t k, media::Image&& frame) { decoded[k] = std::move(frame); });
  return frames_to_video(decoded);
}

at::Tensor mask_of_video(const at::Tensor& video) { return ((video.narrow(0, 0, 1) + 1) / 2).clamp(0, 1); }

at::Tensor drop_reference_frames(const at::Tensor& latents, int64_t references) {
  if (references == 0) return latents;
  const int64_t frames = latents.dim() - 3;  // [(B,) C, F, H, W]
  return latents.narrow(frames, references, latents.size(frames) - references).contiguous();
}

}  // namespace wt::wan
