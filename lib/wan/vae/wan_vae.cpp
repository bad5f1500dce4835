#include "wantrain/wan/vae/wan_vae.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "wantrain/util/error.hpp"

namespace wt::wan {
namespace vae_parts {

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
                  at::IntArrayRef stride = {1, 1, 1}, at::IntArrayRef padding = {0, 0, 0}) {
  if (x.is_cpu() && x.scalar_type() == at::kFloat && at::hasMKLDNN() && at::globalContext().userEnabledMkldnn())
    return at::mkldnn_convolution(x.contiguous(), weight.contiguous(), bias, padding, stride, {1, 1, 1}, 1);
  return at::conv3d(x, weight, bias, stride, padding);
}

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
    const auto q = qkv.select(1, 0).permute({0, 2, 3, 1}) * (1 / std::sqrt(double(c)));  // [B, T, HW, C]
    const auto k = qkv.select(1, 1).transpose(1, 2);                                     // [B, T, C, HW]
    const auto v = qkv.select(1, 2).transpose(1, 2);                                     // [B, T, C, HW]
    auto p = at::matmul(q, k);                                                           // [B, T, HW, HW]
    p = x.scalar_type() == at::kFloat ? at::softmax(p, -1) : at::softmax(p, -1, at::kFloat).to(p.scalar_type());
    const auto out = at::matmul(v, p.transpose(-1, -2)).transpose(1, 2).reshape({b, c, t, h, w});
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
at::Tensor upsample_conv(const at::Tensor& x, int64_t n, const Conv& conv) {
  const int64_t b = x.size(0), c = x.size(1) / n, t = x.size(2), h = x.size(3), w = x.size(4);
  const int64_t o = conv.weight.size(0);
  const auto taps = torch::tensor({1.f, 0.f, 0.f, 0.f, 1.f, 1.f, 1.f, 1.f, 0.f, 0.f, 0.f, 1.f}, conv.weight.device())
                        .view({2, 2, 3});  // [parity, tap, kernel row]
  const auto kernels = at::einsum("pai,qbj,ocij->pqocab", {taps, taps, conv.weight.to(torch::kFloat)})
                           .reshape({4 * o, c, 1, 2, 2})
                           .to(conv.weight.scalar_type());  // [(py, px, O), C, 1, 2, 2]
  const auto y = conv3d(x.reshape({b * n, c, t, h, w}), kernels, conv.bias.repeat({4}), {1, 1, 1},
                        {0, 1, 1});  // [B n, 4 O, T, H + 1, W + 1]
  const auto parts = y.view({b, n, 2, 2, o, t, h + 1, w + 1});
  auto out = at::empty({b, o, t, n, h, 2, w, 2}, y.options());
  for (int64_t py = 0; py < 2; ++py)
    for (int64_t px = 0; px < 2; ++px)
      out.select(7, px).select(5, py).copy_(
          parts.select(3, px).select(2, py).narrow(4, py, h).narrow(5, px, w).permute({0, 2, 3, 1, 4, 5}));
  return out.view({b, o, t * n, 2 * h, 2 * w});
}

struct Resample : Layer {
  Resample(int64_t c, bool up, bool in_time, int& slots, at::ScalarType dtype) : up(up), in_time(in_time) {
    auto resample = register_module("resample", std::make_shared<torch::nn::Module>());
    conv = resample->register_module(
        "1", std::make_shared<Conv>(std::vector<int64_t>{up ? c / 2 : c, c, 3, 3}, dtype));  // 0: pad or upsample
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

struct Encoder : Coder {
  Encoder(const VaeConfig& c, at::ScalarType dtype) {
    add_input(3, c.dim, dtype);
    levels = std::make_unique<Sequence>(*this, "downsamples");
    const auto& mult = c.dim_mult;
    int64_t in = c.dim;
    double scale = 1.0;
    for (size_t i = 0; i < mult.size(); ++i) {
      const int64_t out = c.dim * mult[i];
      for (int64_t j = 0; j < c.num_res_blocks; ++j, in = out) {
        levels->add(std::make_shared<ResidualBlock>(in, out, slots, dtype));
        if (attention_at(c, scale)) levels->add(std::make_shared<AttentionBlock>(out, dtype));
      }
      if (i + 1 == mult.size()) break;
      levels->add(std::make_shared<Resample>(out, false, c.temperal_downsample[i], slots, dtype));
      scale /= 2;
    }
    add_middle(in, dtype);
    add_head(in, 2 * c.z_dim, dtype);
  }
  at::Tensor forward(const at::Tensor& x, Cache& cache) const {
    auto y = levels->forward(conv1->forward(x, cache), cache);
    return head_conv->forward(middle->forward(y, cache), cache, head_norm.get());
  }
  static bool attention_at(const VaeConfig& c, double scale) {
    for (double s : c.attn_scales)
      if (s == scale) return true;  // powers of two: exact, as the official `in`
    return false;
  }
};

struct Decoder : Coder {
  Decoder(const VaeConfig& c, at::ScalarType dtype) {
    const auto& mult = c.dim_mult;
    const int64_t levels_n = int64_t(mult.size());
    const int64_t top = c.dim * mult.back();
    add_input(c.z_dim, top, dtype);
    add_middle(top, dtype);
    levels = std::make_unique<Sequence>(*this, "upsamples");
    double scale = std::ldexp(1.0, int(2 - levels_n));
    int64_t previous = top;
    for (int64_t i = 0; i < levels_n; ++i) {
      const int64_t out = c.dim * mult[size_t(levels_n - 1 - i)];
      // A resample halves the channels it doubles in size (levels 1 to 3).
      int64_t in = i == 0 ? previous : previous / 2;
      for (int64_t j = 0; j <= c.num_res_blocks; ++j, in = out) {
        levels->add(std::make_shared<ResidualBlock>(in, out, slots, dtype));
        if (Encoder::attention_at(c, scale)) levels->add(std::make_shared<AttentionBlock>(out, dtype));
      }
      previous = out;
      if (i + 1 == levels_n) break;
      // temperal_upsample is temperal_downsample reversed.
      levels->add(std::make_shared<Resample>(out, true, c.temperal_downsample[size_t(levels_n - 2 - i)], slots, dtype));
      scale *= 2;
    }
    add_head(previous, 3, dtype);
  }
  at::Tensor forward(const at::Tensor& x, Cache& cache) const {
    auto y = levels->forward(middle->forward(conv1->forward(x, cache), cache), cache);
    return head_conv->forward(y, cache, head_norm.get());
  }
};

}  // namespace vae_parts

namespace {

std::string shape(const at::Tensor& t) { return fmt::format("[{}]", fmt::join(t.sizes(), ", ")); }

// [1, z, 1, 1, 1], fp32, on `device`.
at::Tensor per_channel(const std::vector<double>& values, const at::Device& device) {
  return torch::tensor(values, torch::TensorOptions().dtype(torch::kDouble))
      .to(device, torch::kFloat)
      .view({1, -1, 1, 1, 1});
}

}  // namespace

WanVaeImpl::WanVaeImpl(const VaeConfig& config, at::ScalarType dtype) : config_(config) {
  check_vae_config(config, "VAE config");
  if (dtype != at::kFloat && dtype != at::kBFloat16)
    throw UsageError(fmt::format("VAE: weights must be float32 or bfloat16, not {}", c10::toString(dtype)));
  torch::NoGradGuard no_grad;
  encoder_ = register_module("encoder", std::make_shared<vae_parts::Encoder>(config, dtype));
  conv1_ = register_module("conv1", std::make_shared<vae_parts::Conv>(
                                        std::vector<int64_t>{2 * config.z_dim, 2 * config.z_dim, 1, 1, 1}, dtype));
  conv2_ = register_module(
      "conv2", std::make_shared<vae_parts::Conv>(std::vector<int64_t>{config.z_dim, config.z_dim, 1, 1, 1}, dtype));
  decoder_ = register_module("decoder", std::make_shared<vae_parts::Decoder>(config, dtype));
}

int64_t WanVaeImpl::latent_frames(int64_t frames) const { return 1 + (frames - 1) / config_.temporal_factor(); }
int64_t WanVaeImpl::video_frames(int64_t latent_frames) const {
  return 1 + (latent_frames - 1) * config_.temporal_factor();
}

at::Tensor WanVaeImpl::encode(const at::Tensor& video) {
  const int64_t f = config_.spatial_factor();
  if (video.dim() != 5 || video.size(1) != 3 || video.size(2) < 1 || (video.size(2) - 1) % 4 != 0 ||
      video.size(3) < f || video.size(3) % f != 0 || video.size(4) < f || video.size(4) % f != 0)
    throw UsageError(fmt::format(
        "VAE encode: video {} must be [B, 3, 1 + 4k, H, W] with H and W positive multiples of {}", shape(video), f));
  torch::NoGradGuard no_grad;
  const auto& weight = conv1_->weight;
  const int64_t b = video.size(0), frames = video.size(2), z = config_.z_dim;
  auto latents = torch::empty({b, z, latent_frames(frames), video.size(3) / f, video.size(4) / f},
                              weight.options().dtype(torch::kFloat));  // [B, z, 1 + k, H/8, W/8], fp32
  // Only mu is kept: the first z output channels of conv1 (1x1x1, frame by frame).
  const auto mu_weight = weight.narrow(0, 0, z), mu_bias = conv1_->bias.narrow(0, 0, z);
  auto cache = encoder_->new_cache();
  int64_t done = 0;
  for (int64_t first = 0; first < frames; first += first == 0 ? 1 : 4) {
    const auto chunk = video.narrow(2, first, first == 0 ? 1 : 4).to(weight.device(), weight.scalar_type());
    const auto mu = vae_parts::conv3d(encoder_->forward(chunk, cache), mu_weight, mu_bias);
    latents.narrow(2, done, mu.size(2)).copy_(mu);
    done += mu.size(2);
  }
  // In fp32, times 1/std, as the official wrapper.
  return latents.sub_(per_channel(config_.latents_mean, weight.device()))
      .mul_(per_channel(config_.latents_std, weight.device()).reciprocal_());
}

void WanVaeImpl::decode(const at::Tensor& latents, const FrameSink& sink) {
  if (latents.dim() != 5 || latents.size(1) != config_.z_dim || latents.size(2) < 1 || latents.size(3) < 1 ||
      latents.size(4) < 1)
    throw UsageError(fmt::format("VAE decode: latents {} must be [B, {}, t, h, w]", shape(latents), config_.z_dim));
  torch::NoGradGuard no_grad;
  const auto& weight = conv2_->weight;
  // Back to the VAE's latent space in fp32, dividing by 1/std as the official wrapper.
  const auto z = latents.to(weight.device(), torch::kFloat)
                     .div(per_channel(config_.latents_std, weight.device()).reciprocal_())
                     .add_(per_channel(config_.latents_mean, weight.device()));
  const auto x = vae_parts::conv3d(z.to(weight.scalar_type()), weight, conv2_->bias);  // [B, z, t, h, w]
  auto cache = decoder_->new_cache();
  for (int64_t i = 0; i < x.size(2); ++i) {
    sink(decoder_->forward(x.narrow(2, i, 1), cache).to(torch::kFloat).clamp_(-1, 1));  // [B, 3, 1 or 4, H, W]
  }
}

at::Tensor WanVaeImpl::decode(const at::Tensor& latents) {
  const int64_t f = config_.spatial_factor();
  at::Tensor video;
  int64_t done = 0;
  decode(latents, [&](const at::Tensor& frames) {
    if (!video.defined())
      video =
          torch::empty({latents.size(0), 3, video_frames(latents.size(2)), f * latents.size(3), f * latents.size(4)},
                       frames.options());  // [B, 3, 1 + 4 (t - 1), H, W], fp32
    video.narrow(2, done, frames.size(2)).copy_(frames);
    done += frames.size(2);
  });
  return video;
}

}  // namespace wt::wan
