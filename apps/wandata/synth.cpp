// wandata synth: a synthetic dataset that a model can learn. Each sample is a
// Gaussian blob moving across the latent frames; its colour (a fixed mix of
// channels), radius, start and velocity are the sample's parameters, and the
// text embedding encodes exactly those parameters, one token each. So the
// latents are a deterministic function of the text embedding.
//
// The task (how parameters become text, each colour's channel mix, and the
// latent normalisation) comes from --task-seed and the shape options
// (--channels, --text-dim, and for the normalisation --frames and --size);
// which samples are drawn from --seed. A training and a validation set of
// one task differ in --seed only.
//
// With --condition i2v each sample also holds the image-to-video condition
// /y as a causal VAE makes it of [first frame, zeros...]: the frame mask,
// then the sample's first latent frame (a causal VAE's first latent frame
// sees the first pixel frame alone) and zeros for the rest; and with
// --clip-tokens T --clip-dim D, CLIP-like features /clip_fea of the first
// frame: its colour, radius and position, one token each, encoded as the
// text is. The motion is in the text only.
//
// With --condition vace each sample also holds a VACE model's context
// /vace_context [2C + 64, F, H, W] in wandata encode's layout for a control
// video with a mask of ones: the inactive half (zeros here, standing in for
// the latents of a masked-out video), the reactive latents, and 64 mask
// channels of ones. The control video shows a
// small dot of a fixed colour where the blob's centre is in each frame
// (what a pose or tracking video gives), and the text leaves out the
// blob's place and motion (--untold-place): only its colour and radius,
// so a model can only put the blob where the control says.
//
// With --condition fun-control each sample holds a Fun-Control model's y
// [2C, F, H, W] in wandata encode --condition fun-control's layout: the
// control video's latents (the same dot on the blob's centre, frame by
// frame) and the start frame's (zeros: no start frame, so that the place is
// in the control alone), the text again without the place (--untold-place).
//
// With --modes K, one prompt has K videos, as a real prompt has many: the
// samples come in groups of K that share a prompt (colour, radius, start
// and a base velocity, all in the text). Video k of a group starts on a
// circle of radius 0.25 about the frame's centre, at the angle of the
// prompt's start turned by 2 pi k / K, and moves at the base velocity
// turned as much, at a speed of 0.08 to 0.12 a frame. The videos are apart
// from the first frame on, so the mean of a prompt's videos (K fainter
// blobs) differs from every one of them, which a few-step sampler drawing
// that blurred mean shows.
//
// Latents are normalised per channel to zero mean and unit standard deviation,
// as Wan's VAE latents are by the VAE's (z - mean) / std: the statistics are
// those of a fixed calibration population of the task, the way a VAE's are
// constants measured once, so every dataset of the task and shape shares them.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <utility>
#include <tuple>

#include "commands.hpp"
#include "output_directory.hpp"
#include "wantrain/data/sampler.hpp"
#include "wantrain/data/shard.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/options.hpp"
#include "wantrain/util/progress.hpp"
#include "wantrain/app/version.hpp"

