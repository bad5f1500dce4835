// Engine: the generic data-parallel optimizer step, for any Objective.
//
//   this rank's batch of B*K samples -> K micro-batches of B:
//     objective.loss under autocast -> loss * scale / (K * W) -> backward,
//     the Reducer all-reducing gradient buckets as they fill (only on the
//     last micro-batch)
//   -> one all-reduce of the step's figures (loss, parameters without a
//      gradient, the caller's stop and write-failure flags) and one host
//      read of them with the bucket norms: the loss averaged over ranks,
//      the global grad norm -> skip if non-finite
//   -> clip -> AdamW at the scheduled rate -> EMA -> loss scale update.
// Each of the objective's trained groups (parameter_group.hpp) has buckets
// of its own, so its norm, clip, AdamW settings and EMA are its own;
// grad_norm is the first group's (the model's), group_norms each one's.
// Collectives per step: the buckets + 1; host reads: 1.
//
// With zero = 1 (ZeRO stage 1) the buckets are reduce-scattered instead;
// each rank clips, steps AdamW and updates the EMA on its 1/W slice of the
// flat weights (ZeroShards), the norm is the all-reduced sum of the slices'
// squares, and an all-gather hands every rank the new weights. The update is
// the same elementwise arithmetic as without sharding. zero = 2 (ZeRO stage
// 2) keeps no whole gradient either: each micro-step's buckets are
// reduce-scattered as they fill and freed, and the slices accumulate
// (distributed::ReducerOptions::transient_buckets). zero = 3 (ZeRO stage 3)
// keeps no whole weights either: the buckets are the model's units, the
// fp32 slices are the weights, and the model gathers each unit around its
// forward and backward through parameter_units() (ZeroShards), in
// gather_dtype; the update needs no all-gather.
//
// The Engine knows no model, dataset, file format or command line: the
// objective declares its trained groups, and the caller hands it batches.
// What leaves it as "the model" (weights(), ema_weights(), the samplers'
// weights) is the groups marked `weights`, under the parameters' own names.
//
// Collective contract: every rank constructs the Engine and calls step() the
// same number of times, in the same order, with batches of the same size;
// one thread per rank calls it. The constructor broadcasts the trainable
// parameters and the objective's buffers from rank 0.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <limits>
#include <string>
#include <vector>

#include "wantrain/train/lr_schedule.hpp"
#include "wantrain/train/objective.hpp"

namespace wt::distributed {
class Comm;
}
namespace wt::nn {
class ParameterUnits;
}
namespace wt::ckpt {
struct Checkpoint;
}

