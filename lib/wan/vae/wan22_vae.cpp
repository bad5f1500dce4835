#include "wantrain/wan/vae/wan22_vae.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "wantrain/util/error.hpp"
#include "wantrain/wan/vae/vae_parts.hpp"

namespace wt::wan {
namespace vae_parts {
namespace {

// [B, C, T, H, W] -> [B, 4 C, T, H/2, W/2]: pixel (2i + q, 2j + r) of
// channel c becomes channel 4c + 2r + q at (i, j).
at::Tensor to_patches(const at::Tensor& x) {
  const int64_t b = x.size(0), c = x.size(1), t = x.size(2), h = x.size(3) / 2, w = x.size(4) / 2;
  return x
      .reshape({b, c, t, h, 2, w, 2})  // [B, C, T, h, q, w, r]
      .permute({0, 1, 6, 4, 2, 3, 5})  // [B, C, r, q, T, h, w]
      .reshape({b, 4 * c, t, h, w});
}

// The inverse: [B, 4 C, T, h, w] -> [B, C, T, 2h, 2w].
at::Tensor from_patches(const at::Tensor& x) {
  const int64_t b = x.size(0), c = x.size(1) / 4, t = x.size(2), h = x.size(3), w = x.size(4);
  return x
      .reshape({b, c, 2, 2, t, h, w})  // [B, C, r, q, T, h, w]
      .permute({0, 1, 4, 5, 3, 6, 2})  // [B, C, T, h, q, w, r]
      .reshape({b, c, t, 2 * h, 2 * w});
}

}  // namespace

// An encoder level: its residual blocks and resample (registered as
// "downsamples.J"), plus a shortcut that averages blocks of its input.
struct DownLevel : Layer {
  DownLevel(int64_t in, int64_t out, int64_t blocks, bool space, bool time, int& slots, at::ScalarType dtype)
      : in(in), out(out), ft(time ? 2 : 1), fs(space ? 2 : 1) {
    main = std::make_unique<Sequence>(*this, "downsamples");
    for (int64_t j = 0; j < blocks; ++j)
      main->add(std::make_shared<ResidualBlock>(j == 0 ? in : out, out, slots, dtype));
    if (space) main->add(std::make_shared<Resample>(out, out, false, time, slots, dtype));
  }
  at::Tensor forward(const at::Tensor& x, Cache& cache) const override {
    return main->forward(x, cache).add_(average(x));
  }
  // x [B, in, T, H, W] -> [B, out, ceil(T / ft), H / fs, W / fs]: the chunk
  // alone, zero frames in front where T is no multiple of ft; each block of
  // ft x fs x fs positions gives in x (ft fs fs) values, ordered (channel,
  // t, y, x), averaged in consecutive groups, one group an output channel.
  at::Tensor average(const at::Tensor& x) const {
    const int64_t group = in * ft * fs * fs / out;
    if (group == 1 && ft == 1 && fs == 1) return x;  // in == out, nothing resampled: the input itself
    const int64_t pad = (ft - x.size(2) % ft) % ft;
    const auto padded = pad > 0 ? at::constant_pad_nd(x, {0, 0, 0, 0, pad, 0}) : x;
    const int64_t b = x.size(0), t = padded.size(2) / ft, h = x.size(3) / fs, w = x.size(4) / fs;
    return padded.reshape({b, in, t, ft, h, fs, w, fs})
        .permute({0, 1, 3, 5, 7, 2, 4, 6})  // [B, in, ft, fs, fs, t, h, w]
        .reshape({b, out, group, t, h, w})
        .mean(2);
  }
  int64_t in, out, ft, fs;
  std::unique_ptr<Sequence> main;
};

// A decoder level: its residual blocks and resample ("upsamples.J"), plus,
// where it resamples, a shortcut that spreads each input channel over a
// block of the output.
struct UpLevel : Layer {
  UpLevel(int64_t in, int64_t out, int64_t blocks, bool space, bool time, int& slots, at::ScalarType dtype)
      : in(in), out(out), ft(time ? 2 : 1) {
    main = std::make_unique<Sequence>(*this, "upsamples");
    for (int64_t j = 0; j < blocks; ++j)
      main->add(std::make_shared<ResidualBlock>(j == 0 ? in : out, out, slots, dtype));
    if (!space) return;  // the last level: no resample, no shortcut
    resample = std::make_shared<Resample>(out, out, true, time, slots, dtype);
    main->add(resample);
  }
  at::Tensor forward(const at::Tensor& x, Cache& cache) const override {
    if (!resample) return main->forward(x, cache);
    // The video's first frame: the resample passes it alone, as one frame.
    const bool first = resample->first_frame_next(cache);
    return main->forward(x, cache).add_(spread(x, first));
  }
  // x [B, in, T, h, w] -> [B, out, ft T, 2h, 2w]: channel i repeated
  // out x block / in times, the values in the order (channel, t, y, x) of the
  // output's blocks of ft x 2 x 2; of the first frame's block, its last frame.
  at::Tensor spread(const at::Tensor& x, bool first) const {
    const int64_t b = x.size(0), t = x.size(2), h = x.size(3), w = x.size(4);
    const int64_t repeats = out * ft * 4 / in;
    auto y = x.unsqueeze(2)
                 .expand({b, in, repeats, t, h, w})
                 .reshape({b, out, ft, 2, 2, t, h, w})
                 .permute({0, 1, 5, 2, 6, 3, 7, 4})  // [B, out, t, ft, h, 2, w, 2]
                 .reshape({b, out, t * ft, 2 * h, 2 * w});
    return first && ft > 1 ? y.narrow(2, ft - 1, y.size(2) - (ft - 1)) : y;
  }
  int64_t in, out, ft;
  std::unique_ptr<Sequence> main;
  std::shared_ptr<Resample> resample;
};

struct Encoder22 : Coder {
  Encoder22(const Vae22Config& c, at::ScalarType dtype) {
    add_input(12, c.dim, dtype);
    levels = std::make_unique<Sequence>(*this, "downsamples");
    const size_t n = c.dim_mult.size();
    int64_t in = c.dim;
    for (size_t i = 0; i < n; ++i) {
      const int64_t out = c.dim * c.dim_mult[i];
      const bool space = i + 1 < n, time = space && c.temperal_downsample[i];
      levels->add(std::make_shared<DownLevel>(in, out, c.num_res_blocks, space, time, slots, dtype));
      in = out;
    }
    add_middle(in, dtype);
    add_head(in, 2 * c.z_dim, dtype);
  }
  at::Tensor forward(const at::Tensor& x, Cache& cache) const {
    auto y = levels->forward(conv1->forward(x, cache), cache);
    return head_conv->forward(middle->forward(y, cache), cache, head_norm.get());
  }
};

struct Decoder22 : Coder {
  Decoder22(const Vae22Config& c, at::ScalarType dtype) {
    const size_t n = c.dim_mult.size();
    int64_t in = c.dec_dim * c.dim_mult.back();
    add_input(c.z_dim, in, dtype);
    add_middle(in, dtype);
    levels = std::make_unique<Sequence>(*this, "upsamples");
    for (size_t i = 0; i < n; ++i) {
      const int64_t out = c.dec_dim * c.dim_mult[n - 1 - i];
      // The decoder doubles time where the encoder halves it, in reverse.
      const bool space = i + 1 < n, time = space && c.temperal_downsample[n - 2 - i];
      levels->add(std::make_shared<UpLevel>(in, out, c.num_res_blocks + 1, space, time, slots, dtype));
      in = out;
    }
    add_head(in, 12, dtype);
  }
  at::Tensor forward(const at::Tensor& x, Cache& cache) const {
    auto y = levels->forward(middle->forward(conv1->forward(x, cache), cache), cache);
    return head_conv->forward(y, cache, head_norm.get());
  }
};

}  // namespace vae_parts

Wan22VaeImpl::Wan22VaeImpl(const Vae22Config& config, at::ScalarType dtype) : config_(config) {
  check_vae22_config(config, "VAE config");
  if (dtype != at::kFloat && dtype != at::kBFloat16)
    throw UsageError(fmt::format("VAE: weights must be float32 or bfloat16, not {}", c10::toString(dtype)));
  torch::NoGradGuard no_grad;
  const int64_t z = config.z_dim;
  encoder_ = register_module("encoder", std::make_shared<vae_parts::Encoder22>(config, dtype));
  conv1_ =
      register_module("conv1", std::make_shared<vae_parts::Conv>(std::vector<int64_t>{2 * z, 2 * z, 1, 1, 1}, dtype));
  conv2_ = register_module("conv2", std::make_shared<vae_parts::Conv>(std::vector<int64_t>{z, z, 1, 1, 1}, dtype));
  decoder_ = register_module("decoder", std::make_shared<vae_parts::Decoder22>(config, dtype));
}

namespace {
// What the shared encode and decode loops need of this VAE's config.
vae_parts::LatentSpace latent_space(const Vae22Config& c) {
  return {c.z_dim, c.spatial_factor(), c.temporal_factor(), c.latents_mean, c.latents_std};
}
}  // namespace

VideoVaeConfig Wan22VaeImpl::video_config() const {
  VideoVaeConfig c;
  c.version = VaeVersion::Wan22;
  c.wan22 = config_;
  return c;
}

at::Tensor Wan22VaeImpl::encode_whole(const at::Tensor& video) {
  auto cache = encoder_->new_cache();
  return vae_parts::encode_video(video, latent_space(config_), *conv1_, [&](const at::Tensor& chunk) {
    return encoder_->forward(vae_parts::to_patches(chunk), cache);
  });
}

void Wan22VaeImpl::decode_whole(const at::Tensor& latents, const FrameSink& sink) {
  auto cache = decoder_->new_cache();
  vae_parts::decode_latents(
      latents, latent_space(config_), *conv2_,
      [&](const at::Tensor& frame) {
        return vae_parts::from_patches(decoder_->forward(frame, cache).to(torch::kFloat));
      },
      sink);
}

}  // namespace wt::wan
