// RunPlan: everything about a data-parallel run that follows from its typed
// settings, the world size and the dataset's shard sizes, computed once:
// the effective batch, the sampler of this rank, steps per epoch and in all,
// the learning rate after the linear scaling rule, and the Engine's options.
// `--dry-run` prints it (describe()); the Engine, the sampler and fit()
// consume it, so nothing downstream works any of it out again.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "wantrain/data/sampler.hpp"
#include "wantrain/train/engine.hpp"
#include "wantrain/train/lr_schedule.hpp"

namespace wt::train {

// The settings a run is planned from (an app fills them from its options).
struct RunSettings {
  int64_t micro_batch = 1;  // B: samples per rank per micro-step
  int accumulation = 1;     // K: micro-steps per optimizer step
  int64_t steps = 0;        // optimizer steps; 0: epochs * steps per epoch
  int64_t epochs = 0;
  uint64_t seed = 0;
  bool drop_last = true;
  bool shard_affinity = false;
  double lr = 1e-4;
  bool scale_lr = false;  // linear scaling rule: lr x effective batch
  Schedule schedule = Schedule::Constant;
  int64_t warmup_steps = 0;
  AdamWOptions adamw;
  double clip = 1.0;
  double ema_decay = 0.0;
  at::ScalarType compute_dtype = at::kFloat;
  int64_t bucket_bytes = 25 << 20;
  at::ScalarType grad_comm_dtype = at::kFloat;  // EngineOptions::grad_comm_dtype
  bool allow_unused = false;
  int zero = 0;                              // ZeRO stage (EngineOptions::zero)
  at::ScalarType gather_dtype = at::kFloat;  // ZeRO-3 (EngineOptions::gather_dtype)
  // Ranks per sequence-parallel group (EngineOptions::sequence_parallel):
  // a group reads one batch, so the data is split over world / this.
  int sequence_parallel = 1;
};

struct RunPlan {
  RunSettings settings;
  int world_size = 1;
  int64_t effective_batch = 0;  // B x data-parallel ranks (W / sp) x K
  int data_parallel = 1;        // W / sequence_parallel: the ranks the data is split over
  int64_t dataset_size = 0;
  int64_t steps_per_epoch = 0;
  int64_t samples_per_epoch = 0;  // the samples an epoch visits (a padded epoch wraps around)
  int64_t total_steps = 0;        // 0: neither steps nor epochs were set (only a dry run can go on)
  // This rank's (its sequence-parallel group's, shared by the group): one
  // sampler batch is a rank's whole step, B x K.
  data::SamplerOptions sampler;
  struct Bucket {
    std::string name;
    int64_t samples = 0, steps = 0;  // an epoch's steps from it (each step's global batch is one bucket)
  };
  std::vector<Bucket> buckets;  // only for data of several latent shapes
  EngineOptions engine;         // the schedule's peak is the scaled rate

  // What a start-up banner and --dry-run print: how an epoch uses the data
  // (one line), then the effective batch, optimizer and schedule, steps.
  std::string describe_epoch() const;
  // The buckets that no step draws from (fewer samples than a global
  // batch, the tail dropped): what the banner warns about.
  std::vector<Bucket> untrained_buckets() const;
  int64_t global_batch() const { return samples_per_epoch / std::max<int64_t>(steps_per_epoch, 1); }
  std::string describe() const;
};

// Plans a run of `settings` on rank `rank` of `world_size` over a dataset
// of this layout (no shards: a plan without data, for a dry run). Throws
// UsageError when the data cannot give every rank a batch
// (data::DistributedSampler's checks).
RunPlan plan_run(const RunSettings& settings, int world_size, int rank, const data::DataLayout& data);

const char* precision_name(at::ScalarType compute_dtype);  // "fp32", "bf16", "fp16", "fp8" (e4m3fn)

}  // namespace wt::train
