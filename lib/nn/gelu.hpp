// GELU, tanh approximation (PyTorch's approximate="tanh", as Wan's FFN uses):
//   gelu(x) = x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

namespace wt::nn {

// A contiguous fp32 x on the CPU takes one fused, vectorised pass each way
// (an autograd Function that saves x, as LibTorch's GELU does); anything
// else LibTorch's gelu(approximate="tanh").
at::Tensor gelu_tanh(const at::Tensor& x);

// gelu_tanh as a module, for nn::Sequential (no parameters: the Sequential's
// weight names are those of torch::nn::GELU in its place).
class GeluTanhImpl : public torch::nn::Module {
 public:
  at::Tensor forward(const at::Tensor& x) { return gelu_tanh(x); }
};
TORCH_MODULE(GeluTanh);

}  // namespace wt::nn
