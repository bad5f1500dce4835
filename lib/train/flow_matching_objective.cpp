#include "train/flow_matching_objective.hpp"

#include <torch/torch.h>

#include <chrono>

#include "model/wan_model.hpp"
#include "train/caption_dropout.hpp"

namespace wt::train {

FlowMatchingObjective::FlowMatchingObjective(model::WanModelImpl& model, FlowMatchingObjectiveOptions options)
    : model_(model), options_(options) {
  for (const auto& item : model_.named_parameters(/*recurse=*/true)) trainable_.emplace_back(item.key(), item.value());
}

std::vector<at::Tensor> FlowMatchingObjective::buffers() const { return model_.buffers(); }

FlowMatchingObjective::Inputs FlowMatchingObjective::prepare(const Batch& micro_batch,
                                                             const StepContext& context) const {
  const auto x0 = micro_batch.at("latents").to(torch::kFloat32);
  Inputs inputs{make_noisy_batch(x0, micro_batch.indices, options_.seed, context.step, options_.flow), {}};
  inputs.context = drop_captions(micro_batch.at("text_emb").to(torch::kFloat32),
                                 caption_drops(micro_batch.indices, options_.seed, context.step, options_.text_drop));
  return inputs;
}

ObjectiveLoss FlowMatchingObjective::loss(const Batch& micro_batch, const StepContext& context) {
  const auto start = std::chrono::steady_clock::now();
  const auto in = prepare(micro_batch, context);
  ObjectiveLoss out;
  out.prepare_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.loss = flow_matching_loss(model_.forward(in.noisy.x_t, in.noisy.timesteps, in.context), in.noisy.target);
  return out;
}

}  // namespace wt::train
