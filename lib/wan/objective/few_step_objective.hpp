// Few-step distillation (`wantrain --mode distill --distill-steps K`): a
// student of the teacher's architecture, started from the teacher's weights
// (in full, or as LoRA adapters on them), learns to sample in K steps with
// guidance built in, by phased consistency along the teacher's guided ODE
// (wan/objective/phased_consistency.hpp has the method and its equations).
// The noise, caption and image dropout are flow matching's, keyed alike;
// every model sees the sample's condition (text, an image-to-video
// model's picture, and Wan2.2 TI2V's clean first frame under
// --condition first-frame).
#pragma once

#include "wantrain/wan/objective/flow_matching_objective.hpp"
#include "wantrain/wan/objective/phased_consistency.hpp"

namespace wt::wan {

class Teacher;

struct FewStepOptions {
  int steps = 4;           // the student's sampling steps (K)
  int teacher_steps = 48;  // the teacher's Euler steps along its ODE (N, a multiple of K)
  double guidance = 5.0;   // the teacher's classifier-free guidance scale built into the student
};

class FewStepObjective : public FlowMatchingObjective {
 public:
  // `student` and `teacher` must outlive the objective; the schedule's shift
  // is options.flow.shift. std::invalid_argument for a schedule
  // few_step_schedule refuses.
  FewStepObjective(WanModelImpl& student, const Teacher& teacher, FlowMatchingObjectiveOptions options,
                   FewStepOptions few_step, at::ScalarType compute_dtype);

  train::ObjectiveLoss loss(const train::Batch& micro_batch, const train::StepContext& context) override;
  // The loss at 4 fixed grid points per sample (n_j = (2j + 1) N / 8), with
  // noise keyed by (sample, j) alone and every caption kept; the student in
  // eval mode.
  at::Tensor validation_losses(const train::Batch& batch) override;
  std::string kind() const override { return "few-step"; }
  // The teacher (path, checksum) and the student's sampler: steps, shift,
  // sigmas (the phase edges), the teacher's steps and guidance. wansample
  // reads the sampler from here (sample/student_sampler.hpp).
  std::map<std::string, std::string> checkpoint_state() const override;
  void check_resume(const std::string& kind, const std::map<std::string, std::string>& state,
                    const std::string& path) const override;

  const FewStepSchedule& schedule() const { return schedule_; }

 private:
  // The loss of each row [B] for clean latents x0 noised by eps at
  // `sigmas`; `kept` [B] bool (or undefined): the rows that keep their
  // first frame.
  at::Tensor row_losses(const at::Tensor& x0, const at::Tensor& eps, const ConsistencySigmas& sigmas, const Inputs& in,
                        const at::Tensor& kept, double* teacher_seconds);

  const Teacher& teacher_;
  const FewStepOptions few_step_;
  const FewStepSchedule schedule_;
  const at::ScalarType compute_dtype_;
};

}  // namespace wt::wan
