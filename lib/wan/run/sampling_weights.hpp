// What a sample drawn during training runs in: the weights to draw with
// swapped into the model for the scope (the EMA's, by reference), and the
// model in eval mode; each put back as it was when the scope ends.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <vector>

#include "wantrain/train/objective.hpp"
#include "wantrain/wan/model/wan_model.hpp"

namespace wt::wan {

// Puts `weights` into `trainable` for the life of the scope. set_data keeps
// each parameter's autograd identity (its gradient accumulator, which the
// Reducer's hooks hang on) as long as dtype and device stay the same.
class SwappedWeights {
 public:
  SwappedWeights(const train::NamedTensors& trainable, const train::NamedTensors& weights) : trainable_(trainable) {
    if (weights.empty()) return;
    TORCH_CHECK(weights.size() == trainable.size(), "a sample's weights name every trained parameter");
    for (size_t i = 0; i < trainable.size(); ++i)  // all checked before any is swapped
      TORCH_CHECK(weights[i].first == trainable[i].first, "a sample's weights come in the trained parameters' order");
    saved_.reserve(trainable.size());
    for (size_t i = 0; i < trainable.size(); ++i) {
      auto parameter = trainable[i].second;
      saved_.push_back(parameter.data());
      parameter.set_data(weights[i].second.to(parameter.options()));
    }
  }
  ~SwappedWeights() {
    for (size_t i = 0; i < saved_.size(); ++i) {
      auto parameter = trainable_[i].second;
      parameter.set_data(saved_[i]);
    }
  }
  SwappedWeights(const SwappedWeights&) = delete;
  SwappedWeights& operator=(const SwappedWeights&) = delete;

 private:
  const train::NamedTensors& trainable_;
  std::vector<at::Tensor> saved_;
};

// eval() for the life of the scope (no LoRA dropout), then the mode it had.
class EvalMode {
 public:
  explicit EvalMode(WanModelImpl& model) : model_(model), was_training_(model.is_training()) { model.eval(); }
  ~EvalMode() { model_.train(was_training_); }
  EvalMode(const EvalMode&) = delete;
  EvalMode& operator=(const EvalMode&) = delete;

 private:
  WanModelImpl& model_;
  bool was_training_;
};

}  // namespace wt::wan
