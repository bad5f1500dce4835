#include "wantrain/train/regression_objective.hpp"

#include <torch/torch.h>

namespace wt::train {

RegressionObjective::RegressionObjective(torch::nn::Sequential model) : model_(std::move(model)), groups_(1) {
  for (const auto& item : model_->named_parameters(/*recurse=*/true))
    groups_.front().parameters.emplace_back(item.key(), item.value());
}

std::vector<at::Tensor> RegressionObjective::buffers() const { return model_->buffers(); }

at::Tensor RegressionObjective::squared_errors(const Batch& batch) {
  const auto prediction = model_->forward(batch.at("x")).to(at::kFloat);
  return (prediction - batch.at("y").to(at::kFloat)).square();
}

ObjectiveLoss RegressionObjective::loss(const Batch& micro_batch, const StepContext&) {
  model_->train();
  return {squared_errors(micro_batch).mean()};
}

at::Tensor RegressionObjective::validation_losses(const Batch& batch) {
  model_->eval();
  auto losses = squared_errors(batch).mean(1).to(at::kDouble);
  model_->train();
  return losses;
}

}  // namespace wt::train