namespace wt {

namespace {

constexpr const char* kColours[] = {"red", "green", "blue", "white"};
constexpr int kParams = 6;  // colour, radius, x, y, vx, vy: one token each

struct SynthConfig {
  std::string config_file, out, size = "32x32", latent_dtype = "float32", text_dtype = "float32", condition = "none";
  int64_t samples = 64, shards = 2, frames = 1, channels = 16, text_len = 16, text_dim = 64, clip_tokens = 0,
          clip_dim = 0, modes = 1;
  uint64_t seed = 0, task_seed = 0;
  int64_t height = 0, width = 0;
  bool untold_place = false;  // the text holds the colour and radius alone
};

// The VACE context's mask channels (a VAE's 8 x 8 pixels per latent).
constexpr int64_t kVaceMaskChannels = 64;

double uniform(data::PortableRandom& r, double lo, double hi) {
  return lo + (hi - lo) * static_cast<double>(r.next() >> 11) * (1.0 / 9007199254740992.0);
}

// A blob's parameters, drawn from `r`.
struct Blob {
  int colour = 0;
  double radius = 0, cx = 0, cy = 0, vx = 0, vy = 0;
  explicit Blob(data::PortableRandom& r)
      : colour(static_cast<int>(r.below(4))),
        radius(uniform(r, 0.08, 0.2)),
        cx(uniform(r, 0.2, 0.8)),
        cy(uniform(r, 0.2, 0.8)),
        vx(uniform(r, -0.1, 0.1)),
        vy(uniform(r, -0.1, 0.1)) {}
};

// Sample `index` of a dataset of `c`: its prompt's blob (the text's), and
// the blob it shows (the prompt's with this sample's place and motion).
std::pair<Blob, Blob> draw_sample(const SynthConfig& c, int64_t index) {
  const int64_t prompt = index / c.modes, way = index % c.modes;
  data::PortableRandom r(c.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(prompt) + 1);
  Blob text(r);
  if (c.modes == 1) return {text, text};
  constexpr double kPi = 3.14159265358979323846;
  const double speed = 0.08 + 0.04 * std::hypot(text.vx, text.vy) / std::hypot(0.1, 0.1);
  const double angle = std::atan2(text.vy, text.vx);
  text.vx = speed * std::cos(angle);
  text.vy = speed * std::sin(angle);
  Blob shown = text;
  const double turn = 2 * kPi * double(way) / double(c.modes);
  shown.vx = speed * std::cos(angle + turn);
  shown.vy = speed * std::sin(angle + turn);
  // Apart from the first frame: a shared start would leave the mean of the
  // videos close to each of them over a few frames.
  const double place = std::atan2(text.cy - 0.5, text.cx - 0.5) + turn;
  shown.cx = 0.5 + 0.25 * std::cos(place);
  shown.cy = 0.5 + 0.25 * std::sin(place);
  return {text, shown};
}

// Samples drawn to measure the per-channel latent statistics.
constexpr int kCalibrationSamples = 512;

// The task, fixed by the task seed: how each parameter value becomes a
// D-vector, each colour's weights over the channels, and the per-channel
// normalisation of the latents.
class Task {
 public:
  explicit Task(const SynthConfig& c) : c_(c) {
    data::PortableRandom r(c.task_seed ^ 0x5EEDull);
    std::vector<float> f(c.text_dim), p(c.text_dim), g(4 * c.channels);
    for (auto& v : f) v = static_cast<float>(uniform(r, 1.0, 12.0));
    for (auto& v : p) v = static_cast<float>(uniform(r, 0.0, 6.283185307));
    for (auto& v : g) v = static_cast<float>(uniform(r, -1.5, 1.5));
    frequency_ = at::tensor(f);
    phase_ = at::tensor(p);
    colour_gain_ = at::tensor(g).view({4, c.channels});
    // Drawn after the rest: every other task's numbers stay as they were.
    std::vector<float> d(c.channels);
    for (auto& v : d) v = static_cast<float>(uniform(r, -1.5, 1.5));
    dot_gain_ = at::tensor(d);
    ys_ = at::linspace(0, 1, c.height).view({c.height, 1});  // [H, 1]
    xs_ = at::linspace(0, 1, c.width).view({1, c.width});    // [1, W]
    calibrate();
  }

  // Tokens of the text: every parameter, or the colour and radius alone.
  int told() const { return c_.untold_place ? 2 : kParams; }
  at::Tensor text(const Blob& b) const {
    const double params[kParams] = {b.colour / 3.0, b.radius, b.cx, b.cy, b.vx, b.vy};
    at::Tensor text = at::zeros({c_.text_len, c_.text_dim});  // [L, D]
    for (int t = 0; t < told(); ++t) text[t] = at::sin(frequency_ * params[t] + phase_);
    return text;
  }
  // What the first frame shows (colour, radius, position), as CLIP-like
  // features [T, D]: one token each, the text's encoding cut or tiled to D.
  at::Tensor picture_features(const Blob& b) const {
    const double params[4] = {b.colour / 3.0, b.radius, b.cx, b.cy};
    at::Tensor features = at::zeros({c_.clip_tokens, c_.clip_dim});
    const auto index = at::arange(c_.clip_dim) % c_.text_dim;
    for (int64_t t = 0; t < std::min<int64_t>(4, c_.clip_tokens); ++t)
      features[t] = at::sin(frequency_.index_select(0, index) * params[t] + phase_.index_select(0, index));
    return features;
  }
  // y [4 + C, F, H, W]: the mask of the first frame, its latents, zeros after.
  static at::Tensor condition(const at::Tensor& latents) {
    const int64_t f = latents.size(1);
    auto y = at::zeros({4 + latents.size(0), f, latents.size(2), latents.size(3)});
    y.narrow(0, 0, 4).select(1, 0).fill_(1);
    y.narrow(0, 4, latents.size(0)).select(1, 0).copy_(latents.select(1, 0));
    return y;
  }

