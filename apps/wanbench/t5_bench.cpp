#include "bench_timing.hpp"
#include "t5_bench.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>

#include "op_profile.hpp"
#include "wantrain/app/float_dtype.hpp"
#include "wantrain/app/version.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/io/safetensors.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/memory.hpp"
#include "wantrain/util/options.hpp"
#include "wantrain/wan/encoders/t5_encoder.hpp"
#include "wantrain/wan/model/weights.hpp"

namespace wt {
namespace {

struct T5BenchConfig {
  std::string config_file, t5_config, weights, save_weights, save_inputs, save_outputs, dtype = "bf16";
  int64_t layers = 0, vocab = 0, tokens = 100, prompts = 1, seed = 0;
  int iters = 3, warmup = 1, threads = 0, profile = 0;
  bool json = false;
};

// The options; UsageError naming the option.
OptionSet::Outcome parse_t5_bench(const distributed::World& world, int argc, char** argv, T5BenchConfig& c) {
  OptionSet options("wanbench t5", "[options]");
  options.group("t5")
      .standard_options(&c.config_file)
      .add("t5-config", &c.t5_config, "umT5 config JSON (wan/encoders/t5_encoder.hpp's keys; empty: umT5-XXL)")
      .add("layers", &c.layers, "blocks, in place of the config's (0: the config's)")
      .add("vocab", &c.vocab, "vocabulary, in place of the config's (0: the config's; a lookup, it costs no time)")
      .add("weights", &c.weights,
           "weights (.pth or safetensors, official or Hugging Face names); empty: random ones drawn from --seed")
      .add("seed", &c.seed, "seed of the random weights, and (plus 1) of the token ids")
      .add("tokens", &c.tokens, "tokens per prompt")
      .add("prompts", &c.prompts, "prompts per forward")
      .choice("dtype", &c.dtype, {"bf16", "fp32"}, "the weights' dtype, which the encoder computes in")
      .add("iters", &c.iters, "timed forwards (the median is reported); 0 with --save-weights: only write the files")
      .add("warmup", &c.warmup, "untimed forwards first")
      .add("threads", &c.threads, "CPU threads (0: LibTorch's default)")
      .add("save-weights", &c.save_weights, "write the weights used (safetensors, official names, --dtype)")
      .add("save-inputs", &c.save_inputs, "write the token ids and mask used (safetensors: ids, mask; fp32)")
      .add("save-outputs", &c.save_outputs, "write the last forward's output (safetensors: out; fp32)")
      .add("profile", &c.profile,
           "then profile one more forward with LibTorch's profiler and print the N operators with the most self "
           "time (0: off)")
      .flag("json", &c.json, "print one JSON line instead of the table");
  if (const auto outcome = options.parse(argc, argv); outcome != OptionSet::Outcome::Run) {
    std::cout << app::help_or_version(outcome, options);
    return outcome;
  }
  if (world.size() != 1) throw UsageError("wanbench t5 measures one process: run it without mpirun");
  if (c.iters < 0 || c.warmup < 0 || c.threads < 0 || c.profile < 0 || c.layers < 0 || c.vocab < 0)
    throw UsageError("options --iters, --warmup, --threads, --profile, --layers, --vocab: must be 0 or more");
  if (c.tokens < 1 || c.prompts < 1) throw UsageError("options --tokens, --prompts: must be at least 1");
  if (c.iters == 0 && c.save_weights.empty() && c.save_inputs.empty())
    throw UsageError("option --iters: 0 only writes --save-weights or --save-inputs, and neither is given");
  return OptionSet::Outcome::Run;
}

}  // namespace

int run_t5_bench(distributed::World& world, int argc, char** argv) {
  T5BenchConfig c;
  if (parse_t5_bench(world, argc, argv, c) != OptionSet::Outcome::Run) return kExitOk;
  if (c.threads > 0) torch::set_num_threads(c.threads);
  auto config = c.t5_config.empty() ? wan::T5Config{} : wan::load_t5_config(c.t5_config);
  if (c.layers > 0) config.num_layers = c.layers;
  if (c.vocab > 0) config.vocab = c.vocab;
  const auto dtype = app::float_dtype(c.dtype);

  const double runtime_mib = current_rss_bytes() / kMiB;
  auto start = std::chrono::steady_clock::now();
  torch::manual_seed(uint64_t(c.seed));
  wan::T5Encoder encoder(config, dtype);  // drawn as the official init_weights draws
  if (!c.weights.empty()) wan::load_weights(*encoder, wan::open_t5_weights(c.weights));
  const double load_s = seconds_since(start);
  encoder->eval();
  int64_t parameters = 0, weight_bytes = 0;
  io::NamedTensors weights;
  for (const auto& item : encoder->named_parameters()) {
    weights.emplace_back(item.key(), item.value());
    parameters += item.value().numel();
    weight_bytes += item.value().numel() * int64_t(item.value().element_size());
  }
  if (!c.save_weights.empty()) io::write_safetensors(c.save_weights, weights, dtype);
  weights.clear();

  // Token ids from a seed of their own, so that loading the same weights
  // from a file gives the same ids as drawing them; no padding.
  torch::manual_seed(uint64_t(c.seed) + 1);
  const auto ids = torch::randint(1, config.vocab, {c.prompts, c.tokens}, torch::kLong);  // [B, L]
  const auto mask = torch::ones({c.prompts, c.tokens}, torch::kLong);                     // [B, L]
  if (!c.save_inputs.empty())
    io::write_safetensors(c.save_inputs, {{"ids", ids.to(torch::kFloat)}, {"mask", mask.to(torch::kFloat)}},
                          torch::kFloat);
  if (c.iters == 0) return kExitOk;
  const double ready_mib = current_rss_bytes() / kMiB;

  torch::NoGradGuard no_grad;
  at::Tensor out;
  std::vector<double> seconds;
  for (int i = 0; i < c.warmup + c.iters; ++i) {
    start = std::chrono::steady_clock::now();
    out = encoder->forward(ids, mask);  // [B, L, dim], --dtype
    if (i >= c.warmup) seconds.push_back(seconds_since(start));
  }
  const double peak_mib = peak_rss_mib();
  if (!c.save_outputs.empty()) io::write_safetensors(c.save_outputs, {{"out", out}}, torch::kFloat);
  std::vector<OpTime> ops;
  if (c.profile > 0) {
    OpProfile profile;
    encoder->forward(ids, mask);
    ops = profile.stop();
  }

  const double weight_mib = double(weight_bytes) / kMiB;
  if (c.json) {
    std::cout << nlohmann::json{{"t5_config", c.t5_config},
                                {"layers", config.num_layers},
                                {"vocab", config.vocab},
                                {"dtype", c.dtype},
                                {"prompts", c.prompts},
                                {"tokens", c.tokens},
                                {"threads", torch::get_num_threads()},
                                {"parameters", parameters},
                                {"weight_bytes", weight_bytes},
                                {"load_s", load_s},
                                {"encode_s", median(seconds)},
                                {"encode_s_all", seconds},
                                {"runtime_rss_mib", runtime_mib},
                                {"ready_rss_mib", ready_mib},
                                {"peak_rss_mib", peak_mib},
                                {"peak_rss_over_weights", peak_mib / weight_mib}}
                     .dump()
              << "\n";
    return kExitOk;
  }
  std::cout << fmt::format(
                   "# wanbench t5: {} (dim {}, ffn {}, {} heads, {} layers, vocab {}; {:.3f} G parameters), {}, {}, "
                   "{} iters (median) after {} warm-up, {} threads\n",
                   c.t5_config.empty() ? "umT5-XXL" : c.t5_config, config.dim, config.dim_ffn, config.num_heads,
                   config.num_layers, config.vocab, double(parameters) / 1e9, c.dtype,
                   c.weights.empty() ? fmt::format("random weights (seed {})", c.seed) : c.weights, c.iters, c.warmup,
                   torch::get_num_threads())
            << "  prompts  tokens  encode s  load s  weights MiB  runtime MiB  peak RSS MiB  peak RSS / weights\n"
            << fmt::format("  {:>7}  {:>6}  {:>8.3f}  {:>6.1f}  {:>11.1f}  {:>11.1f}  {:>12.1f}  {:>18.3f}\n",
                           c.prompts, c.tokens, median(seconds), load_s, weight_mib, runtime_mib, peak_mib,
                           peak_mib / weight_mib);
  if (c.profile > 0)
    std::cout << "# operators by self time, one forward\n" << format_op_times(ops, size_t(c.profile), 1);
  return kExitOk;
}

}  // namespace wt
