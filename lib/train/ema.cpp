#include "wantrain/train/ema.hpp"

#include <torch/torch.h>

namespace wt::train {

Ema::Ema(NamedTensors weights, double decay) : weights_(std::move(weights)), decay_(decay) {
  torch::NoGradGuard no_grad;
  for (const auto& [name, w] : weights_) averages_.emplace_back(name, w.detach().to(torch::kFloat32, false, true));
}

void Ema::update() {
  if (!averages_.empty() && averages_.front().second.is_cuda()) return update_multi_tensor();
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < weights_.size(); ++i)
    averages_[i].second.lerp_(weights_[i].second.to(torch::kFloat32), 1.0 - decay_);
}

void Ema::update_multi_tensor() {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> averages, weights;
  for (size_t i = 0; i < weights_.size(); ++i) {
    averages.push_back(averages_[i].second);
    weights.push_back(weights_[i].second.to(torch::kFloat32));
  }
  at::_foreach_add_(averages, at::_foreach_sub(weights, averages), 1.0 - decay_);
}

}  // namespace wt::train
