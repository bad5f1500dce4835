#include "wantrain/wan/sample/image_condition.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "wantrain/media/media_reader.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/wan/vae/video_frames.hpp"

namespace wt::wan {

at::Tensor frame_mask(int64_t frames, int64_t latent_height, int64_t latent_width, bool last_frame) {
  if (frames < 1 || (frames - 1) % 4 != 0)
    throw UsageError(fmt::format("an image condition needs 1 + 4k frames, got {}", frames));
  if (last_frame && frames < 2) throw UsageError("a first and a last frame need a video of 5 frames or more");
  // One value per pixel frame, the first repeated 4 times: 4 (1 + k) values,
  // 4 consecutive ones per latent frame.
  auto marks = torch::zeros({frames + 3}, torch::kFloat32);
  marks.narrow(0, 0, 4).fill_(1);
  if (last_frame) marks[frames + 2] = 1;
  return marks.view({(frames + 3) / 4, 4, 1, 1})
      .transpose(0, 1)
      .expand({4, (frames + 3) / 4, latent_height, latent_width})
      .contiguous();
}

at::Tensor image_condition_y(VideoVae& vae, const at::Tensor& first, const at::Tensor& last, int64_t frames) {
  if (first.dim() != 3 || first.size(0) != 3)
    throw Error(fmt::format("an image condition's picture is [3, H, W], got [{}]", fmt::join(first.sizes(), ",")));
  const int64_t h = first.size(1), w = first.size(2);
  const int64_t factor = vae.spatial_factor();
  if (h % factor || w % factor)
    throw UsageError(
        fmt::format("an image condition's picture of {}x{} is not a multiple of the VAE's {} pixels", w, h, factor));
  if (vae.temporal_factor() != 4)
    throw UsageError(fmt::format("an image condition folds 4 frames to a latent frame, and the {} makes one of {}",
                                 vae.description(), vae.temporal_factor()));
  const auto mask = frame_mask(frames, h / factor, w / factor, last.defined());
  torch::NoGradGuard no_grad;
  const auto device = vae.parameters().front().device();
  auto video = torch::zeros({1, 3, frames, h, w}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
  video.select(2, 0).copy_(first.unsqueeze(0));
  if (last.defined()) video.select(2, frames - 1).copy_(last.unsqueeze(0));
  const auto latents = vae.encode(video)[0].to(torch::kFloat32);  // [z, 1 + k, h, w]
  return torch::cat({mask.to(latents.device()), latents}, 0);
}

at::Tensor image_clip_features(ClipVisionImpl& clip, const at::Tensor& first, const at::Tensor& last) {
  // One picture at a time: each is resized to the tower's size on its own,
  // whatever its size (as Wan's first_last_frame2video.py runs CLIP).
  const auto device = clip.parameters().front().device();
  std::vector<at::Tensor> features{clip.features(first.unsqueeze(0).to(device, torch::kFloat32))[0]};
  if (last.defined()) features.push_back(clip.features(last.unsqueeze(0).to(device, torch::kFloat32))[0]);
  return torch::cat(features, 0).to(torch::kFloat32);  // [images * tokens, dim]
}

VideoSize image_video_size(int64_t height, int64_t width, int64_t max_area, int64_t multiple) {
  if (height < 1 || width < 1) throw UsageError("a picture of no pixels");
  // image2video.py: lat_h = round(sqrt(max_area * ratio) // 8 // 2 * 2), the
  // same for the width with 1 / ratio; pixels = latents x 8.
  const double ratio = double(height) / double(width);
  const auto side = [&](double exact) { return int64_t(std::floor(exact / double(multiple))) * multiple; };
  VideoSize size{side(std::sqrt(double(max_area) * ratio)), side(std::sqrt(double(max_area) / ratio))};
  if (size.height < multiple || size.width < multiple)
    throw SettingError("max_area", fmt::format("a {}x{} picture within {} pixels is less than {}x{}: allow more pixels",
                                               width, height, max_area, multiple, multiple));
  return size;
}

VideoSize ti2v_video_size(int64_t height, int64_t width, int64_t max_area, int64_t multiple) {
  if (height < 1 || width < 1) throw UsageError("a picture of no pixels");
  const double ratio = double(width) / double(height), m = double(multiple), area = double(max_area);
  const double exact_width = std::sqrt(area * ratio), exact_height = area / exact_width;
  const auto floor_to = [&](double v) { return int64_t(std::floor(v / m)) * multiple; };
  // width first: the width floored, the height from what area is left; and the other way round
  const int64_t w1 = floor_to(exact_width), h2 = floor_to(exact_height);
  if (w1 < multiple || h2 < multiple)
    throw SettingError("max_area", fmt::format("a {}x{} picture within {} pixels is less than {}x{}: allow more pixels",
                                               width, height, max_area, multiple, multiple));
  const int64_t h1 = floor_to(area / double(w1)), w2 = floor_to(area / double(h2));
  const auto off = [&](int64_t w, int64_t h) {  // how far a size's aspect ratio is from the picture's
    const double r = double(w) / double(h);
    return std::max(ratio / r, r / ratio);
  };
  if (h1 >= multiple && (w2 < multiple || off(w1, h1) < off(w2, h2))) return {h1, w1};
  return {h2, w2};
}

at::Tensor resize_picture(const at::Tensor& picture, const VideoSize& size) {
  namespace F = torch::nn::functional;
  return F::interpolate(picture.unsqueeze(0).to(torch::kFloat32),
                        F::InterpolateFuncOptions()
                            .size(std::vector<int64_t>{size.height, size.width})
                            .mode(torch::kBicubic)
                            .align_corners(false))[0];
}

at::Tensor cover_picture(const at::Tensor& picture, int64_t height, int64_t width) {
  if (picture.size(1) == height && picture.size(2) == width) return picture;
  const double scale = std::max(double(height) / double(picture.size(1)), double(width) / double(picture.size(2)));
  const VideoSize scaled{std::max(height, int64_t(std::lround(double(picture.size(1)) * scale))),
                         std::max(width, int64_t(std::lround(double(picture.size(2)) * scale)))};
  return resize_picture(picture, scaled)
      .narrow(1, (scaled.height - height) / 2, height)
      .narrow(2, (scaled.width - width) / 2, width)
      .contiguous();
}

at::Tensor read_picture(const std::string& path) {
  media::probe_media(path);  // refuses what is not a picture or video, naming the file
  std::vector<media::Image> frames;
  media::decode_frames(path, {0}, {}, [&](size_t, media::Image&& frame) { frames.push_back(std::move(frame)); });
  return frames_to_video(frames).select(1, 0);  // [3, H, W]
}

}  // namespace wt::wan
