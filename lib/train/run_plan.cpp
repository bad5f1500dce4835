#include "wantrain/train/run_plan.hpp"

#include <fmt/format.h>

#include <numeric>

namespace wt::train {

const char* precision_name(at::ScalarType compute_dtype) {
  switch (compute_dtype) {
    case at::kBFloat16: return "bf16";
    case at::kHalf: return "fp16";
    case at::kFloat8_e4m3fn: return "fp8";
    default: return "fp32";
  }
}

RunPlan plan_run(const RunSettings& s, int world_size, int rank, const data::DataLayout& data) {
  const auto& shard_sizes = data.shard_sizes;
  RunPlan plan;
  plan.settings = s;
  plan.world_size = world_size;
  const int sp = std::max(1, s.sequence_parallel);
  plan.data_parallel = std::max(1, world_size / sp);
  plan.effective_batch = s.micro_batch * plan.data_parallel * s.accumulation;
  plan.dataset_size = std::accumulate(shard_sizes.begin(), shard_sizes.end(), int64_t(0));
  plan.sampler = {plan.data_parallel, rank / sp, s.micro_batch * s.accumulation, s.seed, s.drop_last, s.shard_affinity};
  if (!shard_sizes.empty()) {  // no data: a dry run that shows the rest of the plan
    const data::DistributedSampler sampler(data, plan.sampler);
    plan.steps_per_epoch = sampler.batches_per_epoch();
    plan.samples_per_epoch = plan.steps_per_epoch * sampler.global_batch();
    const auto& samples = sampler.bucket_samples();
    if (samples.size() > 1)
      for (size_t b = 0; b < samples.size(); ++b)
        plan.buckets.push_back({b < data.bucket_names.size() ? data.bucket_names[b] : std::to_string(b), samples[b],
                                sampler.bucket_batches()[b]});
  }
  plan.total_steps = s.steps > 0 ? s.steps : s.epochs * plan.steps_per_epoch;

  auto& e = plan.engine;
  e.micro_batch = s.micro_batch;
  e.accumulation = s.accumulation;
  e.compute_dtype = s.compute_dtype;
  e.schedule = {scaled_lr(s.lr, plan.effective_batch, s.scale_lr), s.schedule, s.warmup_steps,
                std::max<int64_t>(plan.total_steps, 1)};
  e.adamw = s.adamw;
  e.clip = s.clip;
  e.ema_decay = s.ema_decay;
  e.bucket_bytes = s.bucket_bytes;
  e.grad_comm_dtype = s.grad_comm_dtype;
  e.allow_unused = s.allow_unused;
  e.zero = s.zero;
  e.gather_dtype = s.gather_dtype;
  e.sequence_parallel = sp;
  return plan;
}

std::string RunPlan::describe_epoch() const {
  const auto& s = settings;
  std::string per_bucket;
  const int64_t global = global_batch();
  for (const auto& b : buckets) {
    const int64_t visited = b.steps * global;
    per_bucket += fmt::format("      bucket {:<14} {:>8} samples: {:>6} steps{}\n", b.name, b.samples, b.steps,
                              visited > b.samples   ? fmt::format(" ({} padded by wrap-around)", visited - b.samples)
                              : visited < b.samples ? fmt::format(" ({} dropped)", b.samples - visited)
                                                    : std::string());
  }
  return fmt::format("      {} steps per epoch; {} samples per epoch{}\n", steps_per_epoch, samples_per_epoch,
                     s.shard_affinity ? std::string(" (shard affinity)")
                     : samples_per_epoch > dataset_size
                         ? fmt::format(" ({} padded by wrap-around)", samples_per_epoch - dataset_size)
                     : samples_per_epoch < dataset_size ? fmt::format(" ({} dropped)", dataset_size - samples_per_epoch)
                                                        : std::string(" (all)")) +
         per_bucket;
}

std::vector<RunPlan::Bucket> RunPlan::untrained_buckets() const {
  std::vector<Bucket> out;
  for (const auto& b : buckets)
    if (b.steps == 0 && b.samples > 0) out.push_back(b);
  return out;
}

std::string RunPlan::describe() const {
  const auto& s = settings;
  std::string out =
      data_parallel == world_size
          ? fmt::format("effective batch: {} per rank x {} ranks x {} accumulation steps = {}\n", s.micro_batch,
                        world_size, s.accumulation, effective_batch)
          : fmt::format(
                "effective batch: {} per group x {} sequence-parallel groups of {} ranks x {} accumulation steps "
                "= {}\n",
                s.micro_batch, data_parallel, world_size / data_parallel, s.accumulation, effective_batch);
  out += fmt::format(
      "optimizer: AdamW, lr {:.4g}{}, {} schedule, {} warm-up steps, precision {}{}\n", engine.schedule.peak,
      s.scale_lr ? fmt::format(" (lr {} x effective batch {})", s.lr, effective_batch) : std::string(),
      s.schedule == Schedule::Cosine ? "cosine" : "constant", s.warmup_steps, precision_name(s.compute_dtype),
      s.zero == 1   ? fmt::format("; state and EMA sharded over the {} ranks (ZeRO-1)", world_size)
      : s.zero == 2 ? fmt::format("; state, EMA and gradients sharded over the {} ranks (ZeRO-2)", world_size)
      : s.zero == 3 ? fmt::format("; state, EMA, gradients and weights sharded over the {} ranks (ZeRO-3, blocks "
                                  "gathered in {})",
                                  world_size, precision_name(s.gather_dtype))
                    : std::string());
  out += total_steps > 0 ? fmt::format("steps: {}{}\n", total_steps,
                                       s.steps == 0 ? fmt::format(" ({} epochs)", s.epochs) : std::string())
                         : std::string("steps: none given\n");
  return out;
}

}  // namespace wt::train
