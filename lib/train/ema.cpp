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
  // LibTorch 1.13 has no _foreach_lerp_: the differences are temporaries,
  // so they are made for groups of tensors of about 64 MiB (a group ends
  // with the tensor that reaches it) at a time.
  constexpr int64_t kGroupElements = int64_t(16) << 20;
  std::vector<at::Tensor> averages, weights;
  int64_t elements = 0;
  auto flush = [&] {
    if (!averages.empty()) at::_foreach_add_(averages, at::_foreach_sub(weights, averages), 1.0 - decay_);
    averages.clear();
    weights.clear();
    elements = 0;
  };
  for (size_t i = 0; i < weights_.size(); ++i) {
    averages.push_back(averages_[i].second);
    weights.push_back(weights_[i].second.to(torch::kFloat32));
    elements += averages.back().numel();
    if (elements >= kGroupElements) flush();
  }
  flush();
}

}  // namespace wt::train
