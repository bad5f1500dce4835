#include "bench_timing.hpp"
#include "step_bench.hpp"

#include <fmt/format.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <chrono>
#include <tuple>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "model_bench.hpp"
#include "wantrain/app/float_dtype.hpp"
#include "wantrain/distributed/backend.hpp"
#include "wantrain/distributed/mpi_comm.hpp"
#include "wantrain/distributed/reducer.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/wan/model/model_recipe.hpp"
#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/train/engine.hpp"
#include "wantrain/wan/objective/flow_matching_objective.hpp"
#include "wantrain/util/threads.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/options.hpp"
#include "wantrain/app/version.hpp"
#include "wantrain/distributed/mpi_check.hpp"

namespace wt {
namespace {

struct StepBenchConfig {
  std::string config_file, model_config, size = "16x16", precision = "fp32", grad_comm_dtype = "fp32";
  int64_t batch = 2, frames = 1;
  int grad_accum = 1, iters = 10, warmup = 2, rounds = 3, threads = 0, sync_iters = 10;
  double bucket_mb = 25;
  int zero = 0;
  int sp = 1;
  bool json = false;
};

using Clock = std::chrono::steady_clock;
double over_ranks(const distributed::World& world, double value, MPI_Op op) {
  double out = 0;
  MPI_CHECK(MPI_Allreduce(&value, &out, 1, MPI_DOUBLE, op, world.comm()));
  return out;
}

// Mean step time and split over `iters` steps, averaged over ranks (so the
// phases still add up to no more than the step).
train::StepTimes time_steps(const distributed::World& world, train::Engine& engine, const train::Batch& batch,
                            int iters) {
  world.barrier();
  train::StepTimes sum;
  for (int i = 0; i < iters; ++i) {
    const auto t = engine.step(batch).times;
    sum.data += t.data, sum.forward += t.forward, sum.backward += t.backward, sum.comm += t.comm,
        sum.optimizer += t.optimizer, sum.gather += t.gather, sum.total += t.total;
  }
  for (double* v : {&sum.data, &sum.forward, &sum.backward, &sum.comm, &sum.optimizer, &sum.gather, &sum.total})
    *v = over_ranks(world, *v / iters, MPI_SUM) / world.size();
  return sum;
}

nlohmann::json to_json(const train::StepTimes& t, double samples_per_step) {
  return {{"step_s", t.total},
          {"data_s", t.data},
          {"forward_s", t.forward},
          {"backward_s", t.backward},
          {"comm_s", t.comm},
          {"optimizer_s", t.optimizer},
          {"samples_per_s", samples_per_step / t.total}};
}

// The options; UsageError naming the option. Fills `config` and the latents' `height`, `width`.
OptionSet::Outcome parse_step_bench(distributed::World& world, int argc, char** argv, StepBenchConfig& c,
                                    wan::WanConfig& config, int64_t& height, int64_t& width) {
  OptionSet options("wanbench step", "--model-config JSON [options]");
  options.group("step")
      .standard_options(&c.config_file)
      .add("model-config", &c.model_config, "model config JSON (data/configs/*.json)")
      .add("batch-size", &c.batch, "samples per rank per micro-step")
      .add("grad-accum", &c.grad_accum, "micro-steps per optimizer step")
      .add("frames", &c.frames, "latent frames F")
      .add("size", &c.size, "latent HxW")
      .choice("precision", &c.precision, {"fp32", "bf16"}, "fp32, or bf16 autocast")
      .add("bucket-mb", &c.bucket_mb, "Reducer bucket size in MiB")
      .choice("grad-comm-dtype", &c.grad_comm_dtype, {"fp32", "bf16", "fp16"},
              "the dtype gradients are reduced in, as wantrain's option")
      .add("iters", &c.iters, "timed steps of each variant per round")
      .add("rounds", &c.rounds, "alternating rounds of both variants (the median round is reported)")
      .add("warmup", &c.warmup, "untimed steps first")
      .add("sync-iters", &c.sync_iters, "timed whole-model gradient syncs")
      .add("threads", &c.threads, "CPU threads per rank (0: the node's cores shared among its ranks)")
      .add("zero", &c.zero,
           "also time a ZeRO Engine of this stage: 1 (AdamW state sharded: reduce-scatter, sliced update, "
           "all-gather), 2 (the gradients too) or 3 (and the weights: each block gathered around its forward and "
           "backward); 0: none")
      .add("sp", &c.sp,
           "also time a sequence-parallel Engine: groups of this many ranks split each sample's tokens "
           "(wantrain --sp), each group on one batch; 1: none")
      .flag("json", &c.json, "print JSON instead of the table");
  auto outcome = OptionSet::Outcome::Run;
  world.agree([&] {
    outcome = options.parse(argc, argv);
    if (outcome != OptionSet::Outcome::Run) return;
    if (c.model_config.empty()) throw UsageError("option --model-config: the model config is required");
    if (c.iters < 1 || c.rounds < 1 || c.warmup < 0 || c.batch < 1 || c.frames < 1 || c.grad_accum < 1 ||
        c.sync_iters < 1)
      throw UsageError(
          "options --iters, --rounds, --sync-iters, --batch-size, --grad-accum, --frames: must be at least 1 "
          "(--warmup at least 0)");
    std::tie(height, width) = parse_height_width(c.size, "size");
    config = load_bench_model_config(c.model_config);
    if (c.zero < 0 || c.zero > 3) throw UsageError(fmt::format("option --zero: is {}; stages 0 to 3 exist", c.zero));
    if (c.sp < 1 || world.size() % c.sp != 0 || config.num_heads % c.sp != 0)
      throw UsageError(fmt::format("option --sp: {} must divide the {} ranks and the model's {} heads", c.sp,
                                   world.size(), config.num_heads));
  });
  if (outcome != OptionSet::Outcome::Run && world.is_root()) std::cout << app::help_or_version(outcome, options);
  return outcome;
}

// A batch of `samples` random samples drawn from `seed`, indexed from `first_index`.
train::Batch random_batch(const wan::WanConfig& config, int64_t samples, int64_t frames, int64_t height, int64_t width,
                          uint64_t seed, int64_t first_index) {
  torch::manual_seed(seed);
  train::Batch batch;
  batch.tensors.emplace("latents", torch::randn({samples, config.in_dim, frames, height, width}));  // [B*K, C, F, H, W]
  batch.tensors.emplace("text_emb", torch::randn({samples, config.text_len, config.text_dim}));     // [B*K, L, D]
  for (int64_t i = 0; i < samples; ++i) batch.indices.push_back(first_index + i);
  return batch;
}

// The model, objective and Engine of each variant: the same initial weights (seed 0).
struct Variant {
  wan::WanModel model;
  wan::FlowMatchingObjective objective;
  train::Engine engine;
  Variant(const wan::WanConfig& config, distributed::Comm& comm, const train::EngineOptions& options)
      : model(wan::build_model({config}).model), objective(*model, {}), engine(comm, objective, options) {}
};

// Each variant's median round, and what its Engine holds (MB per rank, the largest rank's).
struct VariantTimes {
  train::StepTimes with, without, zero, sequence;
  double synced_state_mb = 0, sharded_state_mb = 0, synced_gradient_mb = 0, sharded_gradient_mb = 0,
         synced_weight_mb = 0, sharded_weight_mb = 0;
};

// Both variants side by side (and the ZeRO and sp ones), alternating in
// rounds so that all see the same machine; each reports its round with the
// median step time.
VariantTimes time_variants(const distributed::World& world, const StepBenchConfig& c, const train::Batch& batch,
                           const train::Batch& group_batch, Variant& synced, Variant& local, Variant* sharded,
                           Variant* split) {
  for (int i = 0; i < c.warmup; ++i) {
    synced.engine.step(batch), local.engine.step(batch);
    if (sharded) sharded->engine.step(batch);
    if (split) split->engine.step(group_batch);
  }
  std::vector<train::StepTimes> with_rounds, without_rounds, sharded_rounds, split_rounds;
  for (int round = 0; round < c.rounds; ++round) {
    with_rounds.push_back(time_steps(world, synced.engine, batch, c.iters));
    if (sharded) sharded_rounds.push_back(time_steps(world, sharded->engine, batch, c.iters));
    if (split) split_rounds.push_back(time_steps(world, split->engine, group_batch, c.iters));
    without_rounds.push_back(time_steps(world, local.engine, batch, c.iters));
  }
  auto median = [](std::vector<train::StepTimes> v) {
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.total < b.total; });
    return v[v.size() / 2];
  };
  VariantTimes out;
  out.with = median(with_rounds), out.without = median(without_rounds);
  out.zero = sharded ? median(sharded_rounds) : train::StepTimes{};
  out.sequence = split ? median(split_rounds) : train::StepTimes{};
  auto largest_mb = [&](int64_t bytes) { return over_ranks(world, double(bytes) / 1e6, MPI_MAX); };
  // AdamW's moments, the gradient buffers and the weights (ZeRO-3: its slices) each Engine holds between steps.
  out.synced_state_mb = largest_mb(synced.engine.state_bytes());
  out.sharded_state_mb = sharded ? largest_mb(sharded->engine.state_bytes()) : 0;
  out.synced_gradient_mb = largest_mb(synced.engine.gradient_bytes());
  out.sharded_gradient_mb = sharded ? largest_mb(sharded->engine.gradient_bytes()) : 0;
  out.synced_weight_mb = largest_mb(synced.engine.weight_bytes());
  out.sharded_weight_mb = sharded ? largest_mb(sharded->engine.weight_bytes()) : 0;
  return out;
}

