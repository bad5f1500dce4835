// Trainer: a WanModel trained on an HDF5 shard dataset, one optimizer step at
// a time, data-parallel over the Comm's ranks. It builds the model (fresh,
// --init, or projected from a teacher), the objective (flow matching or
// distillation: train/*_objective.hpp) and the Engine (train/engine.hpp,
// the generic step), and feeds the Engine from the Loader:
//
//   Loader (this rank's B*K samples) -> Engine::step -> K micro-batches of
//   B: flow-matching noise and caption dropout keyed by (seed, step, sample)
//   -> WanModel -> loss -> backward and gradient all-reduce -> update.
//
// The sampler gives rank r of W the per-rank batch B*K of global step k, so
// the samples of a step, their noise and dropped captions, and therefore the
// averaged gradient do not depend on how B, W and K split the effective
// batch: 1 rank with 2B, 2 ranks with B and 1 rank with B and K = 2 take the
// same steps.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>

#include "wantrain/ckpt/checkpoint.hpp"
#include "wantrain/data/dataset.hpp"
#include "wantrain/model/model_config.hpp"
#include "wantrain/train/engine.hpp"
#include "wantrain/train/train_config.hpp"

namespace wt::distributed {
class Comm;
}
namespace wt::model {
class WanModelImpl;
}
namespace wt::data {
class DistributedSampler;
}

namespace wt::train {

class Ema;
class Teacher;

struct TrainerOptions {
  // wanbench step sets this false to measure the step without gradient
  // synchronisation (each rank then trains on its own gradients).
  bool communicate = true;
  // Continue from this checkpoint (read from resume_path, already checked
  // against the model config): weights, EMA, AdamW state, step, sampler
  // position, loss scale and RNG state.
  const ckpt::Checkpoint* resume = nullptr;
  std::string resume_path;
  // Distillation: the frozen teacher whose prediction the model learns
  // (loss: train/distillation.hpp). Fresh runs start the student as
  // --student-init says, unless --init names weights.
  Teacher* teacher = nullptr;
};

class Trainer {
 public:
  // Builds the model (seeded by cfg.seed, or --init weights, or projected
  // from the teacher), broadcasts it
  // from rank 0, and starts the loader. Throws UsageError for options that
  // cannot run (no --steps/--epochs, fp16 without CUDA).
  Trainer(const TrainConfig& cfg, distributed::Comm& comm, data::Dataset dataset, model::WanConfig model_config,
          TrainerOptions options = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  StepResult step();
  bool done() const { return steps_taken() >= total_steps_; }

  int64_t steps_taken() const;
  int64_t total_steps() const { return total_steps_; }
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int64_t effective_batch() const;
  double peak_lr() const;
  int64_t skipped_steps() const;
  at::ScalarType compute_dtype() const { return compute_dtype_; }
  model::WanModelImpl& model();
  Objective& objective();
  const Ema* ema() const;
  distributed::Comm& comm() { return comm_; }

  // A consistent copy of the whole training state in CPU memory, taken at a
  // step boundary: what a checkpoint stores. `val_loss` is this step's
  // validation loss (NaN if none).
  ckpt::Checkpoint snapshot(const std::string& run_config, double val_loss) const;
  // The same into `into`, reusing its tensors where names and shapes match
  // (a recycled snapshot: no allocation, no page faults, in steady state).
  void snapshot_into(ckpt::Checkpoint& into, const std::string& run_config, double val_loss) const;

  // Rank 0 writes <dir>/model.safetensors (and ema.safetensors with EMA) and
  // model-config.json: what wansample reads.
  void save_weights(const std::string& directory) const;

 private:
  // A fresh distillation run's student: --init, random, or projected from the teacher (printed on rank 0).
  void start_student(const Teacher& teacher);
  void restore(const ckpt::Checkpoint& saved, const std::string& path, data::DistributedSampler& sampler);

  struct Impl;
  const TrainConfig cfg_;
  distributed::Comm& comm_;
  at::ScalarType compute_dtype_;
  int64_t total_steps_ = 0, steps_per_epoch_ = 0, epoch_ = 0;
  std::unique_ptr<Impl> impl_;
};

}  // namespace wt::train
