#include "sample_bench.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>

#include "bench_timing.hpp"
#include "scratch_dataset.hpp"
#include "wantrain/app/attention_chunk_option.hpp"
#include "wantrain/app/float_dtype.hpp"
#include "wantrain/app/version.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/memory.hpp"
#include "wantrain/util/options.hpp"
#include "wantrain/util/reporter.hpp"
#include "wantrain/wan/model/model_recipe.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/model/weights.hpp"
#include "wantrain/wan/sample/latent_comparison.hpp"
#include "wantrain/wan/sample/sampling_pipeline.hpp"
#include "wantrain/wan/sample/step_cache_calibration.hpp"

namespace wt {
namespace {

struct SampleBenchConfig {
  std::string config_file, model_config = "data/configs/wan-small.json", size = "16x16", solver = "unipc",
                           precision = "fp32", weights_dtype = "fp32", attention_chunk = "fused", cache = "none";
  int64_t frames = 1;
  int steps = 4, rounds = 3, threads = 0;
  double cfg = 5;
  std::string cache_threshold = "auto";
  bool cfg_parallel = false, shard_weights = false;
};

// The pipeline's lines are wansample's, not the benchmark's.
class Quiet : public Reporter {
 public:
  void report(Severity severity, const std::string& message) override {
    if (severity != Severity::Info) std::cerr << "wanbench sample: " << message << "\n";
  }
};

}  // namespace

int run_sample_bench(distributed::World& world, int argc, char** argv) {
  SampleBenchConfig c;
  OptionSet options("wanbench sample", "[options]");
  options.group("sample")
      .standard_options(&c.config_file)
      .add("model-config", &c.model_config, "model config JSON (t2v or ti2v), its weights random")
      .add("frames", &c.frames, "latent frames")
      .add("size", &c.size, "latent HxW")
      .add("steps", &c.steps, "N: each round samples with N and 2N steps; a step is their difference over N")
      .choice("solver", &c.solver, {"unipc", "dpm++", "euler"}, "the solver")
      .add("cfg", &c.cfg, "guidance scale (1: one forward a step, else two)")
      .choice("precision", &c.precision, {"fp32", "bf16"}, "matrix products in fp32 or bf16 (autocast)")
      .choice("weights-dtype", &c.weights_dtype, {"fp32", "bf16"}, "the blocks' Linears held in fp32 or bf16")
      .add("attention-chunk", &c.attention_chunk, "as wansample's --attention-chunk")
      .flag("cfg-parallel", &c.cfg_parallel, "under mpirun: the two branches of guidance on two halves of the ranks")
      .flag("shard-weights", &c.shard_weights, "under mpirun: each rank keeps 1/N of the blocks' weights")
      .choice("cache", &c.cache, {"none", "teacache", "magcache", "easycache"},
              "instead of a solver step: samples of N steps uncached and with this step cache in turn (teacache "
              "and magcache calibrated on the random model first), their median times, the evaluations and how "
              "close the latents come")
      .add("cache-threshold", &c.cache_threshold, "auto|X: the cache's threshold (auto: the method's)")
      .add("rounds", &c.rounds, "rounds of N and 2N steps, or with --cache of the two samples (the median is reported)")
      .add("threads", &c.threads, "CPU threads a rank (0: LibTorch's default)");
  if (const auto outcome = options.parse(argc, argv); outcome != OptionSet::Outcome::Run) {
    if (world.is_root()) std::cout << app::help_or_version(outcome, options);
    return kExitOk;
  }
  wan::WanConfig config;
  std::array<int64_t, 2> hw{};
  world.agree([&] {
    if (c.steps < 1 || c.rounds < 1 || c.frames < 1)
      throw UsageError("options --steps, --rounds, --frames: must be at least 1");
    const auto [h, w] = parse_height_width(c.size, "size");
    hw = {h, w};
    config = wan::load_model_config(c.model_config);
    if (config.image_conditioned())
      throw UsageError(fmt::format("option --model-config: {} is {}: wanbench sample takes t2v and ti2v models",
                                   c.model_config, wan::model_type_name(config.model_type)));
  });
  if (c.threads > 0) torch::set_num_threads(c.threads);
  // One random sample to condition on, and the model's random weights,
  // written once by rank 0 where every rank reads them.
  data::SampleShape shape;
  shape.channels = config.out_dim;
  shape.frames = c.frames;
  shape.height = hw[0];
  shape.width = hw[1];
  shape.text_len = config.text_len;
  shape.text_dim = config.text_dim;
  const ScratchDataset scratch(world, shape, 1);
  const std::string weights = scratch.directory + "/weights.safetensors";
  if (world.is_root()) {
    auto model = wan::build_model({config}).model;  // seed 0
    // Wan starts the head at zero: a velocity of zero whatever the blocks
    // did, which a cache would reuse for free. A head drawn at random makes
    // the cached latents differ where the cache costs something.
    if (c.cache != "none") model->head->head->weight.data().normal_(0, 0.02);
    wan::save_weights(*model, weights);
  }
  world.barrier();

  Quiet quiet;
  const ScopedReporter reporting(quiet);
  wan::SamplingRequest request;
  request.weights = weights;
  request.model_config = c.model_config;
  request.weights_dtype = app::float_dtype(c.weights_dtype);
  request.data = scratch.directory;
  request.solver = *wan::solver_from_name(c.solver);
  request.shift = 5.0;
  request.cfg = {c.cfg};
  request.compute_dtype = app::float_dtype(c.precision);
  request.attention_chunk = app::parse_attention_chunk(c.attention_chunk);
  request.cfg_parallel = c.cfg_parallel;
  request.shard_weights = c.shard_weights;
  auto seconds_for = [&](int steps) {
    auto r = request;
    r.steps = steps;
    wan::SamplingPipeline pipeline(world, r, torch::Device(torch::kCPU));
    world.barrier();
    const auto start = std::chrono::steady_clock::now();
    const auto latents = pipeline.sample();
    world.barrier();
    return seconds_since(start);
  };
  seconds_for(1);  // warm: the allocator, the page cache
  std::vector<double> per_step, whole, uncached_whole, cached_whole;
  at::Tensor uncached, cached;
  wan::CacheCounts counts;
  const auto method = wan::parse_cache_method(c.cache);
  auto cached_request = request;
  cached_request.steps = c.steps;
  if (method == wan::CacheMethod::TeaCache || method == wan::CacheMethod::MagCache) {
    auto calibrate = request;
    calibrate.steps = c.steps;
    const auto file = wan::calibrate_step_cache(world, wan::calibration_requests(calibrate, std::vector<int64_t>{0}),
                                                torch::Device(torch::kCPU));
    cached_request.cache_calibration = scratch.directory + "/step-cache.json";
    if (world.is_root()) wan::write_calibration_file(cached_request.cache_calibration, file);
    world.barrier();
  }
  cached_request.cache.method = method;
  if (c.cache_threshold != "auto") {
    char* end = nullptr;
    const double threshold = std::strtod(c.cache_threshold.c_str(), &end);
    if (c.cache_threshold.empty() || *end != '\0' || !std::isfinite(threshold))
      throw UsageError(fmt::format("option --cache-threshold: '{}' is not auto or a number", c.cache_threshold));
    cached_request.cache.threshold = threshold;
  }
  for (int round = 0; round < c.rounds; ++round) {
    if (method == wan::CacheMethod::None) {
      const double once = seconds_for(c.steps), twice = seconds_for(2 * c.steps);
      per_step.push_back((twice - once) / c.steps);
      whole.push_back(once);
      continue;
    }
    // The uncached and the cached sample of N steps, timed alike, in turn
    // (the cached one first every other round).
    auto plain = request;
    plain.steps = c.steps;
    for (const bool with_cache : {round % 2 == 1, round % 2 == 0}) {
      wan::SamplingPipeline pipeline(world, with_cache ? cached_request : plain, torch::Device(torch::kCPU));
      world.barrier();
      const auto start = std::chrono::steady_clock::now();
      (with_cache ? cached : uncached) = pipeline.sample();
      world.barrier();
      (with_cache ? cached_whole : uncached_whole).push_back(seconds_since(start));
      if (with_cache) counts = pipeline.step_caching()->counts();
    }
  }
  const int64_t tokens =
      c.frames / config.patch_size[0] * (hw[0] / config.patch_size[1]) * (hw[1] / config.patch_size[2]);
  if (world.is_root()) {
    std::cout << fmt::format(
        "# wanbench sample: {} ({:.1f} M parameters), {} tokens, {} solver, cfg {:g}, {} ({} weights), {} rank{}{}{}, "
        "{} thread(s) a rank, median of {} rounds of {}\n",
        c.model_config, double(wan::parameter_count(config)) / 1e6, tokens, c.solver, c.cfg, c.precision,
        c.weights_dtype, world.size(), world.size() == 1 ? "" : "s", c.cfg_parallel ? ", cfg-parallel" : "",
        c.shard_weights ? ", sharded weights" : "", torch::get_num_threads(), c.rounds,
        method == wan::CacheMethod::None
            ? fmt::format("{} and {} steps", c.steps, 2 * c.steps)
            : fmt::format("a sample of {} steps uncached and one with {}", c.steps, c.cache));
    std::cout << fmt::format("{:<34} {:>10}\n", "", "seconds");
    if (method == wan::CacheMethod::None) {
      std::cout << fmt::format("{:<34} {:>10.3f}\n", "a solver step", median(per_step));
      std::cout << fmt::format("{:<34} {:>10.3f}\n", fmt::format("a sample of {} steps, loading in", c.steps),
                               median(whole));
    } else {
      const auto m = wan::compare_latents(cached, uncached);
      const double range = (uncached.max() - uncached.min()).item<double>();
      const double psnr = 10 * std::log10(range * range / std::max(m.mse, 1e-30));
      std::cout << fmt::format("{:<34} {:>10.3f}\n", fmt::format("a sample of {} steps, uncached", c.steps),
                               median(uncached_whole));
      std::cout << fmt::format(
          "{:<34} {:>10.3f}\n",
          fmt::format("the same, {} ({:.2f}x)", c.cache, median(uncached_whole) / median(cached_whole)),
          median(cached_whole));
      std::cout << fmt::format("{:<34} {:>10}\n", "  model evaluations ran / skipped",
                               fmt::format("{} / {}", counts.ran, counts.skipped));
      std::cout << fmt::format("{:<34} {:>10.4f}\n", "  latents' correlation with uncached", m.correlation);
      std::cout << fmt::format("{:<34} {:>10.1f}\n", "  latents' PSNR against uncached (dB)", psnr);
    }
    std::cout << fmt::format("{:<34} {:>10.0f}\n", "peak RSS, rank 0 (MiB)", peak_rss_mib());
  }
  return kExitOk;
}

}  // namespace wt
