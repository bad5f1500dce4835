// wandata synth: a synthetic dataset that a model can learn. Each sample is a
// Gaussian blob moving across the latent frames; its colour (a fixed mix of
// channels), radius, start and velocity are the sample's parameters, and the
// text embedding encodes exactly those parameters, one token each. So the
// latents are a deterministic function of the text embedding.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <iostream>
#include <tuple>

#include "commands.hpp"
#include "output_directory.hpp"
#include "data/sampler.hpp"
#include "data/shard.hpp"
#include "dist/world.hpp"
#include "util/error.hpp"
#include "util/exit_codes.hpp"
#include "util/options.hpp"
#include "util/progress.hpp"

namespace wt {

namespace {

constexpr const char* kColours[] = {"red", "green", "blue", "white"};
constexpr int kParams = 6;  // colour, radius, x, y, vx, vy: one token each

struct SynthConfig {
  std::string config_file, out, size = "32x32", latent_dtype = "float32", text_dtype = "float32";
  int64_t samples = 64, shards = 2, frames = 1, channels = 16, text_len = 16, text_dim = 64;
  uint64_t seed = 0;
  int64_t height = 0, width = 0;
};

double uniform(data::PortableRandom& r, double lo, double hi) {
  return lo + (hi - lo) * static_cast<double>(r.next() >> 11) * (1.0 / 9007199254740992.0);
}

// Fixed per dataset seed: how each parameter value becomes a D-vector, and
// each colour's weights over the channels.
struct Encoding {
  at::Tensor frequency, phase;  // [D]
  at::Tensor colour_gain;       // [4, C]
  explicit Encoding(const SynthConfig& c) {
    data::PortableRandom r(c.seed ^ 0x5EEDull);
    std::vector<float> f(c.text_dim), p(c.text_dim), g(4 * c.channels);
    for (auto& v : f) v = static_cast<float>(uniform(r, 1.0, 12.0));
    for (auto& v : p) v = static_cast<float>(uniform(r, 0.0, 6.283185307));
    for (auto& v : g) v = static_cast<float>(uniform(r, -1.5, 1.5));
    frequency = at::tensor(f);
    phase = at::tensor(p);
    colour_gain = at::tensor(g).view({4, c.channels});
  }
};

}  // namespace

int run_synth(World&, int argc, char** argv) {
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
      .add("seed", &c.seed, "seed: the same seed gives the same dataset")
      .choice("latent-dtype", &c.latent_dtype, {"float32", "float16", "bfloat16"}, "how latents are stored")
      .choice("text-dtype", &c.text_dtype, {"float32", "float16"}, "how text embeddings are stored");
  if (options.parse(argc, argv) != OptionSet::Outcome::Run) {
    std::cout << options.help_text();
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

  prepare_output_directory(c.out);

  const data::SampleShape shape{c.channels, c.frames, c.height, c.width, c.text_len, c.text_dim,
                                data::parse_stored(c.latent_dtype), data::parse_stored(c.text_dtype)};
  const Encoding enc(c);
  const at::Tensor ys = at::linspace(0, 1, c.height).view({c.height, 1});  // [H, 1]
  const at::Tensor xs = at::linspace(0, 1, c.width).view({1, c.width});    // [1, W]
  Progress progress("synth", c.samples);
  int64_t next = 0;
  for (int64_t k = 0; k < c.shards; ++k) {
    const int64_t end = data::shard_first_sample(k + 1, c.samples, c.shards);
    const std::string path = data::shard_path(c.out, k);
    data::ShardWriter writer(path, shape, end - next, /*with_prompt=*/true);
    for (int64_t row = 0; next < end; ++next, ++row) {
      data::PortableRandom r(c.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(next) + 1);
      const int colour = static_cast<int>(r.below(4));
      const double radius = uniform(r, 0.08, 0.2), cx = uniform(r, 0.2, 0.8), cy = uniform(r, 0.2, 0.8);
      const double vx = uniform(r, -0.1, 0.1), vy = uniform(r, -0.1, 0.1);
      const double params[kParams] = {colour / 3.0, radius, cx, cy, vx, vy};

      at::Tensor text = at::zeros({c.text_len, c.text_dim});  // [L, D]
      for (int t = 0; t < kParams; ++t) text[t] = at::sin(enc.frequency * params[t] + enc.phase);
      at::Tensor latents = at::empty({c.channels, c.frames, c.height, c.width});  // [C, F, H, W]
      for (int64_t f = 0; f < c.frames; ++f) {
        const double fx = cx + vx * f, fy = cy + vy * f;
        const at::Tensor blob = at::exp(-((xs - fx).pow(2) + (ys - fy).pow(2)) / (2 * radius * radius));  // [H, W]
        latents.select(1, f).copy_(enc.colour_gain[colour].view({c.channels, 1, 1}) * blob);
      }
      writer.write(row, latents, text, kParams,
                   fmt::format("a {} blob of radius {:.2f} at ({:.2f}, {:.2f}) moving ({:+.2f}, {:+.2f}) per frame",
                               kColours[colour], radius, cx, cy, vx, vy));
      progress.advance();
    }
  }
  std::cout << fmt::format("wandata synth: wrote {} samples in {} shards to {}: latents {}, text_emb {}\n", c.samples,
                           c.shards, c.out, shape.latents_string(), shape.text_string());
  return kExitOk;
}

}  // namespace wt
