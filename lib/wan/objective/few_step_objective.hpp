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
#include "wantrain/wan/model/weight_names.hpp"  // kFakeScorePrefix

#include <string>

namespace wt::wan {

class Teacher;

enum class FewStepMethod { DistributionMatching, Consistency };
// "dmd", "consistency": what checkpoints record and --distill-method takes.
const char* few_step_method_name(FewStepMethod method);

struct FewStepOptions {
  int steps = 4;  // the student's sampling steps (K)
  // The teacher's Euler steps along its ODE (N, a multiple of K): the
  // consistency method's grid; with either method, validation's.
  int teacher_steps = 48;
  double guidance = 5.0;  // the teacher's classifier-free guidance scale built into the student
  FewStepMethod method = FewStepMethod::DistributionMatching;
  // Distribution matching: the weight lambda of DMD's regression term
  // (0: none) and the teacher's guided Euler steps M that give its target.
  double regression_weight = 0.5;
  int regression_steps = 4;
  // Every rank calls each trained model as often as the others (ZeRO-3,
  // whose forwards gather units collectively): the student's rollout takes
  // the deepest possible steps, with the same result (generator_sample).
  bool same_calls_on_every_rank = false;
  // Distribution matching: the fake score as LoRA adapters of this rank on
  // the teacher's frozen weights (0: a whole model trained in full).
  int fake_score_lora_rank = 0;
};

class FewStepObjective : public FlowMatchingObjective {
 public:
  // `student`, `teacher` and `fake_score` must outlive the objective; the
  // schedule's shift is options.flow.shift. Distribution matching needs the
  // fake score (a model of the teacher's config, trained in full as a group
  // of its own: clipped alone, no EMA, never the model's weights);
  // consistency takes none. std::invalid_argument for a schedule few_step_schedule refuses,
  // or a fake score where the method takes none or none where it needs one.
  FewStepObjective(WanModelImpl& student, const Teacher& teacher, FlowMatchingObjectiveOptions options,
                   FewStepOptions few_step, at::ScalarType compute_dtype, WanModelImpl* fake_score = nullptr);

  // The student's group, then distribution matching's fake score's.
  const std::vector<train::ParameterGroup>& groups() const override { return groups_; }
  train::ObjectiveLoss loss(const train::Batch& micro_batch, const train::StepContext& context) override;
  // Whatever the method, the phased-consistency loss at 4 fixed grid points
  // per sample (n_j = (2j + 1) N / 8): how far the student's steps are from
  // the teacher's guided ODE, with noise keyed by (sample, j) alone and
  // every caption kept; the student in eval mode.
  at::Tensor validation_losses(const train::Batch& batch) override;
  std::string kind() const override { return "few-step"; }
  // The teacher (path, checksum), the method and the student's sampler:
  // steps, shift, sigmas (the phase edges), the teacher's steps and guidance. wansample
  // reads the sampler from here (sample/student_sampler.hpp).
  std::map<std::string, std::string> checkpoint_state() const override;
  void check_resume(const std::string& kind, const std::map<std::string, std::string>& state,
                    const std::string& path) const override;

  const FewStepSchedule& schedule() const { return schedule_; }

 private:
  // The models as the methods call them, for one batch's condition: x [B,
  // ...] and each row's sigma [B] to a velocity, fp32. With a kept first
  // frame (TI2V), its tokens see timestep 0 and its velocity is 0, so no
  // step moves it.
  struct Models {
    SigmaVelocity guided_teacher;  // v_u + G (v_c - v_u), no gradient
    SigmaVelocity target;          // the student without gradient, in eval mode (θ⁻)
    SigmaVelocity student;         // with gradient
    SigmaVelocity fake_score, fake_score_without_gradient;
    at::Tensor moving;  // [B, 1, F, 1, 1]: 0 on a kept row's frame 0, else 1 (undefined: none kept)
  };
  Models models(const Inputs& in, const at::Tensor& x0, const at::Tensor& kept, double* teacher_seconds);
  // x with each kept row's frame 0 replaced by x0's.
  static at::Tensor with_first_frame(const at::Tensor& x, const at::Tensor& x0, const at::Tensor& kept);
  // The consistency loss of each row [B] for clean latents x0 noised by eps
  // at `sigmas`; `kept` [B] bool (or undefined): the rows that keep their
  // first frame.
  at::Tensor consistency_losses(const at::Tensor& x0, const at::Tensor& eps, const ConsistencySigmas& sigmas,
                                const Inputs& in, const at::Tensor& kept, double* teacher_seconds);
  // The distribution-matching losses of each row [B]: the student's and
  // the fake score's.
  at::Tensor matching_losses(const at::Tensor& x0, const Inputs& in, const std::vector<int64_t>& indices, int64_t step,
                             double* teacher_seconds);

  const Teacher& teacher_;
  const FewStepOptions few_step_;
  const FewStepSchedule schedule_;
  const at::ScalarType compute_dtype_;
  WanModelImpl* const fake_score_;
  std::vector<train::ParameterGroup> groups_;
};

}  // namespace wt::wan