struct SyncTimes {
  double synced_s = 1e30, local_s = 1e30, raw_s = 1e30, raw_buckets_s = 1e30, reducer_s = 0;
  int64_t params = 0;
  size_t buckets = 0;
};

// Whole-model gradient sync: a backward whose gradients cost next to
// nothing to compute (d/dp sum(p) = 1), with and without the Reducer
// synchronising; against one raw MPI_Allreduce (sum) of the same bytes.
SyncTimes time_gradient_sync(const distributed::World& world, distributed::Comm& comm, const wan::WanConfig& config,
                             const StepBenchConfig& c, at::ScalarType grad_comm_dtype) {
  auto net = wan::build_model({config}).model;  // seed 0
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (const auto& item : net->named_parameters()) named.emplace_back(item.key(), item.value());
  distributed::ReducerOptions reducer_options;
  reducer_options.bucket_bytes = static_cast<int64_t>(c.bucket_mb * (1 << 20));
  reducer_options.average = false;  // as the Trainer does: the loss is divided by the world size instead
  reducer_options.comm_dtype = grad_comm_dtype;
  distributed::Reducer reducer(comm, named, {}, reducer_options);
  // The graph is built once and kept, so only backward and the Reducer are
  // timed (gradients accumulate across iterations: zeroing them is not sync).
  at::Tensor total = torch::zeros({});
  for (const auto& [name, p] : named) total = total + p.sum();
  total = total / world.size();
  reducer.zero_grad();
  auto backward_once = [&](bool sync) {
    reducer.prepare_for_backward(sync);
    total.backward({}, /*retain_graph=*/true);
    reducer.finalize_backward();
  };
  auto sync_once = [&] { backward_once(true); };
  auto local_once = [&] { backward_once(false); };
  SyncTimes out;
  out.params = wan::parameter_count(config);
  auto raw = torch::ones({out.params});
  // The same bytes cut as the Reducer cuts them, reduced one bucket after the
  // other: the Reducer's own overhead (hooks, ordering, averaging, the
  // unused-parameter check) without its choice of bucket sizes.
  std::vector<at::Tensor> raw_buckets;
  for (const auto& b : reducer.bucket_buffers()) raw_buckets.push_back(torch::ones({b.numel()}));
  out.buckets = raw_buckets.size();
  auto raw_buckets_once = [&] {
    for (auto& b : raw_buckets)
      MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, b.data_ptr<float>(), int(b.numel()), MPI_FLOAT, MPI_SUM, world.comm()));
  };
  auto raw_once = [&] {
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, raw.data_ptr<float>(), int(out.params), MPI_FLOAT, MPI_SUM, world.comm()));
  };
  auto timed = [&](auto op) {
    op();
    world.barrier();
    const auto start = Clock::now();
    for (int i = 0; i < c.sync_iters; ++i) op();
    return over_ranks(world, seconds_since(start) / c.sync_iters, MPI_MAX);
  };
  // Alternate, so both see the same machine state; the better of two rounds.
  // The Reducer's sync costs what a synchronising backward takes beyond the
  // same backward without communication (which writes the same gradients).
  for (int round = 0; round < 2; ++round) {
    out.synced_s = std::min(out.synced_s, timed(sync_once));
    out.local_s = std::min(out.local_s, timed(local_once));
    out.raw_s = std::min(out.raw_s, timed(raw_once));
    out.raw_buckets_s = std::min(out.raw_buckets_s, timed(raw_buckets_once));
  }
  out.reducer_s = std::max(out.synced_s - out.local_s, 1e-9);
  return out;
}

