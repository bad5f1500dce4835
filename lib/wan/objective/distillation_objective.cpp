#include "wantrain/wan/objective/distillation_objective.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <chrono>

#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/objective/distillation.hpp"
#include "wantrain/wan/objective/teacher.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/seconds.hpp"

namespace wt::wan {

DistillationObjective::DistillationObjective(WanModelImpl& student, const Teacher& teacher,
                                             FlowMatchingObjectiveOptions options, double target_weight,
                                             at::ScalarType compute_dtype)
    : FlowMatchingObjective(student, options),
      teacher_(teacher),
      target_weight_(target_weight),
      compute_dtype_(compute_dtype) {}

train::ObjectiveLoss DistillationObjective::loss(const train::Batch& micro_batch, const train::StepContext& context) {
  auto phase = std::chrono::steady_clock::now();
  const auto in = prepare(micro_batch, context);
  train::ObjectiveLoss out;
  out.prepare_seconds = seconds_since(phase);
  phase = std::chrono::steady_clock::now();
  const auto teacher_prediction =
      teacher_.predict(in.noisy.x_t, in.noisy.timesteps, in.context, compute_dtype_, in.image);
  out.teacher_seconds = seconds_since(phase);
  const auto prediction = model_.forward(in.noisy.x_t, in.noisy.timesteps, in.context, in.image);
  TORCH_CHECK(!in.first_frame_kept.defined(), "distillation with the first-frame condition is refused at start");
  out.loss = distillation_loss(prediction, teacher_prediction, in.noisy.target, target_weight_);
  return out;
}

}  // namespace wt::wan

namespace wt::wan {

std::map<std::string, std::string> DistillationObjective::checkpoint_state() const {
  return {{"teacher", teacher_.path()}, {"teacher_checksum", teacher_.checksum()}};
}

void DistillationObjective::check_resume(const std::string& kind, const std::map<std::string, std::string>& state,
                                         const std::string& path) const {
  if (kind != "distillation")
    throw UsageError(fmt::format(
        "checkpoint {}: written by a {} run, not by distillation; start the student from it with {} instead of "
        "resuming it",
        path, kind, setting_reference("init")));
  const auto value = [&](const char* name) {
    const auto it = state.find(name);
    return it == state.end() ? std::string("unknown") : it->second;
  };
  if (value("teacher_checksum") != teacher_.checksum())
    throw UsageError(
        fmt::format("checkpoint {}: distilled from the teacher {} ({}), but {} {} has other "
                    "weights ({}); resume with the same teacher",
                    path, value("teacher"), value("teacher_checksum"), setting_reference("teacher"), teacher_.path(),
                    teacher_.checksum()));
}

}  // namespace wt::wan
