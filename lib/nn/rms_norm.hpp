// RMSNorm's arithmetic: y = x * rsqrt(mean(x^2) + eps) * weight over the
// last dim, normalised in fp32 (T5's and Wan's RMSNorm; Wan's q/k norms).
#pragma once

#include <ATen/core/Tensor.h>

namespace wt::nn {

// x [..., dim] (any float dtype), weight [dim] fp32. The normalised x is
// rounded to x's dtype before the weight multiplies it (as Wan's WanRMSNorm
// does), so a bf16 x gives fp32 out. A contiguous fp32 x on the CPU takes one
// fused pass each way (an autograd Function); anything else, tensor ops.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

}  // namespace wt::nn
