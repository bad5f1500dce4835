// A multi-layer perceptron: Linear layers of the given widths with GELU
// between them (csvfit's regressor). Parameter names are the Sequential's:
// "0.weight", "0.bias", "2.weight", ...
#pragma once

#include <torch/nn/modules/container/sequential.h>

#include <cstdint>
#include <vector>

namespace wt::nn {

torch::nn::Sequential make_mlp(int64_t inputs, const std::vector<int64_t>& hidden, int64_t outputs);

}  // namespace wt::nn
