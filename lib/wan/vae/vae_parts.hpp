// The building blocks the Wan video VAEs share (wan_vae.hpp: Wan2.1,
// wan22_vae.hpp: Wan2.2), under the official parameter names: convs, the
// RMS-style channel norm, causal convs with their per-chunk caches,
// residual and attention blocks, resamples, and the encoder's and decoder's
// common parts. Internal to lib/wan/vae: the VAEs' own headers only
// forward-declare them.
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace wt::wan::vae_parts {

// What one causal conv keeps between chunks: its last two input frames
// (undefined before the first chunk), and whether a time-doubling resample
// has passed its first frame.
struct Slot {
  at::Tensor frames;
  bool started = false;
};
using Cache = std::vector<Slot>;

// A conv's weight and bias, drawn as PyTorch draws a fresh Conv (uniform
// within 1/sqrt(fan_in)), in their dtype from the start, frozen.
struct Conv : torch::nn::Module {
  Conv(std::vector<int64_t> shape, at::ScalarType dtype) {
    int64_t fan_in = 1;
    for (size_t i = 1; i < shape.size(); ++i) fan_in *= shape[i];
    const double bound = 1 / std::sqrt(double(fan_in));
    const auto options = torch::TensorOptions().dtype(dtype);
    weight = register_parameter("weight", torch::empty(shape, options).uniform_(-bound, bound), false);
    bias = register_parameter("bias", torch::empty({shape[0]}, options).uniform_(-bound, bound), false);
  }
  // A per-frame 2-D conv's weight [out, in, k, k] as a 3-D one of depth 1:
  // it runs on [B, C, T, H, W] as it lies.
  at::Tensor weight3d() const { return weight.dim() == 4 ? weight.unsqueeze(2) : weight; }
  at::Tensor weight, bias;
};

// RMS_norm's gamma: [c, 1, 1, 1] on video, [c, 1, 1] in attention ("images").
struct Norm : torch::nn::Module {
  Norm(int64_t channels, bool images, at::ScalarType dtype) {
    const auto shape = images ? std::vector<int64_t>{channels, 1, 1} : std::vector<int64_t>{channels, 1, 1, 1};
    gamma = register_parameter("gamma", torch::ones(shape, torch::TensorOptions().dtype(dtype)), false);
  }
  // out = x / max(|x|_2 over channels, 1e-12) * sqrt(c) * gamma, then SiLU
  // where `silu`; x and out [B, C, T, H, W], out possibly a view. The
  // squares summed rather than linalg_vector_norm, which is 4x slower over
  // the channels of this layout; the sum in fp32 for bf16.
  void apply(const at::Tensor& x, at::Tensor& out, bool silu) const {
    const auto inverse = at::sum(x.pow(2), {1}, /*keepdim=*/true, at::kFloat)
                             .clamp_min_(1e-24)
                             .rsqrt_()
                             .mul_(std::sqrt(double(x.size(1))))
                             .to(x.scalar_type());  // [B, 1, T, H, W]
    at::mul_out(out, x, inverse).mul_(gamma.dim() == 3 ? gamma.unsqueeze(-1) : gamma);
    if (silu) at::silu_(out);
  }
  at::Tensor forward(const at::Tensor& x, bool silu = false) const {
    auto out = at::empty_like(x);
    apply(x, out, silu);
    return out;
  }
  at::Tensor gamma;
};

// at::conv3d, but fp32 on the CPU straight to oneDNN: conv3d's heuristic
// sends convs of few small frames (the decoder's 16x16 levels, 3 frames at
// a time) to a slower im2col path, 20% slower measured (LibTorch 1.13
// weighs N*C*T*H, and the official code, padding space beforehand, passes it).
at::Tensor conv3d(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                  at::IntArrayRef stride = {1, 1, 1}, at::IntArrayRef padding = {0, 0, 0});

// CausalConv3d with kernel [out, in, kt, k, k]: all kt - 1 frames of time
// padding in front, zeros before the first chunk and the kept frames after.
struct CausalConv : Conv {
  CausalConv(int64_t in, int64_t out, int64_t kt, int64_t k, int& slots, at::ScalarType dtype)
      : Conv({out, in, kt, k, k}, dtype), context(kt - 1), pad(k / 2), slot(kt > 1 ? slots++ : -1) {}

  // The conv of x, or of silu(norm(x)) where `norm` is given, written
  // straight behind the kept frames (zeros before the first chunk): its
  // input [B, C, context + T, H, W] made in the one pass that makes x's.
  at::Tensor forward(const at::Tensor& x, Cache& cache, const Norm* norm = nullptr) const {
    const int64_t t = x.size(2);
    if (slot < 0) return conv3d(x, weight, bias);  // 1x1x1: no time context, never after a norm
    Slot& kept = cache[size_t(slot)];
    if (!kept.frames.defined() && t == 1) {
      // The first frame of a stream sees only zeros before it: the last
      // time tap alone gives its output, at 1/3 of the work.
      const auto y = norm ? norm->forward(x, /*silu=*/true) : x;
      kept.frames = at::constant_pad_nd(y, {0, 0, 0, 0, context - 1, 0});
      return conv3d(y, weight.narrow(2, context, 1), bias, {1, 1, 1}, {0, pad, pad});
    }
    auto input = at::empty({x.size(0), x.size(1), context + t, x.size(3), x.size(4)}, x.options());
    auto front = input.narrow(2, 0, context), chunk = input.narrow(2, context, t);
    if (kept.frames.defined())
      front.copy_(kept.frames);
    else
      front.zero_();
    if (norm)
      norm->apply(x, chunk, /*silu=*/true);
    else
      chunk.copy_(x);
    kept.frames = input.narrow(2, t, context).clone(at::MemoryFormat::Contiguous);
    return conv3d(input, weight, bias, {1, 1, 1}, {0, pad, pad});
  }
  int64_t context, pad;
  int slot;
};

// A layer of the encoder's downsamples, the decoder's upsamples or a middle.
struct Layer : torch::nn::Module {
  virtual at::Tensor forward(const at::Tensor& x, Cache& cache) const = 0;
};

struct ResidualBlock : Layer {
  ResidualBlock(int64_t in, int64_t out, int& slots, at::ScalarType dtype) {
    auto residual = register_module("residual", std::make_shared<torch::nn::Module>());
    norm1 = residual->register_module("0", std::make_shared<Norm>(in, false, dtype));
    conv1 = residual->register_module("2", std::make_shared<CausalConv>(in, out, 3, 3, slots, dtype));
    norm2 = residual->register_module("3", std::make_shared<Norm>(out, false, dtype));
    conv2 = residual->register_module("6", std::make_shared<CausalConv>(out, out, 3, 3, slots, dtype));
    if (in != out) shortcut = register_module("shortcut", std::make_shared<CausalConv>(in, out, 1, 1, slots, dtype));
  }
  at::Tensor forward(const at::Tensor& x, Cache& cache) const override {
    auto y = conv1->forward(x, cache, norm1.get());
    y = conv2->forward(y, cache, norm2.get());
    return y.add_(shortcut ? shortcut->forward(x, cache) : x);
  }
  std::shared_ptr<Norm> norm1, norm2;
  std::shared_ptr<CausalConv> conv1, conv2, shortcut;
};

// One head over the h*w positions of each frame.
struct AttentionBlock : Layer {
  AttentionBlock(int64_t c, at::ScalarType dtype) {
    norm = register_module("norm", std::make_shared<Norm>(c, true, dtype));
    to_qkv = register_module("to_qkv", std::make_shared<Conv>(std::vector<int64_t>{3 * c, c, 1, 1}, dtype));
    proj = register_module("proj", std::make_shared<Conv>(std::vector<int64_t>{c, c, 1, 1}, dtype));
    proj->weight.zero_();  // as officially: the block starts as the identity
  }
  at::Tensor forward(const at::Tensor& x, Cache&) const override {
    const int64_t b = x.size(0), c = x.size(1), t = x.size(2), h = x.size(3), w = x.size(4);
    const auto qkv = conv3d(norm->forward(x), to_qkv->weight3d(), to_qkv->bias).view({b, 3, c, t, h * w});
    // [B, T, HW, C]: the frames as heads of one fused (flash) attention each,
    // as the official block's scaled_dot_product_attention; no [HW, HW] scores.
    auto part = [&](int64_t i) { return qkv.select(1, i).permute({0, 2, 3, 1}); };
    const auto out =
        at::scaled_dot_product_attention(part(0), part(1), part(2)).permute({0, 3, 1, 2}).reshape({b, c, t, h, w});
    return conv3d(out, proj->weight3d(), proj->bias).add_(x);
  }
  std::shared_ptr<Norm> norm;
  std::shared_ptr<Conv> to_qkv, proj;
};

// Nearest 2x upsampling (nearest-exact at scale 2 is plain nearest), then
// `conv`'s 3x3 conv with padding 1, as four 2x2 convs of the low-resolution
// frames, one per output parity (py, px): 4 taps instead of 9 per output
// pixel, and no upsampled copy. Under the 3x3 window, upsampled row 2i + py
// reads low-resolution rows (i - 1, i) with kernel rows (0, 1 + 2) for
// py = 0, and (i, i + 1) with (0 + 1, 2) for py = 1; the same along width;
// zeros outside the frame on either scale.
// x [B, n C, T, H, W] -> [B, O, n T, 2H, 2W]: with n = 2 (after a
// time-doubling conv) frame 2j + s is made from the s-th C channels of frame j.
at::Tensor upsample_conv(const at::Tensor& x, int64_t n, const Conv& conv);

// Halves (down) or doubles (up) height and width of c channels, and time
// too where `in_time`. Its 3x3 conv makes `out` channels: c down; up, c / 2
// in Wan2.1, c in Wan2.2.
struct Resample : Layer {
  Resample(int64_t c, int64_t out, bool up, bool in_time, int& slots, at::ScalarType dtype) : up(up), in_time(in_time) {
    auto resample = register_module("resample", std::make_shared<torch::nn::Module>());
    conv = resample->register_module(
        "1", std::make_shared<Conv>(std::vector<int64_t>{out, c, 3, 3}, dtype));  // 0: pad or upsample
    if (!in_time) return;
    if (up) {
      time_up = register_module("time_conv", std::make_shared<CausalConv>(c, 2 * c, 3, 1, slots, dtype));
    } else {
      time_down = register_module("time_conv", std::make_shared<Conv>(std::vector<int64_t>{c, c, 3, 1, 1}, dtype));
      slot = slots++;
    }
  }

  at::Tensor forward(const at::Tensor& x, Cache& cache) const override {
    if (up) {
      if (!in_time) return upsample_conv(x, 1, *conv);
      Slot& kept = cache[size_t(time_up->slot)];
      // The first frame of the video passes; from the next on, the conv's
      // own stream starts (zeros before it), its two halves two frames.
      const bool halves = kept.started;
      kept.started = true;
      return halves ? upsample_conv(time_up->forward(x, cache), 2, *conv) : upsample_conv(x, 1, *conv);
    }
    // One zero row and column at the bottom and right, then stride 2.
    const auto y = conv3d(at::constant_pad_nd(x, {0, 1, 0, 1}), conv->weight3d(), conv->bias, {1, 2, 2});
    if (!in_time) return y;
    Slot& kept = cache[size_t(slot)];
    const auto last = y.narrow(2, y.size(2) - 1, 1).clone(at::MemoryFormat::Contiguous);
    if (!kept.frames.defined()) {  // the first chunk passes as it is
      kept.frames = last;
      return y;
    }
    const auto input = at::cat({kept.frames, y}, 2);  // [B, C, 1 + T, H/2, W/2]
    kept.frames = last;
    return conv3d(input, time_down->weight, time_down->bias, {2, 1, 1});
  }
  // Up in time: whether the next forward is the video's first frame (the one
  // that passes without the time conv).
  bool first_frame_next(const Cache& cache) const { return up && in_time && !cache[size_t(time_up->slot)].started; }
  bool up, in_time;
  std::shared_ptr<Conv> conv, time_down;
  std::shared_ptr<CausalConv> time_up;
  int slot = -1;
};

// Layers registered as "<name>.0", "<name>.1", ... of one container.
struct Sequence {
  Sequence(torch::nn::Module& owner, const std::string& name)
      : container(owner.register_module(name, std::make_shared<torch::nn::Module>())) {}
  template <typename L>
  void add(std::shared_ptr<L> layer) {
    container->register_module(std::to_string(layers.size()), layer);
    layers.push_back(std::move(layer));
  }
  at::Tensor forward(at::Tensor x, Cache& cache) const {
    for (const auto& layer : layers) x = layer->forward(x, cache);
    return x;
  }
  std::shared_ptr<torch::nn::Module> container;
  std::vector<std::shared_ptr<Layer>> layers;
};

// conv1, the level layers, middle (residual, attention, residual), head.
struct Coder : torch::nn::Module {
  Cache new_cache() const { return Cache(size_t(slots)); }

 protected:
  // Encoder: conv1, downsamples, middle; decoder: conv1, middle, upsamples.
  // Registration order is the official one either way.
  void add_input(int64_t in, int64_t out, at::ScalarType dtype) {
    conv1 = register_module("conv1", std::make_shared<CausalConv>(in, out, 3, 3, slots, dtype));
  }
  void add_middle(int64_t c, at::ScalarType dtype) {
    middle = std::make_unique<Sequence>(*this, "middle");
    middle->add(std::make_shared<ResidualBlock>(c, c, slots, dtype));
    middle->add(std::make_shared<AttentionBlock>(c, dtype));
    middle->add(std::make_shared<ResidualBlock>(c, c, slots, dtype));
  }
  void add_head(int64_t c, int64_t out, at::ScalarType dtype) {
    auto head = register_module("head", std::make_shared<torch::nn::Module>());
    head_norm = head->register_module("0", std::make_shared<Norm>(c, false, dtype));
    head_conv = head->register_module("2", std::make_shared<CausalConv>(c, out, 3, 3, slots, dtype));
  }
  int slots = 0;
  std::shared_ptr<CausalConv> conv1, head_conv;
  std::shared_ptr<Norm> head_norm;
  std::unique_ptr<Sequence> levels, middle;
};

// [1, z, 1, 1, 1], fp32, on `device`: the latents' per-channel statistics.
at::Tensor per_channel(const std::vector<double>& values, const at::Device& device);

// "[1, 3, 5, 16, 16]"
std::string shape_text(const at::Tensor& t);

// What both VAEs' encode and decode loops need of them.
struct LatentSpace {
  int64_t z_dim = 0, spatial_factor = 0, temporal_factor = 0;
  const std::vector<double>& mean;
  const std::vector<double>& std;
};

// The encode both VAEs run: video [B, 3, 1 + 4k, H, W] checked, then the
// first frame alone and chunks of 4 through `encode_chunk` (the encoder
// with its cache, in the weights' dtype and device), conv1's mu channels,
// and (mu - mean) / std in fp32: [B, z, 1 + k, H/s, W/s].
at::Tensor encode_video(const at::Tensor& video, const LatentSpace& space, const Conv& conv1,
                        const std::function<at::Tensor(const at::Tensor& chunk)>& encode_chunk);

// The decode both run: latents [B, z, t, h, w] checked, back from (x -
// mean) / std in fp32, through conv2, then one latent frame at a time
// through `decode_frame` (the decoder with its cache, giving fp32 pixels),
// each handed to `sink` as it is (VideoVae::decode clamps, after tiles are
// blended).
void decode_latents(const at::Tensor& latents, const LatentSpace& space, const Conv& conv2,
                    const std::function<at::Tensor(const at::Tensor& frame)>& decode_frame,
                    const std::function<void(const at::Tensor& frames)>& sink);

}  // namespace wt::wan::vae_parts
