// TrainSettings: a whole wantrain job as the library takes it, typed. The
// app maps its options onto it once (apps/wantrain/train_config.cpp);
// run_training_job (train_job.hpp) plans, checks, builds and fits from it
// alone. Errors about a setting are SettingErrors naming it, which the app
// prints as its option.
#pragma once

#include <c10/core/ScalarType.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "wantrain/distributed/backend.hpp"
#include "wantrain/train/fit.hpp"
#include "wantrain/train/run_plan.hpp"
#include "wantrain/wan/run/wan_run.hpp"
#include "wantrain/wan/sample/prompt_videos.hpp"

namespace wt::wan {

// The device a memory plan is for.
enum class PlanDevice { Auto, Cpu, Cuda };  // Auto: the run's

struct MemoryPlanTarget {
  PlanDevice device = PlanDevice::Auto;
  double gpu_memory_gib = 0;  // each GPU's memory a GPU plan is held against (0: the visible GPU's, else 80 GiB)
  std::optional<std::array<int64_t, 3>> latents;  // (F, H, W) planned at when there is no data
};

// Distillation (setting `mode`): the frozen teacher.
struct DistillSettings {
  std::string teacher;         // its weights (a checkpoint, safetensors file or index)
  std::string teacher_config;  // "": the config stored in its checkpoint
  at::ScalarType teacher_dtype = at::kFloat;
};

// Wan2.2 A14B's two experts trained in one job (expert_groups.hpp).
struct ExpertSettings {
  std::array<std::string, 2> order{"high", "low"};  // the experts of the rank groups, in rank order
  std::optional<std::array<int64_t, 2>> ranks;      // each group's ranks, in that order; none: halves
  double boundary = 0;                              // sigma' between the experts; 0: the release's
  std::string high_noise, low_noise;                // each expert's starting weights ("": the run's init)
};

struct TrainSettings {
  // What the job reads.
  std::string data;          // the training dataset's directory; "" none (a dry run)
  std::string val_data;      // "" none
  std::string model_config;  // the model config's path; "" none (a dry run)
  std::optional<DistillSettings> distill;
  std::string resume;  // "" none, "auto" or a checkpoint path
  bool dry_run = false;

  // Where and how it runs.
  int threads = 0;  // per rank; 0: the node's cores shared among its ranks
  distributed::Backend backend = distributed::Backend::Auto;
  bool require_gpu = false;  // refuse to compute on the CPU when the job's nodes have NVIDIA GPUs
  std::chrono::milliseconds comm_timeout{std::chrono::minutes(10)};
  MemoryPlanTarget plan;

  // The run: its plan's settings (compute_dtype fp16 needs CUDA: checked at
  // start-up), the model and objective, and fit's. fit.run_options is the
  // app's record of its options (JSON, option name -> value).
  train::RunSettings run;
  WanRunOptions model_run;
  train::FitOptions fit;
  // Wan2.2 TI2V's first-frame condition (per-token timesteps): a share of
  // the samples keeps its first frame.
  bool first_frame() const { return model_run.objective.first_frame_prob > 0; }

  // Watching: the training sample's index, the --sample-prompts videos (its
  // prompts, latents and rank filled in at start-up; prompts_file "" none),
  // and the job's last `sample_ranks` ranks drawing the samples.
  int64_t sample_index = 0;
  PromptVideoOptions prompt_videos;
  int sample_ranks = 0;

  std::optional<ExpertSettings> experts;
};

}  // namespace wt::wan
