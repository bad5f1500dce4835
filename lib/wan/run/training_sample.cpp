#include "wantrain/wan/run/training_sample.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <optional>

#include "wantrain/data/shard.hpp"
#include "wantrain/util/reporter.hpp"
#include "wantrain/wan/run/sampling_weights.hpp"
#include "wantrain/wan/sample/dataset_sample.hpp"
#include "wantrain/wan/sample/latent_comparison.hpp"
#include "wantrain/wan/model/fun_control_start.hpp"
#include "wantrain/wan/model/reference_frame.hpp"
#include "wantrain/wan/sample/sample_outputs.hpp"
#include "wantrain/wan/sample/sampling_core.hpp"
#include "wantrain/wan/sample/vace_condition.hpp"
#include "wantrain/util/error.hpp"

namespace wt::wan {
TrainingSampler::TrainingSampler(const data::Dataset& dataset, const TrainingSampleOptions& options)
    : options_(options) {
  if (options.index < 0 || options.index >= dataset.size())
    throw SettingError("sample_index",
                       fmt::format("{} is outside the {} training samples", options.index, dataset.size()));
  auto sample = read_dataset_sample(dataset, options.index);  // at the shape of its bucket
  latents_ = sample.latents;
  context_ = sample.context;
  image_ = sample.image;
}

train::SampleReport TrainingSampler::draw(WanModelImpl& model, const train::NamedTensors& trainable,
                                          const train::NamedTensors& weights, int64_t step,
                                          const HighNoiseModel* high) const {
  const auto start = std::chrono::steady_clock::now();
  // The sample ranks' model comes without a trainable list: its own parameters' device.
  const auto device = trainable.empty() ? model.parameters().front().device() : trainable.front().second.device();
  at::Tensor latents;
  {
    torch::NoGradGuard no_grad;
    const SwappedWeights swapped(trainable, weights);
    const EvalMode eval(model);
    SampleModels models;
    models.model = &model;
    if (high) models.high = *high;
    // The training sample's caption, guided against the unconditional
    // context (what caption dropout trains), with its picture.
    SampleCondition condition;
    condition.context = context_;
    condition.image = shown_condition(image_, model.config());  // with a reference frame: the start
    if (options_.first_frame && latents_.size(1) > 1)
      condition.first_frame = latents_.slice(1, 0, 1).unsqueeze(0);  // [1, C, 1, H, W]
    const auto& config = model.config();
    if (config.holds_start_frame() && condition.image.y.defined() && start_given(condition.image.y, config.out_dim)[0])
      condition.first_frame = start_latents(condition.image.y, config.out_dim);  // Wan2.2-Fun-5B-Control's start
    auto shape = latents_.sizes().vec();  // the data fit the model: C is its out_dim
    shape.insert(shape.begin(), 1);
    // A VACE sample's reference pictures: latent frames drawn first and dropped (vace_condition.hpp).
    const int64_t references = image_.vace_context.defined() ? image_.vace_context.size(2) - latents_.size(1) : 0;
    shape[2] += references;
    const auto noise = seeded_noise(shape, options_.seed).to(device);
    latents = drop_reference_frames(draw_latents(models, condition, options_.sampler, noise, options_.compute_dtype),
                                    references);
  }
  train::SampleReport report;
  report.index = options_.index;
  const auto comparison = compare_latents(latents, latents_);
  report.correlation = comparison.correlation;
  report.mse = comparison.mse;
  // The preview (the sample above the training sample's latents), as a PNG
  // in the run's samples/ folder when it has one, and for TensorBoard.
  if (!options_.directory.empty()) {
    std::error_code error;
    std::filesystem::create_directories(options_.directory, error);
    report.png_path = fmt::format("{}/step-{:08d}.png", options_.directory, step);
  }
  PreviewPng preview(report.png_path);
  // A sample is for looking at: a full or read-only disk costs its PNG, not the run.
  try {
    preview.write({latents, latents_});
  } catch (const Error& e) {
    report_warning("{} (the sample is not saved; training goes on)", e.what());
    report.png_path.clear();
  }
  report.image = preview.image();
  if (options_.directory.empty()) return report;
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace wt::wan
