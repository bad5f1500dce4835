#include "wantrain/train/adamw_step.hpp"

#include <ATen/Parallel.h>
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
struct StepGroup {
  std::vector<at::Tensor> params, grads, exp_avg, exp_avg_sq;
};

}  // namespace

OptimizerKey optimizer_key(const at::Tensor& parameter) {
  return key_of<OptimizerKey>(parameter.unsafeGetTensorImpl());
}

namespace {

// Counts this step for every parameter of `group` with a gradient (creating
// its state as AdamW's first step does) and returns them by step count.
std::map<int64_t, StepGroup> count_step(torch::optim::AdamW& optimizer, torch::optim::OptimizerParamGroup& group) {
  const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
  if (o.amsgrad()) throw Error("AdamW step: amsgrad is not supported");
  auto& state = optimizer.state();
  std::map<int64_t, StepGroup> by_step;  // step count after this step -> its parameters
  for (auto& p : group.params()) {
    if (!p.grad().defined()) continue;
    auto& slot = state[optimizer_key(p)];
    if (!slot) {
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
  return by_step;
}

// The step's constants, in AdamW's order of operations.
struct Coefficients {
  double decay, beta1, beta2, sqrt_bias_correction2, eps, step_size;
  Coefficients(const torch::optim::AdamWOptions& o, int64_t step) {
    const auto [b1, b2] = o.betas();
    decay = 1 - o.lr() * o.weight_decay();
    beta1 = b1;
    beta2 = b2;
    sqrt_bias_correction2 = std::sqrt(1 - std::pow(b2, double(step)));
    eps = o.eps();
    step_size = o.lr() / (1 - std::pow(b1, double(step)));
  }
};

void foreach_update(StepGroup& b, const Coefficients& c) {
  // Decoupled weight decay first, then the moments, as AdamW::step.
  if (c.decay != 1) at::_foreach_mul_(b.params, c.decay);
  at::_foreach_mul_(b.exp_avg, c.beta1);
  at::_foreach_add_(b.exp_avg, b.grads, 1 - c.beta1);
  at::_foreach_mul_(b.exp_avg_sq, c.beta2);
  at::_foreach_addcmul_(b.exp_avg_sq, b.grads, b.grads, 1 - c.beta2);
  auto denom = at::_foreach_sqrt(b.exp_avg_sq);
  at::_foreach_div_(denom, c.sqrt_bias_correction2);
  at::_foreach_add_(denom, c.eps);
  at::_foreach_addcdiv_(b.params, b.exp_avg, denom, -c.step_size);
}

// One pass: each element's update in registers, in AdamW's order of
// operations (fp32 arithmetic, as the ops compute for fp32 tensors).
void fused_update(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v, int64_t n,
                  const Coefficients& c) {
  const float decay = float(c.decay), beta1 = float(c.beta1), beta2 = float(c.beta2);
  const float one_minus_beta1 = float(1 - c.beta1), one_minus_beta2 = float(1 - c.beta2);
  const float sqrt_bc2 = float(c.sqrt_bias_correction2), eps = float(c.eps), step = float(-c.step_size);
  at::parallel_for(0, n, 1 << 15, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float gi = g[i];
      const float mi = m[i] * beta1 + one_minus_beta1 * gi;
      const float vi = v[i] * beta2 + one_minus_beta2 * gi * gi;
      m[i] = mi;
      v[i] = vi;
      p[i] = p[i] * decay + (step * mi) / (std::sqrt(vi) / sqrt_bc2 + eps);  // addcdiv: (value * m) / denom
    }
  });
}

bool fusable(const at::Tensor& t) { return t.is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous(); }

}  // namespace

void foreach_adamw_step(torch::optim::AdamW& optimizer) {
  torch::NoGradGuard no_grad;
  for (auto& group : optimizer.param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    for (auto& [step, batch] : count_step(optimizer, group)) foreach_update(batch, Coefficients(o, step));
  }
}

void fused_adamw_step(torch::optim::AdamW& optimizer) {
  torch::NoGradGuard no_grad;
  for (auto& group : optimizer.param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    for (auto& [step, b] : count_step(optimizer, group)) {
      const Coefficients c(o, step);
      StepGroup rest;  // not fp32 and contiguous: tensor ops
      for (size_t i = 0; i < b.params.size(); ++i) {
        if (fusable(b.params[i]) && fusable(b.grads[i]) && fusable(b.exp_avg[i]) && fusable(b.exp_avg_sq[i])) {
          fused_update(b.params[i].data_ptr<float>(), b.grads[i].data_ptr<float>(), b.exp_avg[i].data_ptr<float>(),
                       b.exp_avg_sq[i].data_ptr<float>(), b.params[i].numel(), c);
        } else {
          rest.params.push_back(b.params[i]);
          rest.grads.push_back(b.grads[i]);
          rest.exp_avg.push_back(b.exp_avg[i]);
          rest.exp_avg_sq.push_back(b.exp_avg_sq[i]);
        }
      }
      if (!rest.params.empty()) foreach_update(rest, c);
    }
  }
}

}  // namespace wt::train
