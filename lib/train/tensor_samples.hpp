// TensorSamples: a dataset already in memory as named tensors whose first
// dimension is the sample (csvfit's standardised table), as a SampleSource.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <string>

#include "wantrain/train/sample_source.hpp"

namespace wt::train {

class TensorSamples final : public SampleSource {
 public:
  // Every tensor must have the same first dimension.
  explicit TensorSamples(std::map<std::string, at::Tensor> tensors) : tensors_(std::move(tensors)) {}
  int64_t size() const override { return tensors_.empty() ? 0 : tensors_.begin()->second.size(0); }
  Batch read(const std::vector<int64_t>& indices) override {
    Batch batch;
    batch.indices = indices;
    const auto rows = at::tensor(indices, at::kLong);
    for (const auto& [name, tensor] : tensors_) batch.tensors.emplace(name, tensor.index_select(0, rows));
    return batch;
  }

 private:
  std::map<std::string, at::Tensor> tensors_;
};

}  // namespace wt::train
