#include "wantrain/wan/vae/video_frames.hpp"

#include <torch/torch.h>

#include <cstring>

#include "wantrain/util/error.hpp"

namespace wt::wan {

at::Tensor frames_to_video(const std::vector<media::Image>& frames) {
  if (frames.empty()) throw Error("frames_to_video: no frames");
  const int w = frames.front().width, h = frames.front().height;
  auto bytes = torch::empty({int64_t(frames.size()), h, w, 3}, torch::kUInt8);
  for (size_t f = 0; f < frames.size(); ++f) {
    if (frames[f].width != w || frames[f].height != h || frames[f].channels != 3)
      throw Error("frames_to_video: frames of different sizes");
    std::memcpy(bytes[int64_t(f)].data_ptr(), frames[f].pixels.data(), frames[f].pixels.size());
  }
  return bytes.permute({3, 0, 1, 2}).to(torch::kFloat32).div_(127.5).sub_(1.0).contiguous();
}

std::vector<media::Image> video_to_frames(const at::Tensor& video) {
  if (video.dim() != 4 || video.size(0) != 3) throw Error("video_to_frames: expected [3, F, H, W]");
  const auto bytes = video.detach()
                         .to(torch::kCPU, torch::kFloat32)
                         .add(1.0)
                         .mul_(127.5)
                         .round_()
                         .clamp_(0, 255)
                         .to(torch::kUInt8)
                         .permute({1, 2, 3, 0})
                         .contiguous();  // [F, H, W, 3]
  std::vector<media::Image> frames;
  for (int64_t f = 0; f < bytes.size(0); ++f) {
    media::Image image(int(bytes.size(2)), int(bytes.size(1)));
    std::memcpy(image.pixels.data(), bytes[f].data_ptr(), image.pixels.size());
    frames.push_back(std::move(image));
  }
  return frames;
}

}  // namespace wt::wan
