#include "bench_timing.hpp"
#include "optim_bench.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <iostream>

#include "wantrain/app/version.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/wan/model/model_recipe.hpp"
#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/train/adamw_step.hpp"
#include "wantrain/train/ema.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/options.hpp"

namespace wt {
namespace {

struct OptimBenchConfig {
  std::string config_file, model_config = "data/configs/wan-small.json";
  int rounds = 7, threads = 1;
};

// The model's trainable parameters with gradients, and an AdamW over them
// that has taken one step (its state exists, as in training).
struct Subject {
  std::vector<at::Tensor> parameters;
  std::unique_ptr<torch::optim::AdamW> optimizer;
  std::unique_ptr<train::Ema> ema;
  explicit Subject(const wan::WanConfig& config) {
    auto net = wan::build_model({config}).model;  // seed 0
    for (auto& p : net->parameters()) {
      parameters.push_back(p.detach().clone().requires_grad_());
      parameters.back().mutable_grad() = torch::randn_like(p) * 1e-3;
    }
    optimizer = std::make_unique<torch::optim::AdamW>(
        parameters, torch::optim::AdamWOptions(1e-4).betas({0.9, 0.999}).weight_decay(0.01));
    optimizer->step();
    train::Ema::NamedTensors named;
    for (size_t i = 0; i < parameters.size(); ++i) named.emplace_back(std::to_string(i), parameters[i]);
    ema = std::make_unique<train::Ema>(named, 0.999);
  }
};

}  // namespace

int run_optim_bench(distributed::World& world, int argc, char** argv) {
  OptimBenchConfig c;
  OptionSet options("wanbench optim", "[options]");
  options.group("optim")
      .standard_options(&c.config_file)
      .add("model-config", &c.model_config, "model config JSON whose parameters are stepped")
      .add("rounds", &c.rounds, "rounds, each timing every variant once in turn (the median is reported)")
      .add("threads", &c.threads, "CPU threads (a rank's share of the cores)");
  if (const auto outcome = options.parse(argc, argv); outcome != OptionSet::Outcome::Run) {
    if (world.is_root()) std::cout << app::help_or_version(outcome, options);
    return kExitOk;
  }
  world.agree([&] {
    if (world.size() != 1) throw UsageError("wanbench optim: run it without mpirun (one process)");
    if (c.rounds < 1 || c.threads < 1) throw UsageError("options --rounds, --threads: must be at least 1");
  });
  torch::set_num_threads(c.threads);
  const auto config = wan::load_model_config(c.model_config);
  Subject s(config);
  int64_t elements = 0;
  for (const auto& p : s.parameters) elements += p.numel();

  using Clock = std::chrono::steady_clock;
  struct Variant {
    const char* name;
    std::function<void()> run;
    std::vector<double> seconds;
  };
  std::vector<Variant> variants = {
      {"AdamW: torch::optim::AdamW loop", [&] { s.optimizer->step(); }, {}},
      {"AdamW: _foreach_ ops", [&] { train::foreach_adamw_step(*s.optimizer); }, {}},
      {"AdamW: fused pass (wantrain on CPU)", [&] { train::fused_adamw_step(*s.optimizer); }, {}},
      {"EMA: lerp_ per tensor (wantrain on CPU)", [&] { s.ema->update(); }, {}},
      {"EMA: multi-tensor", [&] { s.ema->update_multi_tensor(); }, {}},
  };
  for (auto& v : variants) v.run();  // warm: caches and the allocator
  for (int round = 0; round < c.rounds; ++round)
    for (auto& v : variants) {
      const auto start = Clock::now();
      v.run();
      v.seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    }
  std::cout << fmt::format(
      "# wanbench optim: {} ({} tensors, {:.1f} M parameters), {} thread(s), median of {} rounds\n", c.model_config,
      s.parameters.size(), double(elements) / 1e6, c.threads, c.rounds);
  std::cout << fmt::format("{:<42} {:>10} {:>12}\n", "variant", "ms", "vs first");
  for (size_t i = 0; i < variants.size(); ++i) {
    const size_t baseline = i < 3 ? 0 : 3;
    std::cout << fmt::format("{:<42} {:>10.2f} {:>11.2f}x\n", variants[i].name, 1e3 * median(variants[i].seconds),
                             median(variants[baseline].seconds) / median(variants[i].seconds));
  }
  return kExitOk;
}

}  // namespace wt
