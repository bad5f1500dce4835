// Distillation: the flow-matching inputs (the same noise, timestep and
// possibly dropped context) go to a frozen teacher and to the trained
// student; the loss is wan/objective/distillation.hpp's MSE to the teacher plus an
// optional weight on the flow-matching target.
#pragma once

#include "wantrain/wan/objective/flow_matching_objective.hpp"

namespace wt::wan {

class Teacher;

class DistillationObjective : public FlowMatchingObjective {
 public:
  // `student` and `teacher` must outlive the objective. The teacher computes
  // in `compute_dtype` (its own precision rules: wan/objective/teacher.hpp).
  DistillationObjective(WanModelImpl& student, const Teacher& teacher, FlowMatchingObjectiveOptions options,
                        double target_weight, at::ScalarType compute_dtype);

  train::ObjectiveLoss loss(const train::Batch& micro_batch, const train::StepContext& context) override;
  std::string kind() const override { return "distillation"; }
  // The teacher's path and the checksum of its weights: the teacher is an
  // input, as the data are, and resuming against other weights would
  // silently change the objective.
  std::map<std::string, std::string> checkpoint_state() const override;
  void check_resume(const std::string& kind, const std::map<std::string, std::string>& state,
                    const std::string& path) const override;

 private:
  const Teacher& teacher_;
  const double target_weight_;
  const at::ScalarType compute_dtype_;
};

}  // namespace wt::wan