// The report as JSON (--json), rank 0's.
nlohmann::json step_report(const distributed::World& world, const StepBenchConfig& c, const wan::WanConfig& config,
                           int64_t height, int64_t width, const VariantTimes& v, const SyncTimes& sync,
                           int64_t samples_per_step) {
  const double bytes = double(sync.params) * 4;
  const double bus = 2.0 * (world.size() - 1) / world.size();
  const double exposed = v.with.total - v.without.total;
  nlohmann::json report = {{"model_config", c.model_config},
                           {"parameters", sync.params},
                           {"ranks", world.size()},
                           {"threads_per_rank", torch::get_num_threads()},
                           {"batch_per_rank", c.batch},
                           {"grad_accum", c.grad_accum},
                           {"latents", {config.in_dim, c.frames, height, width}},
                           {"precision", c.precision},
                           {"with_reducer", to_json(v.with, double(samples_per_step))},
                           {"comm_skipped", to_json(v.without, double(samples_per_step))},
                           {"exposed_comm_s", exposed},
                           {"exposed_comm_fraction", exposed / v.with.total},
                           {"optimizer_state_MB_per_rank", v.synced_state_mb},
                           {"gradient_MB_per_rank", v.synced_gradient_mb},
                           {"sync",
                            {{"bytes", bytes},
                             {"reducer_s", sync.reducer_s},
                             {"backward_with_sync_s", sync.synced_s},
                             {"backward_without_sync_s", sync.local_s},
                             {"mpi_allreduce_s", sync.raw_s},
                             {"reducer_busbw_GBps", bytes / sync.reducer_s * bus / 1e9},
                             {"mpi_busbw_GBps", bytes / sync.raw_s * bus / 1e9},
                             {"reducer_vs_mpi", sync.raw_s / sync.reducer_s},
                             {"buckets", sync.buckets},
                             {"mpi_per_bucket_s", sync.raw_buckets_s},
                             {"reducer_vs_mpi_per_bucket", sync.raw_buckets_s / sync.reducer_s}}}};
  if (c.zero > 0) {
    auto& z = report["zero"] = to_json(v.zero, double(samples_per_step));
    z["stage"] = c.zero;
    z["optimizer_state_MB_per_rank"] = v.sharded_state_mb;
    z["gradient_MB_per_rank"] = v.sharded_gradient_mb;
    z["weight_MB_per_rank"] = v.sharded_weight_mb;
    z["gather_wait_s"] = v.zero.gather;
    z["step_vs_reducer"] = v.zero.total / v.with.total;
  }
  if (c.sp > 1) {
    // A group of sp ranks trains one batch: sp times fewer samples a step.
    auto& q = report["sp"] = to_json(v.sequence, double(samples_per_step / c.sp));
    q["ranks_per_group"] = c.sp;
    q["step_vs_reducer"] = v.sequence.total / v.with.total;
  }
  return report;
}

