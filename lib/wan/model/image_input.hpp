// What an image-to-video WanModel (model_type i2v or flf2v) reads besides
// the noisy latents, the timestep and the text (wan/sample/image_condition.hpp
// builds it from pictures; shards store it as /y and /clip_fea).
#pragma once

#include <ATen/core/Tensor.h>

namespace wt::wan {

struct ImageCondition {
  at::Tensor y;         // [B, 4 + out_dim, F, H, W]: the frame mask and the latents of the given frames
  at::Tensor clip_fea;  // [B, images * image_tokens, image_dim]: CLIP features (image_dim > 0 only)
};

}  // namespace wt::wan
