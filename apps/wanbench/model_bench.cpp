#include "bench_timing.hpp"
#include "model_bench.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>

#include "child_json.hpp"
#include "op_profile.hpp"
#include "wantrain/app/attention_chunk_option.hpp"
#include "wantrain/app/float_dtype.hpp"
#include "wantrain/nn/tensor_memory.hpp"
#include "wantrain/app/version.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/nn/autocast.hpp"
#include "wantrain/wan/model/model_recipe.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/model/flow_matching.hpp"
#include "wantrain/wan/plan/memory_plan.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/memory.hpp"
#include "wantrain/util/options.hpp"

namespace wt {
namespace {

struct ModelBenchConfig {
  std::string config_file, model_config, size = "32x32", precision = "fp32", attention_chunk = "fused";
  int64_t batch = 2, frames = 5, grad_checkpoint = 0;
  int iters = 5, warmup = 1, threads = 0, profile = 0;
  bool json = false, tokens_sweep = false;
};

// One configuration's forward and backward, and its memory against the plan:
// the tensors' bytes as LibTorch's allocator hands them out (what the plan
// predicts) and the process's resident set (which adds what malloc keeps).
struct Point {
  // attention_chunk: as asked (nn::kAutoAttentionChunk: auto), then as measure() ran it
  int64_t batch = 0, frames = 0, height = 0, width = 0, attention_chunk = 0, grad_checkpoint = 0;
  int64_t tokens = 0;
  double forward_s = 0, step_s = 0;               // per sample, medians
  double state_mib = 0;                           // tensors before the first forward: parameters, gradients, inputs
  double peak_mib = 0;                            // the most tensor bytes alive during the steps
  double runtime_mib = 0, peak_rss_mib = 0;       // the resident set before the model, and its high-water mark
  double plan_mib = 0, plan_activations_mib = 0;  // the plan's tensors (runtime excluded) and activations
  int non_finite = 0;
  std::vector<OpTime> ops;  // --profile: operators by self time over `iters` more steps
  double activations_mib() const { return peak_mib - state_mib; }
};

Point measure(const wan::WanConfig& config, const ModelBenchConfig& c, Point p) {
  nn::count_tensor_memory();
  nn::reset_peak_tensor_bytes();
  const double base_tensors = double(nn::live_tensor_bytes());
  p.runtime_mib = current_rss_bytes() / kMiB;
  const auto dtype = app::float_dtype(c.precision);
  {
    auto net = wan::build_model({config}).model;  // seed 0
    // Random inputs of the real shapes; the head starts at zero, so give it
    // weights that make the backward pass do the work it does in training.
    torch::NoGradGuard no_grad;
    net->head->head->weight.normal_(0.0, 0.02);
    net->set_attention_chunk(p.attention_chunk);
    net->set_grad_checkpoint(p.grad_checkpoint);
    for (auto& parameter : net->parameters()) parameter.mutable_grad() = torch::zeros_like(parameter);
    const auto x0 = torch::randn({p.batch, config.in_dim, p.frames, p.height, p.width});  // [B, C, F, H, W]
    const auto context = torch::randn({p.batch, config.text_len, config.text_dim});       // [B, L, D]
    std::vector<int64_t> indices(p.batch);
    for (int64_t i = 0; i < p.batch; ++i) indices[i] = i;
    const auto noisy = wan::make_noisy_batch(x0, indices, 0, 0, {});
    p.state_mib = (double(nn::live_tensor_bytes()) - base_tensors) / kMiB;

    torch::AutoGradMode grad_mode(true);
    auto forward_backward = [&] {
      net->zero_grad();
      at::Tensor loss;
      {
        nn::AutocastScope autocast(dtype, torch::kCPU);
        loss = wan::flow_matching_loss(net->forward(noisy.x_t, noisy.timesteps, context), noisy.target);
      }
      return loss;
    };
    std::vector<double> forward_s, step_s;
    for (int i = 0; i < c.warmup + c.iters; ++i) {
      const auto start = std::chrono::steady_clock::now();
      const auto loss = forward_backward();
      const double forward = seconds_since(start);
      loss.backward();
      const double step = seconds_since(start);
      if (!std::isfinite(loss.item<double>())) ++p.non_finite;
      if (i >= c.warmup) {
        forward_s.push_back(forward / double(p.batch));
        step_s.push_back(step / double(p.batch));
      }
    }
    p.peak_mib = (double(nn::peak_tensor_bytes()) - base_tensors) / kMiB;
    p.peak_rss_mib = peak_rss_mib();
    if (c.profile > 0) {  // after the timed steps and the peaks: the profiler's overhead stays out of them
      OpProfile profile;
      for (int i = 0; i < c.iters; ++i) forward_backward().backward();
      p.ops = profile.stop();
    }
    p.forward_s = median(forward_s);
    p.step_s = median(step_s);
  }

  wan::MemoryPlanSettings plan;
  plan.model = config;
  plan.step = {p.batch, {p.frames, p.height, p.width}, dtype, p.attention_chunk, p.grad_checkpoint};
  plan.optimizer = false;  // forward and backward only
  const auto memory = wan::plan_memory(plan);
  p.tokens = memory.activations.tokens;
  p.attention_chunk = memory.activations.attention_chunk;  // auto resolved, as the model resolved it
  p.plan_mib = memory.total() / kMiB;
  p.plan_activations_mib = memory.activations.total() / kMiB;
  return p;
}

nlohmann::json to_json(const Point& p) {
  return {{"batch", p.batch},
          {"latents", {p.frames, p.height, p.width}},
          {"tokens", p.tokens},
          {"attention_chunk", p.attention_chunk},
          {"grad_checkpoint", p.grad_checkpoint},
          {"forward_s_per_sample", p.forward_s},
          {"forward_backward_s_per_sample", p.step_s},
          {"state_mib", p.state_mib},
          {"peak_tensor_mib", p.peak_mib},
          {"activations_mib", p.activations_mib()},
          {"plan_mib", p.plan_mib},
          {"plan_activations_mib", p.plan_activations_mib},
          {"runtime_mib", p.runtime_mib},
          {"peak_rss_mib", p.peak_rss_mib},
          {"non_finite_losses", p.non_finite}};
}

Point from_json(const nlohmann::json& j) {
  Point p;
  p.batch = j.at("batch");
  p.frames = j.at("latents").at(0);
  p.height = j.at("latents").at(1);
  p.width = j.at("latents").at(2);
  p.tokens = j.at("tokens");
  p.attention_chunk = j.at("attention_chunk");
  p.grad_checkpoint = j.at("grad_checkpoint");
  p.forward_s = j.at("forward_s_per_sample");
  p.step_s = j.at("forward_backward_s_per_sample");
  p.state_mib = j.at("state_mib");
  p.peak_mib = j.at("peak_tensor_mib");
  p.plan_mib = j.at("plan_mib");
  p.plan_activations_mib = j.at("plan_activations_mib");
  p.runtime_mib = j.at("runtime_mib");
  p.peak_rss_mib = j.at("peak_rss_mib");
  p.non_finite = j.at("non_finite_losses");
  return p;
}

// Measures `p` in a process of its own (this program again, with --json):
// the allocator's state after a larger configuration would otherwise leave
// its mark on the next one's resident set.
Point measure_in_child(const ModelBenchConfig& c, const Point& p) {
  char self[4096] = {};
  const ssize_t length = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (length <= 0) throw Error("wanbench model --tokens-sweep: cannot find its own executable (/proc/self/exe)");
  auto quote = [](const std::string& text) {
    std::string out = "'";
    for (char ch : text) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    return out + "'";
  };
  const std::string command = fmt::format(
      "{} model --model-config {} --batch {} --frames {} --size {}x{} --precision {} --attention-chunk {} "
      "--grad-checkpoint {} --iters {} --warmup {} --threads {} --json",
      quote(std::string(self, size_t(length))), quote(c.model_config), p.batch, p.frames, p.height, p.width,
      c.precision, app::attention_chunk_text(p.attention_chunk), p.grad_checkpoint, c.iters, c.warmup,
      torch::get_num_threads());
  return from_json(bench::run_json_child(
      command, fmt::format("wanbench model --tokens-sweep: the point {}x{}x{}", p.frames, p.height, p.width)));
}

const char* kHeader =
    "  tokens  attention  checkpoint  fwd s/sample  fwd+bwd s/sample  tensors MiB  plan MiB  plan/meas.  "
    "activations MiB  plan act. MiB  peak RSS MiB  RSS/(plan+runtime)\n";

std::string row(const Point& p) {
  return fmt::format(
      "  {:>6}  {:<9}  {:<10}  {:>12.4f}  {:>16.4f}  {:>11.0f}  {:>8.0f}  {:>10.2f}  {:>15.0f}  {:>13.0f}  {:>12.0f}  "
      "{:>18.2f}\n",
      p.tokens,
      p.attention_chunk == nn::kFusedAttention ? std::string("fused")
      : p.attention_chunk > 0                  ? fmt::format("chunk {}", p.attention_chunk)
                                               : std::string("full"),
      p.grad_checkpoint > 0 ? fmt::format("every {}", p.grad_checkpoint) : "none", p.forward_s, p.step_s, p.peak_mib,
      p.plan_mib, p.plan_mib / p.peak_mib, p.activations_mib(), p.plan_activations_mib, p.peak_rss_mib,
      p.peak_rss_mib / (p.plan_mib + p.runtime_mib));
}

// 1k, 2k, 4k and 8k tokens (frames 1, 2, 4, 8 of --size), each with full
// attention (what the model did before chunking), chunked attention,
// chunked attention with every block checkpointed, and the fused kernel
// (the default); then the goals of docs/performance.md.
int tokens_sweep(const ModelBenchConfig& c, int64_t attention_chunk, int64_t height, int64_t width) {
  const int64_t chunk = attention_chunk > 0 ? attention_chunk : 512;
  struct Variant {
    int64_t chunk, checkpoint;
  };
  const std::vector<Variant> variants{{0, 0}, {chunk, 0}, {chunk, 1}, {nn::kFusedAttention, 0}};
  const std::vector<int64_t> frames{1, 2, 4, 8};
  std::vector<std::vector<Point>> points(variants.size());
  if (!c.json)
    std::cout
        << fmt::format(
               "# wanbench model --tokens-sweep: {}, batch {}, {}, latents Fx{}x{}, {} iters (median) after {} "
               "warm-up, {} threads, each point in a process of its own; tensors: the most bytes of tensors alive "
               "at once (LibTorch's allocator), activations: that minus parameters, gradients and inputs\n",
               c.model_config, c.batch, c.precision, height, width, c.iters, c.warmup, torch::get_num_threads())
        << kHeader;
  int non_finite = 0;
  nlohmann::json rows = nlohmann::json::array();
  for (const int64_t f : frames)
    for (size_t v = 0; v < variants.size(); ++v) {
      Point p;
      p.batch = c.batch;
      p.frames = f;
      p.height = height;
      p.width = width;
      p.attention_chunk = variants[v].chunk;
      p.grad_checkpoint = variants[v].checkpoint;
      p = measure_in_child(c, p);
      non_finite += p.non_finite;
      points[v].push_back(p);
      rows.push_back(to_json(p));
      if (!c.json) std::cout << row(p) << std::flush;
    }
  // The goals of docs/performance.md, "Memory against tokens".
  const auto& full = points[0];
  const auto& chunked = points[1];
  const auto& checkpointed = points[2];
  const auto& fused = points[3];
  double worst_plan = 0, worst_rss = 0;
  for (const auto& variant : points)
    for (const auto& p : variant) {
      worst_plan = std::max(worst_plan, std::abs(p.plan_mib / p.peak_mib - 1));
      worst_rss = std::max(worst_rss, std::abs((p.plan_mib + p.runtime_mib) / p.peak_rss_mib - 1));
    }
  auto growth = [](const std::vector<Point>& v, double Point::*field) { return v.back().*field / v.front().*field; };
  const nlohmann::json goals{
      {"peak_8k_over_1k_full", growth(full, &Point::peak_mib)},
      {"peak_8k_over_1k_chunked", growth(chunked, &Point::peak_mib)},
      {"peak_8k_over_1k_chunked_checkpointed", growth(checkpointed, &Point::peak_mib)},
      {"peak_rss_8k_over_1k_full", growth(full, &Point::peak_rss_mib)},
      {"peak_rss_8k_over_1k_chunked", growth(chunked, &Point::peak_rss_mib)},
      {"peak_rss_8k_over_1k_chunked_checkpointed", growth(checkpointed, &Point::peak_rss_mib)},
      {"peak_rss_8k_over_1k_fused", growth(fused, &Point::peak_rss_mib)},
      {"peak_rss_marginal_growth_fused",
       (fused[3].peak_rss_mib - fused[2].peak_rss_mib) / (fused[2].peak_rss_mib - fused[1].peak_rss_mib)},
      {"step_time_8k_fused_over_chunked", fused[3].step_s / chunked[3].step_s},
      {"activations_4k_checkpointed_over_chunked", checkpointed[2].activations_mib() / chunked[2].activations_mib()},
      {"step_time_4k_checkpointed_over_chunked", checkpointed[2].step_s / chunked[2].step_s},
      {"largest_plan_error", worst_plan},
      {"largest_plan_error_rss", worst_rss}};
  if (c.json) {
    std::cout << nlohmann::json{{"model_config", c.model_config},
                                {"precision", c.precision},
                                {"points", rows},
                                {"goals", goals}}
                     .dump()
              << "\n";
  } else {
    auto g = [&](const char* key) { return goals[key].get<double>(); };
    std::cout << fmt::format(
        "  peak(8k) / peak(1k), tensors: full attention {:.2f}x, chunked {:.2f}x, chunked + checkpointing {:.2f}x "
        "(goal <= 10x); peak RSS: {:.2f}x, {:.2f}x, {:.2f}x\n"
        "  activations at 4k tokens, checkpointing / not: {:.2f} (goal <= 1/3); its step time {:.2f}x\n"
        "  plan vs measured tensors: within {:.0f}% at every point (goal 25%); plan + runtime vs peak RSS: within "
        "{:.0f}%\n",
        g("peak_8k_over_1k_full"), g("peak_8k_over_1k_chunked"), g("peak_8k_over_1k_chunked_checkpointed"),
        g("peak_rss_8k_over_1k_full"), g("peak_rss_8k_over_1k_chunked"), g("peak_rss_8k_over_1k_chunked_checkpointed"),
        g("activations_4k_checkpointed_over_chunked"), g("step_time_4k_checkpointed_over_chunked"), 100 * worst_plan,
        100 * worst_rss);
  }
  return non_finite == 0 ? kExitOk : kExitFailure;
}

}  // namespace

int run_model_bench(distributed::World& world, int argc, char** argv) {
  ModelBenchConfig c;
  OptionSet options("wanbench model", "--model-config JSON [options]");
  options.group("model")
      .standard_options(&c.config_file)
      .add("model-config", &c.model_config, "model config JSON (data/configs/*.json)")
      .add("batch", &c.batch, "samples per step")
      .add("frames", &c.frames, "latent frames F")
      .add("size", &c.size, "latent HxW")
      .choice("precision", &c.precision, {"fp32", "bf16"}, "fp32, or bf16 autocast (fp32 weights)")
      .add("attention-chunk", &c.attention_chunk,
           "attention as wantrain's: fused, auto, 0 (the whole score matrix) or queries per chunk (the table "
           "shows what ran)")
      .add("grad-checkpoint", &c.grad_checkpoint, "recompute every N-th block in backward (0: none)")
      .flag("tokens-sweep", &c.tokens_sweep,
            "measure frames 1, 2, 4, 8 of --size (1k to 8k tokens at 64x64), each with full attention, chunked "
            "attention (--attention-chunk Q, else 512), chunked with every block checkpointed and fused "
            "attention, against the memory plan")
      .add("iters", &c.iters, "timed steps (the median is reported)")
      .add("warmup", &c.warmup, "untimed steps first")
      .add("threads", &c.threads, "CPU threads (0: LibTorch's default)")
      .add("profile", &c.profile,
           "then profile --iters more steps with LibTorch's autograd profiler and print the N operators with the "
           "most self time (0: off)")
      .flag("json", &c.json, "print JSON instead of the table");
  if (const auto outcome = options.parse(argc, argv); outcome != OptionSet::Outcome::Run) {
    std::cout << app::help_or_version(outcome, options);
    return kExitOk;
  }
  if (c.model_config.empty()) throw UsageError("option --model-config: the model config is required");
  if (c.iters < 1 || c.warmup < 0 || c.batch < 1 || c.frames < 1)
    throw UsageError("options --iters, --batch, --frames: must be at least 1 (--warmup at least 0)");
  const int64_t attention_chunk = app::parse_attention_chunk(c.attention_chunk);
  if (c.grad_checkpoint < 0 || c.profile < 0)
    throw UsageError("options --grad-checkpoint, --profile: must be 0 (off) or more");
  if (c.tokens_sweep && c.profile > 0) throw UsageError("option --profile: profile one point, not --tokens-sweep");
  // Each point is a process of its own, started here: not under a launcher.
  if (c.tokens_sweep && world.size() > 1)
    throw UsageError("option --tokens-sweep: run wanbench model without mpirun or srun");
  if (c.tokens_sweep && c.grad_checkpoint > 0)
    throw UsageError("option --grad-checkpoint: --tokens-sweep measures with and without checkpointing itself");
  const auto [height, width] = parse_height_width(c.size, "size");
  if (c.threads > 0) torch::set_num_threads(c.threads);
  const auto config = load_bench_model_config(c.model_config);
  if (c.tokens_sweep) return tokens_sweep(c, attention_chunk, height, width);

  Point p;
  p.batch = c.batch;
  p.frames = c.frames;
  p.height = height;
  p.width = width;
  p.attention_chunk = attention_chunk;
  p.grad_checkpoint = c.grad_checkpoint;
  p = measure(config, c, p);
  if (c.json) {
    auto out = to_json(p);
    out["model_config"] = c.model_config;
    out["parameters"] = wan::parameter_count(config);
    out["precision"] = c.precision;
    out["threads"] = torch::get_num_threads();
    if (c.profile > 0) {
      auto ops = nlohmann::json::array();
      for (size_t i = 0; i < std::min(size_t(c.profile), p.ops.size()); ++i)
        ops.push_back({{"name", p.ops[i].name},
                       {"calls_per_step", p.ops[i].calls / c.iters},
                       {"self_ms_per_step", p.ops[i].self_ms / c.iters},
                       {"total_ms_per_step", p.ops[i].total_ms / c.iters}});
      out["profile"] = ops;
    }
    std::cout << out.dump() << "\n";
  } else {
    std::cout << fmt::format(
                     "# wanbench model: {} ({:.3g} parameters), batch {}, {}, latents [{},{},{},{}], {} iters "
                     "(median) after {} warm-up, {} threads\n",
                     c.model_config, double(wan::parameter_count(config)), c.batch, c.precision, config.in_dim,
                     c.frames, height, width, c.iters, c.warmup, torch::get_num_threads())
              << kHeader << row(p);
    if (c.profile > 0)
      std::cout << fmt::format("# operators by self time, forward and backward, over {} profiled steps\n", c.iters)
                << format_op_times(p.ops, size_t(c.profile), c.iters);
  }
  return p.non_finite == 0 ? kExitOk : kExitFailure;
}

wan::WanConfig load_bench_model_config(const std::string& path) {
  const auto config = wan::load_model_config(path);
  if (config.image_conditioned())
    throw UsageError(
        fmt::format("option --model-config: {} is an {} model; wanbench measures text-to-video models (an "
                    "image model's step adds a wider patch embedding and, with CLIP, a second "
                    "cross-attention)",
                    path, wan::model_type_name(config.model_type)));
  return config;
}

}  // namespace wt