  // The control video's latents [C, F, H, W]: a dot of radius 0.1 at the
  // blob's centre in each frame, in a fixed channel mix.
  at::Tensor control_dots(const Blob& b) const {
    const int64_t ch = c_.channels;
    auto dots = at::zeros({ch, c_.frames, c_.height, c_.width});
    for (int64_t f = 0; f < c_.frames; ++f) {
      const double fx = b.cx + b.vx * f, fy = b.cy + b.vy * f;
      const at::Tensor dot = at::exp(-((xs_ - fx).pow(2) + (ys_ - fy).pow(2)) / (2 * 0.1 * 0.1));  // [H, W]
      dots.select(1, f).copy_(dot_gain_.view({ch, 1, 1}) * dot);
    }
    return dots;
  }
  // The VACE context [2C + 64, F, H, W]: zeros (inactive), the control's
  // dots (reactive), the mask's ones.
  at::Tensor vace_context(const Blob& b) const {
    const int64_t ch = c_.channels;
    auto context = at::zeros({2 * ch + kVaceMaskChannels, c_.frames, c_.height, c_.width});
    context.narrow(0, ch, ch).copy_(control_dots(b));
    context.narrow(0, 2 * ch, kVaceMaskChannels).fill_(1);
    return context;
  }
  // A Fun-Control model's y [2C, F, H, W]: the control's dots, then zeros (no start frame).
  at::Tensor fun_control_y(const Blob& b) const {
    return at::cat({control_dots(b), at::zeros({c_.channels, c_.frames, c_.height, c_.width})}, 0);
  }

  at::Tensor latents(const Blob& b) const {  // [C, F, H, W], normalised
    return (raw_latents(b) - mean_.view({-1, 1, 1, 1})) / std_.view({-1, 1, 1, 1});
  }

 private:
  at::Tensor raw_latents(const Blob& b) const {
    at::Tensor latents = at::empty({c_.channels, c_.frames, c_.height, c_.width});  // [C, F, H, W]
    for (int64_t f = 0; f < c_.frames; ++f) {
      const double fx = b.cx + b.vx * f, fy = b.cy + b.vy * f;
      const at::Tensor blob = at::exp(-((xs_ - fx).pow(2) + (ys_ - fy).pow(2)) / (2 * b.radius * b.radius));  // [H, W]
      latents.select(1, f).copy_(colour_gain_[b.colour].view({c_.channels, 1, 1}) * blob);
    }
    return latents;
  }

  // Per-channel mean and std over a population of the task's own samples.
  void calibrate() {
    auto sum = at::zeros({c_.channels}, at::kDouble), sum_sq = at::zeros({c_.channels}, at::kDouble);
    data::PortableRandom r(c_.task_seed ^ 0xCA11B8A7Eull);
    for (int i = 0; i < kCalibrationSamples; ++i) {
      const auto x = raw_latents(Blob(r)).to(at::kDouble).flatten(1);  // [C, F*H*W]
      sum += x.sum(1);
      sum_sq += x.square().sum(1);
    }
    const double n = double(kCalibrationSamples) * c_.frames * c_.height * c_.width;
    const auto mean = sum / n;
    mean_ = mean.to(at::kFloat);
    std_ = (sum_sq / n - mean.square()).clamp_min(1e-12).sqrt().to(at::kFloat);
  }

