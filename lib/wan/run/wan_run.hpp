// WanRun: a WanModel trained on an HDF5 shard dataset, assembled for fit():
// the model (fresh from the seed, from `init` weights, from a resumed
// checkpoint, or projected from a distillation teacher), its objective
// (flow matching, or distillation when a teacher is given), the Engine and
// the prefetching shard batches, all from one RunPlan.
//
//   ShardBatches (this rank's B*K samples) -> Engine::step -> K micro-batches
//   of B: flow-matching noise and caption dropout keyed by (seed, step,
//   sample) -> WanModel -> loss -> backward and gradient all-reduce -> update.
//
// The sampler gives rank r of W the per-rank batch B*K of global step k, so
// the samples of a step, their noise and dropped captions, and therefore the
// averaged gradient do not depend on how B, W and K split the effective
// batch: 1 rank with 2B, 2 ranks with B and 1 rank with B and K = 2 take the
// same steps.
#pragma once

#include <c10/core/ScalarType.h>

#include <memory>
#include <functional>
#include <optional>
#include <string>

#include "wantrain/data/dataset.hpp"
#include "wantrain/nn/attention_chunk.hpp"
#include "wantrain/wan/model/lora.hpp"
#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/wan/model/model_recipe.hpp"
#include "wantrain/train/fit.hpp"
#include "wantrain/wan/objective/few_step_objective.hpp"
#include "wantrain/wan/objective/flow_matching_objective.hpp"
#include "wantrain/wan/run/training_sample.hpp"

namespace wt::wan {

class Teacher;

enum class StudentInit { Projection, Random };

struct WanRunOptions {
  std::string init;  // weights to start from: safetensors file or index, or a checkpoint; "" none
  FlowMatchingObjectiveOptions objective;
  double distill_target_weight = 0;  // distillation only
  // Few-step distillation (wan/objective/few_step_objective.hpp): the student
  // has the teacher's config and starts from its weights (unless `init`);
  // with LoRA they are its frozen base.
  std::optional<FewStepOptions> few_step;
  // A fresh distillation student without `init`. Projection assumes the
  // caller checked check_projectable (wan/model/projection.hpp) on every
  // rank while planning, before any weights load, as wantrain does.
  StudentInit student_init = StudentInit::Projection;
  int prefetch = 2;
  // rank > 0: LoRA fine-tuning. The model (from `init`, or the seed) is
  // frozen and adapters are trained; checkpoints hold the adapters only, and
  // the run's weights are lora.safetensors (wan/model/lora.hpp).
  LoraOptions lora;
  // Without LoRA, a VACE model's VACE branch alone trained in full
  // (--trainable vace), the rest a frozen base: checkpoints hold the branch
  // only (and the base's checksum), the run's weights files the whole model.
  bool vace_branch_only = false;
  // With LoRA: the frozen base's block Linears held in kBFloat16 (built,
  // loaded and kept so: never an fp32 copy of them), kFloat8_e4m3fn (with
  // scales: nn/fp8_weights.hpp) or kFloat.
  at::ScalarType base_dtype = at::kFloat;
  // With LoRA: the frozen weights of the first N blocks held in host memory
  // and brought to the device around their use (nn/block_swap.hpp); 0 off.
  int64_t blocks_to_swap = 0;
  // With grad_checkpoint: the checkpointed blocks' inputs in host memory
  // until backward (WanModel::set_activation_offload).
  bool activation_offload = false;
  // Activation checkpointing of the trained model: every N-th block
  // recomputed in backward (WanModel::set_grad_checkpoint); 0 off.
  int64_t grad_checkpoint = 0;
  // Attention over this many queries at a time, in the trained model and a
  // teacher (WanModel::set_attention_chunk); nn::kFusedAttention (the
  // default) the fused kernel; 0 the whole score matrix;
  // nn::kAutoAttentionChunk: each model chooses per forward from its heads
  // and the batch's tokens.
  int64_t attention_chunk = nn::kFusedAttention;
  // Samples drawn during training (fit's sample_every): of which training
  // sample, how, and where their PNGs go.
  std::optional<TrainingSampleOptions> sample;
};

// The trained model's recipe (model/model_recipe.hpp): `config` in the base
// dtype, drawn from `seed`, read from `init`, or, for a few-step student
// without one, from its teacher `few_step_teacher` (its EMA where it has
// one); LoRA's adapters last. The run builds its model from it, and the
// sample ranks theirs, so that the tensors a sample sends complete it.
ModelRecipe model_recipe(const WanRunOptions& options, const WanConfig& config, uint64_t seed,
                         const std::string& few_step_teacher);

// The rules that tie WanRunOptions' settings to each other (LoRA's, a
// distillation's student, activation offload), each written here alone:
// run_training_job checks them before anything starts. `distill`: a
// teacher is given. Throws SettingError.
void check_run_options(const WanRunOptions& options, bool distill);

class WanRun {
 public:
  // Builds the model, objective and sampler on this rank, with no
  // collective: every check that can fail on one rank alone (init weights,
  // a resumed checkpoint's fit, the sampler position) happens here, so a
  // caller runs it inside World::agree. `start` is fit's start point (its
  // checkpoint restores the weights and sampler position); `teacher`,
  // loaded on the CPU in its precision, makes this a distillation run and
  // must outlive it (rank 0 projects the student from it here).
  WanRun(const train::RunPlan& plan, const WanRunOptions& options, distributed::Comm& comm, data::Dataset dataset,
         WanConfig config, const train::StartPoint& start, Teacher* teacher = nullptr);

  // Collective, after construction on every rank: the Engine (which
  // broadcasts rank 0's parameters), the teacher in its final precision on
  // the device, the resumed Engine state, and the prefetching batches.
  void connect(distributed::Comm& comm, const train::StartPoint& start);
  ~WanRun();
  WanRun(const WanRun&) = delete;
  WanRun& operator=(const WanRun&) = delete;

  // fit's view of this run.
  train::FitRun fit_run(train::Validator* validator);

  train::Engine& engine();

  // Writes <dir>/model.safetensors (and ema.safetensors with EMA) and
  // model-config.json, what wansample reads; with LoRA, lora.safetensors
  // (and lora-ema.safetensors) instead of the model's weights, where
  // `write`. Returns the line naming them. Collective with ZeRO (the EMA is
  // gathered from every rank).
  std::string save_weights(const std::string& directory, bool write = true) const;

  // fit's draw_sample: collective with ZeRO (the EMA is gathered); rank 0
  // draws with the EMA weights, or the weights without an EMA.
  std::optional<train::SampleReport> draw_sample(int64_t step) const;

  // The videos of a prompt file (wantrain --sample-prompts): `draw` is
  // called on every rank at each sample with the model holding the weights
  // samples are drawn with (the EMA's, or the weights), whole (ZeRO-3's
  // gathered, no sequence split), in eval mode with no autograd. Before
  // fit_run.
  using DrawVideos = std::function<std::vector<train::SampleVideo>(WanModelImpl& model, int64_t step)>;
  void set_prompt_videos(DrawVideos draw);

  // Samples drawn on sample ranks of their own (wantrain --sample-ranks):
  // fit hands them the student's weights (train/sample_handoff.hpp) instead
  // of drawing; `sender` on rank 0, nullptr on the others. Before fit_run.
  void hand_samples_to(train::SampleSender* sender);

 private:
  std::vector<train::SampleVideo> draw_videos(int64_t step) const;
  void start_student(const Teacher& teacher, const WanRunOptions& options, int rank, uint64_t seed);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace wt::wan