// The report as a table (rank 0's).
void print_step_table(const distributed::World& world, const StepBenchConfig& c, const wan::WanConfig& config,
                      int64_t height, int64_t width, const VariantTimes& v, const SyncTimes& sync,
                      int64_t samples_per_step) {
  const double bytes = double(sync.params) * 4;
  const double bus = 2.0 * (world.size() - 1) / world.size();
  const double exposed = v.with.total - v.without.total;
  fmt::print(
      "wanbench step: {} ({} parameters), {} rank{} x batch {} x accumulation {}, latents [{},{},{},{}], {}, "
      "gradients reduced in {}, {} thread{} per rank\n",
      c.model_config, sync.params, world.size(), world.size() == 1 ? "" : "s", c.batch, c.grad_accum, config.in_dim,
      c.frames, height, width, c.precision, c.grad_comm_dtype, torch::get_num_threads(),
      torch::get_num_threads() == 1 ? "" : "s");
  fmt::print("  {:<16} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>10}\n", "seconds per step", "step", "data", "fwd", "bwd",
             "comm", "optim", "samples/s");
  struct Row {
    std::string label;
    train::StepTimes times;
    double samples;  // per step
  };
  std::vector<Row> rows = {{"with Reducer", v.with, double(samples_per_step)}};
  if (c.zero > 0) rows.push_back({fmt::format("ZeRO-{}", c.zero), v.zero, double(samples_per_step)});
  if (c.sp > 1) rows.push_back({fmt::format("sp {}", c.sp), v.sequence, double(samples_per_step / c.sp)});
  rows.push_back({"comm skipped", v.without, double(samples_per_step)});
  for (const auto& [label, t, samples] : rows)
    fmt::print("  {:<16} {:>8.4f} {:>8.4f} {:>8.4f} {:>8.4f} {:>8.4f} {:>8.4f} {:>10.2f}\n", label, t.total, t.data,
               t.forward, t.backward, t.comm, t.optimizer, samples / t.total);
  fmt::print("  exposed communication: {:.4f} s = {:.1f}% of the step (goal <= 10%)\n", exposed,
             100 * exposed / v.with.total);
  if (c.zero > 0)
    fmt::print(
        "  {}: step {:.2f}x the Reducer's; AdamW moments {:.1f} MB per rank against {:.1f} MB ({:.2f}x); "
        "gradients {:.1f} MB against {:.1f} MB ({:.2f}x)\n",
        fmt::format("ZeRO-{}", c.zero), v.zero.total / v.with.total, v.sharded_state_mb, v.synced_state_mb,
        v.sharded_state_mb / v.synced_state_mb, v.sharded_gradient_mb, v.synced_gradient_mb,
        v.sharded_gradient_mb / v.synced_gradient_mb);
  if (c.zero == 3)
    fmt::print(
        "  ZeRO-3: waiting for weight gathers {:.4f} s of the step ({:.1f}%, inside fwd and bwd); weights {:.1f} MB "
        "per rank between steps against {:.1f} MB ({:.2f}x)\n",
        v.zero.gather, 100 * v.zero.gather / v.zero.total, v.sharded_weight_mb, v.synced_weight_mb,
        v.sharded_weight_mb / v.synced_weight_mb);
  if (world.size() == 1) {
    fmt::print("  gradient sync: nothing to synchronise on one rank\n");
    return;
  }
  fmt::print(
      "  gradient sync of {:.2f} MB: Reducer {:.2f} ms ({:.2f} GB/s busbw), MPI_Allreduce {:.2f} ms "
      "({:.2f} GB/s): {:.0f}% of raw MPI (goal >= 85%)\n",
      bytes / 1e6, sync.reducer_s * 1e3, bytes / sync.reducer_s * bus / 1e9, sync.raw_s * 1e3,
      bytes / sync.raw_s * bus / 1e9, 100 * sync.raw_s / sync.reducer_s);
  fmt::print("  the same {} bucket{} by raw MPI_Allreduce one after the other: {:.2f} ms: Reducer at {:.0f}% of it\n",
             sync.buckets, sync.buckets == 1 ? "" : "s", sync.raw_buckets_s * 1e3,
             100 * sync.raw_buckets_s / sync.reducer_s);
}

}  // namespace

