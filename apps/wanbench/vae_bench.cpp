#include "bench_timing.hpp"
#include "vae_bench.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "child_json.hpp"
#include "op_profile.hpp"
#include "wantrain/app/float_dtype.hpp"
#include "wantrain/app/version.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/io/safetensors.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/memory.hpp"
#include "wantrain/util/options.hpp"
#include "wantrain/wan/model/weights.hpp"
#include "wantrain/wan/vae/vae_config.hpp"
#include "wantrain/wan/vae/vae_tiling.hpp"
#include "wantrain/wan/vae/video_vae.hpp"

namespace wt {
namespace {

struct VaeBenchConfig {
  std::string config_file, vae_config, weights, save_weights, save_inputs, save_outputs;
  std::string frames = "17", size = "128x128", dtype = "fp32", pass = "both", tiling = "off";
  int64_t batch = 1, seed = 0;
  int iters = 3, warmup = 1, threads = 0, profile = 0;
  bool json = false;
};

// One video length's measurement.
struct Point {
  int64_t frames = 0;
  double encode_s = 0, decode_s = 0;           // medians; 0 where not measured
  double ready_rss_mib = 0, peak_rss_mib = 0;  // after the weights and inputs are made; the high-water mark
  double weight_mib = 0;                       // the parameters' bytes
  int64_t parameters = 0;
  std::vector<double> encode_all, decode_all;  // every timed pass
  std::vector<OpTime> encode_ops, decode_ops;  // --profile
};

bool ends_with(const std::string& s, const std::string& end) {
  return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
}

// Random weights that keep activations of order 1 through every block, as
// tests/e2e/vae_reference_test.cpp draws them (the fresh module's own draw
// lets them grow or vanish, and timings on denormals or infinities would
// mean nothing): the norms' gamma around 1, convs at unit gain, small
// biases, and the decoder's last conv at 0.3 so that little is clamped.
void randomize(wan::VideoVae& vae, uint64_t seed) {
  torch::manual_seed(seed);
  torch::NoGradGuard no_grad;
  for (auto& item : vae.named_parameters()) {
    auto& p = item.value();
    if (ends_with(item.key(), ".gamma")) {
      p.copy_(1 + 0.3 * torch::randn(p.sizes()));
    } else if (ends_with(item.key(), ".bias")) {
      p.copy_(0.1 * torch::randn(p.sizes()));
    } else {
      const double gain = item.key() == "decoder.head.2.weight" ? 0.3 : 1.0;
      p.copy_(torch::randn(p.sizes()) * (gain / std::sqrt(double(p.numel() / p.size(0)))));
    }
  }
}

std::vector<int64_t> parse_frames(const std::string& text) {
  std::vector<int64_t> frames;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    const bool digits = !part.empty() && part.size() <= 6 && part.find_first_not_of("0123456789") == std::string::npos;
    if (!digits || std::stoll(part) < 1 || (std::stoll(part) - 1) % 4 != 0)
      throw UsageError(
          fmt::format("option --frames: '{}' is not a list of frame counts 1 + 4k, e.g. 17 or 17,81", text));
    frames.push_back(std::stoll(part));
  }
  if (frames.empty()) throw UsageError("option --frames: give at least one frame count, e.g. 17");
  return frames;
}

Point measure(const wan::VideoVaeConfig& config, const VaeBenchConfig& c, int64_t frames, int64_t width,
              int64_t height) {
  Point p;
  p.frames = frames;
  const auto dtype = app::float_dtype(c.dtype);
  torch::manual_seed(uint64_t(c.seed));
  const auto vae =
      c.weights.empty() ? wan::make_video_vae(config, dtype) : wan::open_video_vae(c.weights, config, dtype);
  if (c.weights.empty()) randomize(*vae, uint64_t(c.seed));
  if (c.tiling != "off") {  // tiles of the given size (wan/vae/vae_tiling.hpp)
    const auto choice = wan::VaeTilingChoice::parse(c.tiling);
    if (choice.mode != wan::VaeTilingChoice::Mode::Tiles)
      throw UsageError("option --vae-tiling: off or WIDTHxHEIGHT (what is measured is not chosen for the host)");
    const auto tiling = wan::VaeTiling::of_tile(choice.width, choice.height, config.spatial_factor());
    vae->set_tiling(tiling);
  }
  io::NamedTensors weights;
  for (const auto& item : vae->named_parameters()) {
    weights.emplace_back(item.key(), item.value());
    p.weight_mib += double(item.value().numel() * item.value().element_size()) / kMiB;
    p.parameters += item.value().numel();
  }
  if (!c.save_weights.empty()) io::write_safetensors(c.save_weights, weights, dtype);
  weights.clear();

  // The inputs from a seed of their own, so that loading the same weights
  // from a file gives the same video and latents as drawing them.
  torch::manual_seed(uint64_t(c.seed) + 1);
  const int64_t f = config.spatial_factor();
  const auto video = torch::rand({c.batch, 3, frames, height, width}) * 2 - 1;  // [B, 3, T, H, W], fp32
  const auto latents =
      torch::randn({c.batch, config.z_dim(), vae->latent_frames(frames), height / f, width / f});  // [B, z, t, h, w]
  if (!c.save_inputs.empty())
    io::write_safetensors(c.save_inputs, {{"video", video}, {"latents", latents}}, torch::kFloat);
  p.ready_rss_mib = current_rss_bytes() / kMiB;
  if (c.iters == 0) return p;

  torch::NoGradGuard no_grad;
  const bool encode = c.pass != "decode", decode = c.pass != "encode";
  at::Tensor encoded, decoded;
  for (int i = 0; i < c.warmup + c.iters; ++i) {
    if (encode) {
      const auto start = std::chrono::steady_clock::now();
      encoded = vae->encode(video);  // [B, z, t, h, w], fp32
      if (i >= c.warmup) p.encode_all.push_back(seconds_since(start));
    }
    if (decode) {
      const auto start = std::chrono::steady_clock::now();
      decoded = vae->decode(latents);  // [B, 3, T, H, W], fp32
      if (i >= c.warmup) p.decode_all.push_back(seconds_since(start));
    }
  }
  p.peak_rss_mib = peak_rss_mib();
  p.encode_s = median(p.encode_all);
  p.decode_s = median(p.decode_all);
  if (!c.save_outputs.empty()) {
    io::NamedTensors outputs;
    if (encoded.defined()) outputs.emplace_back("latents", encoded);
    if (decoded.defined()) outputs.emplace_back("decoded", decoded);
    io::write_safetensors(c.save_outputs, outputs, torch::kFloat);
  }
  if (c.profile > 0) {  // after the timings and the peak: the profiler's overhead stays out of them
    if (encode) {
      OpProfile profile;
      vae->encode(video);
      p.encode_ops = profile.stop();
    }
    if (decode) {
      OpProfile profile;
      vae->decode(latents);
      p.decode_ops = profile.stop();
    }
  }
  return p;
}

nlohmann::json to_json(const Point& p) {
  return {{"frames", p.frames},           {"encode_s", p.encode_s},           {"decode_s", p.decode_s},
          {"encode_s_all", p.encode_all}, {"decode_s_all", p.decode_all},     {"parameters", p.parameters},
          {"weight_mib", p.weight_mib},   {"ready_rss_mib", p.ready_rss_mib}, {"peak_rss_mib", p.peak_rss_mib}};
}

Point from_json(const nlohmann::json& j) {
  Point p;
  p.frames = j.at("frames");
  p.encode_s = j.at("encode_s");
  p.decode_s = j.at("decode_s");
  p.encode_all = j.at("encode_s_all").get<std::vector<double>>();
  p.decode_all = j.at("decode_s_all").get<std::vector<double>>();
  p.parameters = j.at("parameters");
  p.weight_mib = j.at("weight_mib");
  p.ready_rss_mib = j.at("ready_rss_mib");
  p.peak_rss_mib = j.at("peak_rss_mib");
  return p;
}

std::string quote(const std::string& text) {
  std::string out = "'";
  for (char ch : text) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

// Measures `frames` in a process of its own (this program again, with
// --json), so that each length's peak RSS is its own.
Point measure_in_child(const VaeBenchConfig& c, int64_t frames) {
  char self[4096] = {};
  const ssize_t length = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (length <= 0) throw Error("wanbench vae: cannot find its own executable (/proc/self/exe)");
  std::string command = fmt::format(
      "{} vae --frames {} --size {} --batch {} --dtype {} --pass {} --iters {} --warmup {} --threads {} --seed {} "
      "--vae-tiling {} --json",
      quote(std::string(self, size_t(length))), frames, c.size, c.batch, c.dtype, c.pass, c.iters, c.warmup,
      torch::get_num_threads(), c.seed, quote(c.tiling));
  if (!c.vae_config.empty()) command += " --vae-config " + quote(c.vae_config);
  if (!c.weights.empty()) command += " --weights " + quote(c.weights);
  return from_json(bench::run_json_child(command, fmt::format("wanbench vae: {} frames", frames)));
}

std::string row(const Point& p, int64_t width, int64_t height) {
  auto seconds = [](double s) { return s > 0 ? fmt::format("{:.3f}", s) : std::string("-"); };
  return fmt::format("  {:>6}  {:>9}  {:>9}  {:>9}  {:>11.1f}  {:>13.1f}  {:>12.1f}\n", p.frames,
                     fmt::format("{}x{}", width, height), seconds(p.encode_s), seconds(p.decode_s), p.weight_mib,
                     p.ready_rss_mib, p.peak_rss_mib);
}

}  // namespace

int run_vae_bench(distributed::World& world, int argc, char** argv) {
  VaeBenchConfig c;
  OptionSet options("wanbench vae", "[options]");
  options.group("vae")
      .standard_options(&c.config_file)
      .add("vae-config", &c.vae_config,
           "VAE config JSON (wan/vae/vae_config.hpp's keys, Wan2.1's or Wan2.2's VAE; empty: the released shape of "
           "the VAE --weights holds, or Wan2.1's)")
      .add("weights", &c.weights,
           "weights (.pth or safetensors, official or diffusers names); empty: random ones drawn from --seed")
      .add("seed", &c.seed, "seed of the random weights, and (plus 1) of the video and latents")
      .add("frames", &c.frames,
           "video frames, 1 + 4k; several, comma-separated (17,81), measure each in a process of its own")
      .add("size", &c.size, "video width x height in pixels, multiples of the VAE's spatial factor (8; Wan2.2's: 16)")
      .add("batch", &c.batch, "videos per encode and decode")
      .choice("dtype", &c.dtype, {"fp32", "bf16"}, "the weights' dtype, which the VAE computes in")
      .choice("pass", &c.pass, {"both", "encode", "decode"}, "what to measure")
      .add("vae-tiling", &c.tiling, "off, or WxH: encode and decode in tiles of WxH pixels (wansample --vae-tiling)")
      .add("iters", &c.iters, "timed passes (the median is reported); 0 with --save-weights: only write the files")
      .add("warmup", &c.warmup, "untimed passes first")
      .add("threads", &c.threads, "CPU threads (0: LibTorch's default)")
      .add("save-weights", &c.save_weights, "write the weights used (safetensors, official names, --dtype)")
      .add("save-inputs", &c.save_inputs, "write the video and latents used (safetensors: video, latents; fp32)")
      .add("save-outputs", &c.save_outputs, "write the last pass's output (safetensors: latents, decoded; fp32)")
      .add("profile", &c.profile,
           "then profile one more encode and decode with LibTorch's profiler and print the N operators with the "
           "most self time (0: off)")
      .flag("json", &c.json, "print one JSON line instead of the table");
  set_option_names(options.setting_names());  // the library's settings that errors name, as these options
  if (const auto outcome = options.parse(argc, argv); outcome != OptionSet::Outcome::Run) {
    std::cout << app::help_or_version(outcome, options);
    return kExitOk;
  }
  if (world.size() != 1) throw UsageError("wanbench vae measures one process: run it without mpirun");
  const auto frames = parse_frames(c.frames);
  const auto sizes = parse_sizes(c.size, "WxH", "128x128", "size");
  const int64_t width = sizes[0], height = sizes[1];
  if (c.iters < 0 || c.warmup < 0 || c.batch < 1 || c.threads < 0 || c.profile < 0)
    throw UsageError("options --iters, --warmup, --threads, --profile: must be 0 or more; --batch at least 1");
  if (c.iters == 0 && c.save_weights.empty() && c.save_inputs.empty())
    throw UsageError("option --iters: 0 only writes --save-weights or --save-inputs, and neither is given");
  const bool files = !c.save_weights.empty() || !c.save_inputs.empty() || !c.save_outputs.empty();
  if (frames.size() > 1 && (files || c.profile > 0))
    throw UsageError(
        "option --frames: give one frame count with --save-weights, --save-inputs, --save-outputs or "
        "--profile");
  if (c.threads > 0) torch::set_num_threads(c.threads);
  const auto config = wan::video_vae_config(c.weights, c.vae_config);
  const int64_t f = config.spatial_factor();
  if (width % f != 0 || height % f != 0)
    throw UsageError(fmt::format("option --size: {} must be multiples of {} (the VAE's spatial factor)", c.size, f));

  std::vector<Point> points;
  auto next_point = [&](size_t i) {
    points.push_back(frames.size() == 1 ? measure(config, c, frames[i], width, height)
                                        : measure_in_child(c, frames[i]));
  };
  next_point(0);
  if (c.iters == 0) return kExitOk;
  if (!c.json)
    std::cout << fmt::format(
                     "# wanbench vae: {} ({:.1f} M parameters), {}, {}, batch {}, {} iters (median) after {} "
                     "warm-up, {} threads{}\n",
                     config.description() + (c.vae_config.empty() ? "" : " of " + c.vae_config),
                     double(points[0].parameters) / 1e6, c.dtype,
                     c.weights.empty() ? fmt::format("random weights (seed {})", c.seed) : c.weights, c.batch, c.iters,
                     c.warmup, torch::get_num_threads(),
                     frames.size() > 1 ? ", each length in a process of its own" : "")
              << "  frames       size   encode s   decode s  weights MiB  ready RSS MiB  peak RSS MiB\n"
              << row(points[0], width, height) << std::flush;
  for (size_t i = 1; i < frames.size(); ++i) {
    next_point(i);
    if (!c.json) std::cout << row(points.back(), width, height) << std::flush;
  }
  const double growth = points.back().peak_rss_mib / points.front().peak_rss_mib;
  if (c.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& p : points) rows.push_back(to_json(p));
    nlohmann::json out = frames.size() == 1 ? to_json(points[0]) : nlohmann::json{{"points", rows}};
    out["vae_config"] = c.vae_config;
    out["width"] = width;
    out["height"] = height;
    out["batch"] = c.batch;
    out["dtype"] = c.dtype;
    out["pass"] = c.pass;
    out["threads"] = torch::get_num_threads();
    if (frames.size() > 1) out["peak_rss_last_over_first"] = growth;
    std::cout << out.dump() << "\n";
  } else {
    if (frames.size() > 1)
      std::cout << fmt::format("  peak RSS, {} frames / {} frames ({}): {:.2f}\n", frames.back(), frames.front(),
                               c.pass == "both" ? "encode and decode" : c.pass, growth);
    if (c.profile > 0) {
      const auto& p = points[0];
      if (!p.encode_ops.empty())
        std::cout << "# operators by self time, one encode\n" << format_op_times(p.encode_ops, size_t(c.profile), 1);
      if (!p.decode_ops.empty())
        std::cout << "# operators by self time, one decode\n" << format_op_times(p.decode_ops, size_t(c.profile), 1);
    }
  }
  return kExitOk;
}

}  // namespace wt
