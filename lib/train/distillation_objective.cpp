#include "wantrain/train/distillation_objective.hpp"

#include <torch/torch.h>

#include <chrono>

#include "wantrain/model/wan_model.hpp"
#include "wantrain/train/distillation.hpp"
#include "wantrain/train/teacher.hpp"

namespace wt::train {
namespace {
double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
}  // namespace

DistillationObjective::DistillationObjective(model::WanModelImpl& student, const Teacher& teacher,
                                             FlowMatchingObjectiveOptions options, double target_weight,
                                             at::ScalarType compute_dtype)
    : FlowMatchingObjective(student, options),
      teacher_(teacher),
      target_weight_(target_weight),
      compute_dtype_(compute_dtype) {}

ObjectiveLoss DistillationObjective::loss(const Batch& micro_batch, const StepContext& context) {
  auto phase = std::chrono::steady_clock::now();
  const auto in = prepare(micro_batch, context);
  ObjectiveLoss out;
  out.prepare_seconds = seconds_since(phase);
  phase = std::chrono::steady_clock::now();
  const auto teacher_prediction = teacher_.predict(in.noisy.x_t, in.noisy.timesteps, in.context, compute_dtype_);
  out.teacher_seconds = seconds_since(phase);
  const auto prediction = model_.forward(in.noisy.x_t, in.noisy.timesteps, in.context);
  out.loss = distillation_loss(prediction, teacher_prediction, in.noisy.target, target_weight_);
  return out;
}

}  // namespace wt::train
