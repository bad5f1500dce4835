// Objective: what is trained and how, behind one small interface, so that
// the Engine (the data-parallel step) knows no model, dataset or loss.
// An objective declares its trained parameters as groups (parameter_group.hpp:
// the Engine's Reducer, optimizer, EMA and checkpoints cover exactly those,
// each group with its own clip, EMA flag and optimizer settings) and the
// loss of one micro-batch. One implementation per file, in its family's folder:
// wan/objective/flow_matching_objective, wan/objective/distillation_objective; the generic
// train/regression_objective (csvfit).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "wantrain/data/copy_fence.hpp"
#include "wantrain/train/parameter_group.hpp"

namespace wt::train {

// A batch: named tensors whose first dimension is the sample, and each
// sample's global dataset index (what keys its noise and dropout).
struct Batch {
  std::map<std::string, at::Tensor> tensors;
  std::vector<int64_t> indices;
  // The optimizer step whose inputs Objective::make_inputs_ahead added to
  // `tensors`; -1 when none were.
  int64_t ahead_step = -1;
  // Set when the tensors live in a loader's recycled host buffers: slice()
  // records it after its copies to a device.
  std::shared_ptr<data::CopyFence> copied;

  // The tensor called `name`; throws naming it when absent.
  const at::Tensor& at(const std::string& name) const;
  int64_t size() const { return int64_t(indices.size()); }
  // Samples [first, first + count), tensors moved to `device` (queued:
  // non_blocking from pinned memory, then `copied` is recorded).
  Batch slice(int64_t first, int64_t count, const at::Device& device) const;
};

struct StepContext {
  int64_t step = 0;  // 0-based index of the optimizer step being taken
};

struct ObjectiveLoss {
  at::Tensor loss;             // fp32 scalar: the mean over the micro-batch
  double prepare_seconds = 0;  // making inputs (noise, conditioning): reported as data time
  double teacher_seconds = 0;  // a frozen model's forward, reported apart (distillation)
};

// Host tensors for inputs made ahead: from a loader's recycled buffers.
using HostAllocator = std::function<at::Tensor(at::IntArrayRef sizes, at::ScalarType dtype)>;

class Objective {
 public:
  virtual ~Objective() = default;
  // The trained groups, fixed for the objective's lifetime; the first is
  // the model the run trains. Tensors that need no gradient are not trained.
  virtual const std::vector<ParameterGroup>& groups() const = 0;
  // Every group's parameters under their checkpoint names, in group order:
  // what the Reducer, ZeRO's slices and checkpoints hold (made on the first
  // call, from the rank's own thread).
  const NamedTensors& trainable() const;
  // Buffers every rank must hold alike (broadcast from rank 0 at start).
  virtual std::vector<at::Tensor> buffers() const = 0;
  // The loss of one micro-batch, called under the Engine's autocast with
  // gradients enabled; the Engine runs backward on it.
  virtual ObjectiveLoss loss(const Batch& micro_batch, const StepContext& context) = 0;
  // Inputs that depend only on the batch and the step (flow matching's
  // noise), added to batch.tensors and marked with batch.ahead_step, from
  // tensors `allocate` gives. A loader calls it on its own thread while
  // training runs, so the inputs reach the device with the batch instead of
  // being drawn and copied inside the step: it must read nothing but the
  // objective's options. loss() gives the same result for a batch with and
  // without them. Default: nothing is made ahead.
  virtual void make_inputs_ahead(Batch& batch, int64_t step, const HostAllocator& allocate) const {}
  // The objective's validation metric for each sample of a held-out batch:
  // [B] fp64, deterministic (no dependence on the seed, step or batch
  // split), so that scores compare across steps, runs and world sizes.
  // Called without gradients, under the Engine's autocast.
  virtual at::Tensor validation_losses(const Batch& batch) = 0;

  // Checkpoints: the objective's kind ("flow-matching", ...) and its own
  // state, stored as the file's /objective group.
  virtual std::string kind() const = 0;
  virtual std::map<std::string, std::string> checkpoint_state() const { return {}; }
  // Whether a checkpoint's objective (read from `path`) is one this
  // objective continues; UsageError naming the file otherwise. By default
  // the kind and state must be this objective's.
  virtual void check_resume(const std::string& kind, const std::map<std::string, std::string>& state,
                            const std::string& path) const;

 private:
  mutable std::optional<NamedTensors> checkpoint_named_;
};

}  // namespace wt::train
