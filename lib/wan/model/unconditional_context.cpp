#include "wantrain/wan/model/unconditional_context.hpp"

#include <torch/torch.h>

namespace wt::wan {

at::Tensor unconditional_context(const at::Tensor& context) { return torch::zeros_like(context); }

}  // namespace wt::wan
