#include "wantrain/train/foreach_adamw.hpp"

#include <torch/torch.h>

#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <type_traits>

#include "wantrain/util/error.hpp"

namespace wt::train {
namespace {

template <class Key>
Key key_of(c10::TensorImpl* impl) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream address;
    address << static_cast<const void*>(impl);
    return address.str();
  } else {
    return impl;
  }
}

// The parameters of one group that share a step count: one set of _foreach_ calls.
struct Batch {
  std::vector<at::Tensor> params, grads, exp_avg, exp_avg_sq;
};

}  // namespace

OptimizerKey optimizer_key(const at::Tensor& parameter) {
  return key_of<OptimizerKey>(parameter.unsafeGetTensorImpl());
}

void foreach_adamw_step(torch::optim::AdamW& optimizer) {
  torch::NoGradGuard no_grad;
  auto& state = optimizer.state();
  for (auto& group : optimizer.param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    if (o.amsgrad()) throw Error("foreach_adamw_step: amsgrad is not supported");
    std::map<int64_t, Batch> by_step;  // step count after this step -> its parameters
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& slot = state[optimizer_key(p)];
      if (!slot) {  // as AdamW's first step creates it
        auto fresh = std::make_unique<torch::optim::AdamWParamState>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
        slot = std::move(fresh);
      }
      auto& s = static_cast<torch::optim::AdamWParamState&>(*slot);
      s.step(s.step() + 1);
      auto& batch = by_step[s.step()];
      batch.params.push_back(p);
      batch.grads.push_back(p.grad());
      batch.exp_avg.push_back(s.exp_avg());
      batch.exp_avg_sq.push_back(s.exp_avg_sq());
    }
    const auto [beta1, beta2] = o.betas();
    for (auto& [step, b] : by_step) {
      // Decoupled weight decay first, then the moments, as AdamW::step.
      if (o.weight_decay() != 0) at::_foreach_mul_(b.params, 1 - o.lr() * o.weight_decay());
      at::_foreach_mul_(b.exp_avg, beta1);
      at::_foreach_add_(b.exp_avg, b.grads, 1 - beta1);
      at::_foreach_mul_(b.exp_avg_sq, beta2);
      at::_foreach_addcmul_(b.exp_avg_sq, b.grads, b.grads, 1 - beta2);
      const double bias_correction1 = 1 - std::pow(beta1, double(step));
      const double bias_correction2 = 1 - std::pow(beta2, double(step));
      auto denom = at::_foreach_sqrt(b.exp_avg_sq);
      at::_foreach_div_(denom, std::sqrt(bias_correction2));
      at::_foreach_add_(denom, o.eps());
      at::_foreach_addcdiv_(b.params, b.exp_avg, denom, -o.lr() / bias_correction1);
    }
  }
}

}  // namespace wt::train
