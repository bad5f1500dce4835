// The distillation objective: the student learns the teacher's prediction
// for the same noisy input, optionally pulled towards the flow-matching
// target too:
//   loss = MSE(student, teacher) + w * MSE(student, eps - x0)    (fp32)
#pragma once

#include <ATen/core/Tensor.h>

namespace wt::wan {

at::Tensor distillation_loss(const at::Tensor& student, const at::Tensor& teacher, const at::Tensor& target,
                             double target_weight);

}  // namespace wt::wan
