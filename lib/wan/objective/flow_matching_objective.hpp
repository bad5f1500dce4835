// The flow-matching objective of Wan (wan/model/flow_matching.hpp has the math):
// a WanModel predicts v = eps - x0 from x_t, the timestep and the text
// context, with caption dropout to the unconditional context.
// Batch tensors: "latents" [B, C, F, H, W] and "text_emb" [B, L, D]; for an
// image-to-video model also "y" [B, 4 + C, F, H, W] and "clip_fea" [B, T,
// D'] (wandata encode --condition), with image dropout of clip_fea.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "wantrain/wan/model/flow_matching.hpp"
#include "wantrain/train/objective.hpp"

#include "wantrain/wan/model/model_condition.hpp"
#include "wantrain/wan/model/model_config.hpp"

namespace wt::wan {
class WanModelImpl;
}

namespace wt::wan {

struct FlowMatchingObjectiveOptions {
  FlowMatchingOptions flow;
  double text_drop = 0.1;  // probability of the unconditional context
  // Probability of zeroed CLIP features (an image-to-video model with the
  // CLIP branch); y, the first frame's latents, is always kept: the task is
  // to continue that frame, with or without the picture's CLIP summary.
  double image_drop = 0;
  // A Fun-Control model's (VideoX-Fun's train_control.py: 0.1 each): the
  // probability that a sample's control latents, or its start frame's, are
  // zeroed (y's first or second half).
  double control_drop = 0, start_drop = 0;
  // A Fun-Control V1.1 model on data with a reference frame (wandata encode
  // --condition fun-control-ref): the probability that a sample is shown its
  // other frame as the reference instead of its start (train_control.py's
  // --control_ref_image random: 0.6), and that the reference's latents are
  // then zeroed (its 0.1).
  double ref_other_frame = 0.6, ref_drop = 0;
  // Wan2.2 TI2V's first-frame condition (--condition first-frame): the
  // probability that a sample keeps its first latent frame clean, at
  // timestep 0 and out of the loss (caption_dropout.hpp keys the draw); the
  // other samples train text-to-video. 0: off. Validation then keeps every
  // sample's first frame (of those with more than one latent frame).
  double first_frame_prob = 0;
  uint64_t seed = 0;  // keys each sample's noise and caption drop with the step
  // With LoRA (add_lora): the adapters' description and the frozen
  // base's weights_checksum. Checkpoints record both, since they hold only
  // the adapters, and a resume must find the same ones; and the precision
  // the base's block Linears are held in ("bf16" or "fp32"). Empty otherwise.
  std::string lora, lora_base, lora_base_precision;
  // A VACE model's branch trained alone (--trainable vace without LoRA):
  // its frozen base's checksum (vace_base_checksum), recorded as LoRA's.
  std::string vace_base;
};

// A batch's condition in fp32 ("y", "clip_fea", "vace_context"), where it
// has one, as `config`'s model reads it: from data with a reference frame
// (reference_frame.hpp), each row's start, or its reference where `other`
// says so (with `reference_dropped`, zeroed).
ModelCondition image_condition(const train::Batch& batch, const WanConfig& config, const std::vector<bool>& other = {},
                               const std::vector<bool>& reference_dropped = {});
// The latents a sample is trained on: /latents, after a VACE sample's
// reference pictures' latent frames (the inactive half of the first R
// frames of its context), as DiffSynth-Studio trains them and the model
// samples them (the noise has those frames too).
at::Tensor training_latents(const train::Batch& batch);

class FlowMatchingObjective : public train::Objective {
 public:
  // `model` must outlive the objective. Its parameters that require a
  // gradient are trained: all of them, or only the adapters after
  // add_lora froze the rest.
  FlowMatchingObjective(WanModelImpl& model, FlowMatchingObjectiveOptions options);

  // One group: the model.
  const std::vector<train::ParameterGroup>& groups() const override { return groups_; }
  std::vector<at::Tensor> buffers() const override;
  train::ObjectiveLoss loss(const train::Batch& micro_batch, const train::StepContext& context) override;
  // Each sample's sigma and noise eps for `step`: "noise.sigma" [B] and
  // "noise.eps" [B, C, F, H, W], fp32; with caption dropout its draws,
  // "caption.keep" [B] bool.
  void make_inputs_ahead(train::Batch& batch, int64_t step, const train::HostAllocator& allocate) const override;
  // The flow-matching loss at a fixed grid of 4 sigmas per sample,
  // sigma_j = shift_sigma((j + 0.5) / 4), with noise keyed by (sample, j)
  // alone, averaged over the grid; the model runs in eval mode.
  at::Tensor validation_losses(const train::Batch& batch) override;
  std::map<std::string, std::string> checkpoint_state() const override;
  std::string kind() const override { return "flow-matching"; }
  void check_resume(const std::string& kind, const std::map<std::string, std::string>& state,
                    const std::string& path) const override;

 protected:
  // The model's inputs: x_t, timesteps and target from noise keyed by
  // (seed, step, sample), made ahead or drawn now, and the context after
  // caption dropout.
  struct Inputs {
    NoisyBatch noisy;
    at::Tensor eps;        // the noise of x_t, on its device, fp32
    at::Tensor context;    // [B, L, D] fp32
    ModelCondition image;  // fp32; image dropout applied
    // With the first-frame condition or a Wan2.2-Fun-5B-Control start: [B]
    // bool, the rows whose frame 0 is kept (x_t holds x0 there and the
    // timesteps are per token, [B, L]).
    at::Tensor first_frame_kept;
  };
  // The loss of a prediction for `in` (flow_matching_loss, or
  // first_frame_loss with the first-frame condition).
  static at::Tensor loss_of(const at::Tensor& prediction, const at::Tensor& target, const Inputs& in);
  Inputs prepare(const train::Batch& micro_batch, const train::StepContext& context) const;
  // Wan2.2-Fun-5B-Control (WanConfig::holds_start_frame()): the rows whose
  // condition shows a start frame, held clean as TI2V's first frame (with
  // with_held_start's latents); empty for other models or a still.
  std::vector<bool> held_starts(const ModelCondition& image, int64_t latent_frames) const;
  // x0 with the `kept` rows' latent frame 0 what a Wan2.2-Fun-5B-Control
  // model holds there: the start's latents in y, as the pipeline and
  // train_control.py hold them (the clip's own frame 0 for data wandata
  // encode makes, to rounding); x0 itself for other models.
  at::Tensor with_held_start(const at::Tensor& x0, const ModelCondition& image, const at::Tensor& kept) const;

  WanModelImpl& model_;
  const FlowMatchingObjectiveOptions options_;

 private:
  std::vector<train::ParameterGroup> groups_;
};

}  // namespace wt::wan
