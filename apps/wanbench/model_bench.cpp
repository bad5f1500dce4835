#include "model_bench.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>

#include "wantrain/model/autocast.hpp"
#include "wantrain/model/wan_model.hpp"
#include "wantrain/train/flow_matching.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/memory.hpp"
#include "wantrain/util/options.hpp"
#include "wantrain/app/version.hpp"

namespace wt {
namespace {

struct ModelBenchConfig {
  std::string config_file, model_config, size = "32x32", precision = "fp32";
  int64_t batch = 2, frames = 5, attention_chunk = 0, grad_checkpoint = 0;
  int iters = 5, warmup = 1, threads = 0;
  bool json = false;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int run_model_bench(distributed::World&, int argc, char** argv) {
  ModelBenchConfig c;
  OptionSet options("wanbench model", "--model-config JSON [options]");
  options.group("model")
      .standard_options(&c.config_file)
      .add("model-config", &c.model_config, "model config JSON (data/configs/*.json)")
      .add("batch", &c.batch, "samples per step")
      .add("frames", &c.frames, "latent frames F")
      .add("size", &c.size, "latent HxW")
      .choice("precision", &c.precision, {"fp32", "bf16"}, "fp32, or bf16 autocast (fp32 weights)")
      .add("attention-chunk", &c.attention_chunk, "queries per attention chunk, as wantrain's (0: all at once)")
      .add("grad-checkpoint", &c.grad_checkpoint, "recompute every N-th block in backward (0: none)")
      .add("iters", &c.iters, "timed steps (the median is reported)")
      .add("warmup", &c.warmup, "untimed steps first")
      .add("threads", &c.threads, "CPU threads (0: LibTorch's default)")
      .flag("json", &c.json, "print JSON instead of the table");
  if (const auto outcome = options.parse(argc, argv); outcome != OptionSet::Outcome::Run) {
    std::cout << app::help_or_version(outcome, options);
    return kExitOk;
  }
  if (c.model_config.empty()) throw UsageError("option --model-config: the model config is required");
  if (c.iters < 1 || c.warmup < 0 || c.batch < 1 || c.frames < 1)
    throw UsageError("options --iters, --batch, --frames: must be at least 1 (--warmup at least 0)");
  if (c.attention_chunk < 0 || c.grad_checkpoint < 0)
    throw UsageError("options --attention-chunk, --grad-checkpoint: must be 0 (off) or more");
  const auto [height, width] = parse_height_width(c.size, "size");
  if (c.threads > 0) torch::set_num_threads(c.threads);

  const auto config = model::load_model_config(c.model_config);
  torch::manual_seed(0);
  model::WanModel net(config);
  // Random inputs of the real shapes; the head starts at zero, so give it weights
  // that make the backward pass do the work it does in training.
  {
    torch::NoGradGuard no_grad;
    net->head->head->weight.normal_(0.0, 0.02);
  }
  net->set_attention_chunk(c.attention_chunk);
  net->set_grad_checkpoint(c.grad_checkpoint);
  const auto x0 = torch::randn({c.batch, config.in_dim, c.frames, height, width});  // [B, C, F, H, W]
  const auto context = torch::randn({c.batch, config.text_len, config.text_dim});   // [B, L, D]
  std::vector<int64_t> indices(c.batch);
  for (int64_t i = 0; i < c.batch; ++i) indices[i] = i;
  const auto noisy = train::make_noisy_batch(x0, indices, 0, 0, {});

  std::vector<double> forward_s, step_s;
  int non_finite = 0;
  for (int i = 0; i < c.warmup + c.iters; ++i) {
    net->zero_grad();
    const auto start = std::chrono::steady_clock::now();
    at::Tensor loss;
    {
      model::AutocastScope autocast(c.precision == "bf16" ? torch::kBFloat16 : torch::kFloat32);
      loss = train::flow_matching_loss(net->forward(noisy.x_t, noisy.timesteps, context), noisy.target);
    }
    const double forward = seconds_since(start);
    loss.backward();
    const double step = seconds_since(start);
    if (!std::isfinite(loss.item<double>())) ++non_finite;
    if (i >= c.warmup) {
      forward_s.push_back(forward / double(c.batch));
      step_s.push_back(step / double(c.batch));
    }
  }
  const auto grid_tokens =
      c.frames / config.patch_size[0] * (height / config.patch_size[1]) * (width / config.patch_size[2]);
  const nlohmann::json row{{"model_config", c.model_config},
                           {"parameters", model::parameter_count(config)},
                           {"precision", c.precision},
                           {"attention_chunk", c.attention_chunk},
                           {"grad_checkpoint", c.grad_checkpoint},
                           {"batch", c.batch},
                           {"latents", {config.in_dim, c.frames, height, width}},
                           {"tokens", grid_tokens},
                           {"threads", torch::get_num_threads()},
                           {"forward_s_per_sample", median(forward_s)},
                           {"forward_backward_s_per_sample", median(step_s)},
                           {"peak_rss_mib", peak_rss_mib()},
                           {"non_finite_losses", non_finite}};
  if (c.json) {
    std::cout << row.dump() << "\n";
  } else {
    std::cout << fmt::format(
        "# wanbench model: {} iters (median) after {} warm-up, {} threads, attention chunk {}, grad checkpoint {}\n",
        c.iters, c.warmup, torch::get_num_threads(), c.attention_chunk, c.grad_checkpoint);
    std::cout << "  config                          params  prec  batch  latents          tokens  fwd s/sample  "
                 "fwd+bwd s/sample  peak RSS MiB  #non-finite\n";
    std::cout << fmt::format(
        "  {:<30} {:>7.3g}  {:<4}  {:>5}  [{},{},{},{}]  {:>9}  {:>12.4f}  {:>16.4f}  {:>12.0f}  {:>11}\n",
        c.model_config.substr(c.model_config.find_last_of('/') + 1), double(model::parameter_count(config)),
        c.precision, c.batch, config.in_dim, c.frames, height, width, grid_tokens, median(forward_s), median(step_s),
        peak_rss_mib(), non_finite);
  }
  return non_finite == 0 ? kExitOk : kExitFailure;
}

}  // namespace wt
