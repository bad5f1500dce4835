#include "wantrain/wan/objective/distillation.hpp"

#include <torch/torch.h>

#include "wantrain/wan/model/flow_matching.hpp"

namespace wt::wan {

at::Tensor distillation_loss(const at::Tensor& student, const at::Tensor& teacher, const at::Tensor& target,
                             double target_weight) {
  auto loss = flow_matching_loss(student, teacher);
  if (target_weight > 0) loss = loss + target_weight * flow_matching_loss(student, target);
  return loss;
}

}  // namespace wt::wan
