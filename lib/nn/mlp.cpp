#include "wantrain/nn/mlp.hpp"

#include <torch/torch.h>

namespace wt::nn {

torch::nn::Sequential make_mlp(int64_t inputs, const std::vector<int64_t>& hidden, int64_t outputs) {
  torch::nn::Sequential mlp;
  int64_t width = inputs;
  for (const int64_t h : hidden) {
    mlp->push_back(torch::nn::Linear(width, h));
    mlp->push_back(torch::nn::GELU());
    width = h;
  }
  mlp->push_back(torch::nn::Linear(width, outputs));
  return mlp;
}

}  // namespace wt::nn
