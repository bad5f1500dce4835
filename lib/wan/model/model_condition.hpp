// What a WanModel reads besides the noisy latents, the timestep and the
// text: an image-to-video model's condition (model_type i2v or flf2v;
// wan/sample/image_condition.hpp builds it from pictures,
// fun_control_condition.hpp from a control video, shards store it as /y and
// /clip_fea) and a VACE model's context (model_type vace).
#pragma once

#include <ATen/core/Tensor.h>

namespace wt::wan {

struct ModelCondition {
  at::Tensor y;         // [B, 4 + out_dim, F, H, W]: the frame mask and the latents of the given frames
  at::Tensor clip_fea;  // [B, images * image_tokens, image_dim]: CLIP features (image_dim > 0 only)
  // [B, vace_in_dim, F, H, W]: the VACE context (the inactive and reactive
  // latents and the folded mask), fed to the VACE blocks, whose hints are
  // added after the base blocks at vace_layers, each times vace_scale.
  at::Tensor vace_context{};
  double vace_scale = 1.0;
  // [B, out_dim, F, H, W]'s [B, out_dim, H, W]: a Fun-Control V1.1 model's
  // reference picture's latent frame (ref_conv); undefined: zeros.
  at::Tensor full_ref{};
};

}  // namespace wt::wan