namespace wt::train {

class Ema;

// Seconds of one step by phase. On GPU the phases are host time (kernels are
// queued asynchronously); `total` is wall time to the end of the step.
struct StepTimes {
  double data = 0;       // waiting for the batch, copying it and making the objective's inputs
  double teacher = 0;    // a frozen teacher's forward (distillation only)
  double forward = 0;    // the trained model's forward and the loss
  double backward = 0;   // including bucket all-reduces overlapped with it
  double comm = 0;       // communication left exposed after backward, and the loss average
  double optimizer = 0;  // norm, clip, AdamW, EMA
  double gather = 0;     // waiting for weights (ZeRO-3's gathers, swapped blocks), inside forward and backward
  double total = 0;
};

struct StepResult {
  int64_t step = 0;   // 1-based: the number of optimizer steps taken so far
  int64_t epoch = 0;  // of this step's data (set by whoever knows the data)
  double loss = 0;    // averaged over ranks and micro-batches
  double lr = 0;
  double grad_norm = 0;                                          // the first group's, before clipping
  std::vector<std::pair<std::string, double>> group_norms;       // each trained group's, by name, before clipping
  bool skipped = false;                                          // non-finite loss or gradient: no update on any rank
  double loss_scale = std::numeric_limits<double>::quiet_NaN();  // fp16: the scale after this step; NaN otherwise
  // What the ranks agreed on in the step's reduction (StepFlags): the
  // highest stop signal any rank had (0: none), and whether any rank's
  // checkpoint write had failed.
  int stop_signal = 0;
  bool write_failed = false;
  // Device-to-host reads the Engine made in this step (a debug count: the
  // host waits for the device at each; the design is one per step).
  int host_reads = 0;
  StepTimes times;
};

// What the caller asks the ranks to agree on at this step, carried in the
// step's one reduction instead of a collective of its own: a stop signal
// this rank received (its number, 1..64; 0: none), asked for at the
// reduction itself so that a signal that came during the step's compute
// counts at this step, and a failed checkpoint write this rank saw.
struct StepFlags {
  std::function<int()> stop_signal;  // empty: never
  bool write_failed = false;
};

struct EngineOptions {
  int64_t micro_batch = 1;                    // B: samples per rank per micro-step
  int accumulation = 1;                       // K: micro-steps per optimizer step
  at::ScalarType compute_dtype = at::kFloat;  // autocast: kFloat (off), kBFloat16, kHalf (with loss scaling)
  LrSchedule schedule;
  AdamWOptions adamw;
  double clip = 1.0;       // global-norm clipping; 0: off
  double ema_decay = 0.0;  // 0: no EMA
  int64_t bucket_bytes = 25 << 20;
  // The dtype gradients are reduced in: kFloat, or kBFloat16 / kHalf (half
  // the bytes, the sum rounded to 16 bits; distributed::ReducerOptions).
  at::ScalarType grad_comm_dtype = at::kFloat;
  bool allow_unused = false;  // trainable parameters may get no gradient
  // false: no gradient synchronisation (wanbench step measures the step
  // without it; each rank then trains on its own gradients).
  bool communicate = true;
  // Ranks per sequence-parallel group (consecutive ranks): each group's
  // ranks read the same batch and compute its loss together, each
  // contributing the gradients of its own tokens, so the loss is divided by
  // the data-parallel ranks (world / sequence_parallel) instead of the world
  // and the sum over all ranks is the data-parallel mean.
  int sequence_parallel = 1;
  // ZeRO stage: 0 (replicated), 1 (optimizer state and EMA sharded), 2 (and
  // the gradients: no whole gradient kept), 3 (and the weights).
  int zero = 0;
  // ZeRO-3: the dtype the blocks' weights are gathered in (kFloat, or
  // kBFloat16 under bf16 autocast: half the bytes, and no autocast copies).
  at::ScalarType gather_dtype = at::kFloat;
};

class Engine {
 public:
  // The objective must outlive the Engine.
  Engine(distributed::Comm& comm, Objective& objective, EngineOptions options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // One optimizer step on this rank's batch of micro_batch * accumulation
  // samples; `flags` are agreed on with the other ranks (StepResult's
  // stop_signal and write_failed).
  StepResult step(const Batch& batch, const StepFlags& flags = {});

  int64_t steps_taken() const { return step_; }
  // Bytes of AdamW moments and EMA this rank holds (1/W of them with zero >= 1).
  int64_t state_bytes() const;
  // Bytes of gradient buffers held now (the Reducer's: buckets, slices).
  int64_t gradient_bytes() const;
  int64_t skipped_steps() const { return skipped_; }
  const EngineOptions& options() const { return options_; }
  // The EMA's own tensors: per parameter, or with zero >= 1 this rank's
  // per-bucket slices (ema_weights() has them whole).
  const Ema* ema() const;
  // Collective with zero >= 1: the model's EMA weights (its averaged
  // `weights` groups) by parameter name, whole on every rank, or with
  // `rank` >= 0 on that rank only (with zero >= 1 on the CPU; empty without
  // an EMA and on the other ranks).
  NamedTensors ema_weights(int rank = -1) const;
  // Collective with zero >= 1: the weights samples are drawn with (the
  // `weights` groups: the EMA's, or the trained weights of a group without
  // one), by the parameters' own names, one parameter at a time (in the
  // trainable order, or with ZeRO in bucket order), each whole while `use` has it (with ZeRO one bucket
  // gathered at a time: a model that is never whole on one rank passes
  // through it unit by unit). Other groups never reach `use`.
  void each_sampling_weight(const std::function<void(const std::string& name, const at::Tensor& whole)>& use) const;
  // The objective's trained groups.
  const std::vector<ParameterGroup>& groups() const;
  distributed::Comm& comm() { return comm_; }
  Objective& objective() { return objective_; }
  // ZeRO-3: what the forward of the model trained as group `group` calls
  // around its units (set it with the model's own setter); nullptr otherwise.
  nn::ParameterUnits* parameter_units(size_t group = 0) const;
  // Units of the model other than ZeRO-3's (block swap): their waiting
  // goes into StepTimes::gather.
  void watch_units(nn::ParameterUnits* units) { watched_units_ = units; }
  // Collective with zero = 3: the model's trained weights (its `weights`
  // groups) by parameter name, whole on the CPU of every rank, or with
  // `rank` >= 0 of that rank only (the parameters themselves otherwise).
  NamedTensors weights(int rank = -1) const;
  // Bytes of trained weights this rank holds now (with zero = 3: its slices
  // and the units gathered at the moment).
  int64_t weight_bytes() const;

  // Writes the trainable parameters, EMA, optimizer state (by checkpoint
  // name), the record of the trained groups, step, skipped steps, learning rate, loss scale and RNG state into
  // `into`, reusing its CPU tensors where names and shapes match. With
  // zero = 1 the EMA and optimizer state are this rank's slices (into.shard),
  // and only rank 0 copies the parameters. From a GPU the CPU tensors are
  // pinned (up to 8 GiB) and filled by queued copies, waited for once before
  // it returns. On the CPU the copies run on a thread of their own: read
  // `into`'s tensors only once into.filled is ready (the checkpoint writer
  // waits for it); the next step's update waits for them too.
  void save_state(ckpt::Checkpoint& into) const;
  // Restores what save_state wrote, except the parameters (the caller has
  // loaded them before constructing the Engine, so that rank 0's broadcast
  // carries them). Without ZeRO, `saved` holds the optimizer state and EMA
  // whole, checked against the parameters; with zero >= 1 this rank reads
  // its slices from the checkpoint at `path` (any world size, sharded or
  // not), checked there (UsageError naming the file and tensor).
  void load_state(const ckpt::Checkpoint& saved, const std::string& path);

 private:
  // The step's micro-batches: each one's loss under autocast and its
  // backward, the buckets reduced on the last (every one with ZeRO-2);
  // returns the losses' sum, fp64 on the device.
  at::Tensor accumulate(const Batch& batch, double loss_scale, StepTimes& times);
  void load_whole(const ckpt::Checkpoint& saved);
  void load_slices(const std::string& path);
  // ZeRO: per bucket, this rank's slice of the model's weights (the EMA's
  // where `ema` and its group has one), undefined for the other groups'.
  std::vector<at::Tensor> slices_of_model(bool ema) const;
  // The tensors of `weights` groups among `checkpoint_named`, under the
  // parameters' own names.
  NamedTensors model_names(const NamedTensors& checkpoint_named) const;

  friend class WholeWeights;
  struct Impl;
  distributed::Comm& comm_;
  Objective& objective_;
  const EngineOptions options_;
  int64_t step_ = 0, skipped_ = 0;
  nn::ParameterUnits* watched_units_ = nullptr;
  std::unique_ptr<Impl> impl_;
};

// Collective with zero = 3: every unit gathered while it lives, for
// forwards that not every rank runs, or not as often (validation, the
// training sample); nothing otherwise. With `ema` (and an EMA) the model
// holds the EMA weights meanwhile, gathered from their slices.
class WholeWeights {
 public:
  explicit WholeWeights(Engine& engine, bool ema = false);
  ~WholeWeights();
  WholeWeights(const WholeWeights&) = delete;
  WholeWeights& operator=(const WholeWeights&) = delete;

 private:
  Engine& engine_;
};

}  // namespace wt::train