  const SynthConfig& c_;
  at::Tensor frequency_, phase_;  // [D]
  at::Tensor colour_gain_;        // [4, C]
  at::Tensor dot_gain_;           // [C]: the control video's dot
  at::Tensor ys_, xs_;            // [H, 1], [1, W]
  at::Tensor mean_, std_;         // [C]
};

}  // namespace

int run_synth(distributed::World&, int argc, char** argv) {
  SynthConfig c;
  OptionSet options("wandata synth", "--out DIR [options]");
  options.group("synth")
      .standard_options(&c.config_file)
      .add("out", &c.out, "output directory (created; must not hold shards yet)")
      .add("samples", &c.samples, "number of samples")
      .add("shards", &c.shards, "number of shard files")
      .add("frames", &c.frames, "latent frames F (1: image-only)")
      .add("size", &c.size, "latent height x width, e.g. 32x32")
      .add("channels", &c.channels, "latent channels C (Wan: 16)")
      .add("text-len", &c.text_len, "text tokens L (zero-padded)")
      .add("text-dim", &c.text_dim, "text embedding width D (Wan: 4096)")
      .add("seed", &c.seed, "which samples: the same seeds give the same dataset")
      .add("task-seed", &c.task_seed,
           "the task (text encoding, colours, latent normalisation): a validation set takes the training set's "
           "task seed and another --seed")
      .choice("condition", &c.condition, {"none", "i2v", "vace", "fun-control"},
              "i2v: also the image-to-video condition /y of each sample's first frame; vace: a VACE context "
              "/vace_context whose control video is a dot on the blob's centre (implies --untold-place); "
              "fun-control: a Fun-Control model's /y of that control's latents and no start frame (implies "
              "--untold-place)")
      .flag("untold-place", &c.untold_place,
            "the text leaves out the blob's place and motion: only its colour and radius")
      .add("modes", &c.modes,
           "videos per prompt: samples in groups of K share a prompt, each moving its own way (the base velocity "
           "turned by 2 pi k / K); 1: every sample its own prompt")
      .add("clip-tokens", &c.clip_tokens, "with --condition i2v: CLIP-like features /clip_fea of T tokens (0: none)")
      .add("clip-dim", &c.clip_dim, "their width")
      .choice("latent-dtype", &c.latent_dtype, {"float32", "float16", "bfloat16"}, "how latents are stored")
      .choice("text-dtype", &c.text_dtype, {"float32", "float16"}, "how text embeddings are stored");
  if (const auto outcome = options.parse(argc, argv); outcome != OptionSet::Outcome::Run) {
    std::cout << app::help_or_version(outcome, options);
    return kExitOk;
  }
  if (c.out.empty()) throw UsageError("option --out: the output directory is required");
  std::tie(c.height, c.width) = parse_height_width(c.size, "size");
  if (c.samples < 1) throw UsageError("option --samples: must be at least 1");
  if (c.shards < 1 || c.shards > c.samples) throw UsageError("option --shards: must be between 1 and --samples");
  if (c.frames < 1 || c.channels < 1 || c.text_dim < 1)
    throw UsageError("options --frames, --channels, --text-dim: must be at least 1");
  if (c.text_len < kParams)
    throw UsageError(fmt::format("option --text-len: must be at least {} (one token per blob parameter)", kParams));

  if (c.modes < 1) throw UsageError("option --modes: must be at least 1");
  if (c.samples % c.modes != 0)
    throw UsageError(fmt::format("option --modes: --samples {} is no whole number of prompts of {} videos each",
                                 c.samples, c.modes));
  if ((c.clip_tokens > 0) != (c.clip_dim > 0) || c.clip_tokens < 0 || c.clip_dim < 0)
    throw UsageError("options --clip-tokens, --clip-dim: give both, positive, or neither");
  if (c.clip_tokens > 0 && c.condition != "i2v")
    throw UsageError("option --clip-tokens: the features are of the image condition: give --condition i2v");
  if (c.condition == "vace" || c.condition == "fun-control") c.untold_place = true;
  if (c.untold_place && c.modes > 1)
    throw UsageError("option --modes: a prompt's videos differ in place and motion, which --untold-place leaves out");
  prepare_output_directory(c.out);

  data::SampleShape shape{c.channels,
                          c.frames,
                          c.height,
                          c.width,
                          c.text_len,
                          c.text_dim,
                          data::parse_stored(c.latent_dtype),
                          data::parse_stored(c.text_dtype)};
  if (c.condition == "i2v") shape.condition_channels = 4 + c.channels;
  if (c.condition == "fun-control") shape.condition_channels = 2 * c.channels;
  if (c.condition == "vace") shape.vace_channels = 2 * c.channels + kVaceMaskChannels;
  shape.clip_tokens = c.clip_tokens;
  shape.clip_dim = c.clip_dim;
  const Task task(c);
  Progress progress("synth", c.samples);
  int64_t next = 0;
  for (int64_t k = 0; k < c.shards; ++k) {
    const int64_t end = data::shard_first_sample(k + 1, c.samples, c.shards);
    const std::string path = data::shard_path(c.out, k);
    data::ShardWriter writer(path, shape, end - next, /*with_prompt=*/true);
    for (int64_t row = 0; next < end; ++next, ++row) {
      const auto [prompt, b] = draw_sample(c, next);
      const auto latents = task.latents(b);
      data::SampleCondition condition;
      if (shape.has_condition())
        condition.y = c.condition == "fun-control" ? task.fun_control_y(b) : Task::condition(latents);
      if (shape.clip_tokens > 0) condition.clip_fea = task.picture_features(b);
      if (shape.has_vace()) condition.vace_context = task.vace_context(b);
      const std::string text =
          c.untold_place
              ? fmt::format("a {} blob of radius {:.2f}{}", kColours[b.colour], b.radius,
                            shape.has_vace() || c.condition == "fun-control" ? " where its control video puts it" : "")
          : c.modes == 1
              ? fmt::format("a {} blob of radius {:.2f} at ({:.2f}, {:.2f}) moving ({:+.2f}, {:+.2f}) per frame",
                            kColours[b.colour], b.radius, b.cx, b.cy, b.vx, b.vy)
              : fmt::format(
                    "a {} blob of radius {:.2f} in one of {} places around the centre from ({:.2f}, {:.2f}), "
                    "moving one of {} ways from ({:+.2f}, {:+.2f}) per frame",
                    kColours[prompt.colour], prompt.radius, c.modes, prompt.cx, prompt.cy, c.modes, prompt.vx,
                    prompt.vy);
      writer.write(row, latents, task.text(prompt), task.told(), text, condition);
      progress.advance();
    }
  }
  std::cout << fmt::format("wandata synth: wrote {} samples in {} shards to {}: latents {}, text_emb {}\n", c.samples,
                           c.shards, c.out, shape.latents_string(), shape.text_string());
  return kExitOk;
}

}  // namespace wt