int run_step_bench(distributed::World& world, int argc, char** argv) {
  StepBenchConfig c;
  wan::WanConfig config;
  int64_t height = 0, width = 0;
  if (parse_step_bench(world, argc, argv, c, config, height, width) != OptionSet::Outcome::Run) return kExitOk;
  torch::set_num_threads(threads_per_rank(c.threads, world.local_size()));
  auto comm = distributed::make_comm(world, distributed::Backend::Mpi, {});

  // This rank's batch of B*K samples, in memory (reading data is wanbench
  // io's measurement): the step from the batch on, as wantrain takes it. A
  // sequence-parallel group's ranks share one batch: its first rank's.
  const int64_t per_rank = c.batch * c.grad_accum;
  const train::Batch batch =
      random_batch(config, per_rank, c.frames, height, width, 1 + world.rank(), world.rank() * per_rank);
  const int group = world.rank() / c.sp;
  const train::Batch group_batch =
      random_batch(config, per_rank, c.frames, height, width, 1 + group * c.sp, group * per_rank);

  train::EngineOptions engine_options;
  engine_options.micro_batch = c.batch;
  engine_options.accumulation = c.grad_accum;
  engine_options.compute_dtype = app::float_dtype(c.precision);
  engine_options.schedule = {1e-4, train::Schedule::Constant, 0, c.warmup + c.iters * c.rounds};
  engine_options.bucket_bytes = static_cast<int64_t>(c.bucket_mb * (1 << 20));
  engine_options.grad_comm_dtype = app::float_dtype(c.grad_comm_dtype);
  Variant synced(config, *comm, engine_options);
  std::unique_ptr<Variant> sharded;
  if (c.zero > 0) {
    auto zero_options = engine_options;
    zero_options.zero = c.zero;
    sharded = std::make_unique<Variant>(config, *comm, zero_options);
    sharded->model->set_parameter_units(sharded->engine.parameter_units());  // ZeRO-3; nullptr otherwise
  }
  std::unique_ptr<distributed::Comm> sp_group;
  std::unique_ptr<Variant> split;
  if (c.sp > 1) {
    auto sp_options = engine_options;
    sp_options.sequence_parallel = c.sp;
    sp_group = comm->split(group);
    split = std::make_unique<Variant>(config, *comm, sp_options);
    split->model->set_sequence_parallel(sp_group.get());
  }
  engine_options.communicate = false;
  Variant local(config, *comm, engine_options);
  const int64_t samples_per_step = per_rank * world.size();

  const VariantTimes variants = time_variants(world, c, batch, group_batch, synced, local, sharded.get(), split.get());
  const SyncTimes sync = time_gradient_sync(world, *comm, config, c, engine_options.grad_comm_dtype);
  if (!world.is_root()) return kExitOk;
  if (c.json)
    std::cout << step_report(world, c, config, height, width, variants, sync, samples_per_step).dump(2) << '\n';
  else
    print_step_table(world, c, config, height, width, variants, sync, samples_per_step);
  return kExitOk;
}

}  // namespace wt
