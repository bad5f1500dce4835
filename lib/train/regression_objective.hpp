// RegressionObjective: mean squared error of a module's prediction of the
// batch's "y" [B, T] from its "x" [B, F] — the objective of csvfit's MLP
// (apps/csvfit), and the smallest complete example of an Objective.
#pragma once

#include <torch/nn/modules/container/sequential.h>

#include "wantrain/train/objective.hpp"

namespace wt::train {

class RegressionObjective final : public Objective {
 public:
  // `model` (held by reference: it must outlive the objective) maps [B, F]
  // to [B, T]; all its parameters are trained.
  explicit RegressionObjective(torch::nn::Sequential model);

  // One group: the module.
  const std::vector<ParameterGroup>& groups() const override { return groups_; }
  std::vector<at::Tensor> buffers() const override;
  ObjectiveLoss loss(const Batch& micro_batch, const StepContext& context) override;
  // Each sample's squared error averaged over its T targets, in fp64.
  at::Tensor validation_losses(const Batch& batch) override;
  std::string kind() const override { return "regression"; }

 private:
  at::Tensor squared_errors(const Batch& batch);  // [B, T] fp32

  torch::nn::Sequential model_;
  std::vector<ParameterGroup> groups_;
};

}  // namespace wt::train
