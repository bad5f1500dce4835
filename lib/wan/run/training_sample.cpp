#include "wantrain/wan/run/training_sample.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <optional>

#include "wantrain/data/shard.hpp"
#include "wantrain/nn/autocast.hpp"
#include "wantrain/util/reporter.hpp"
#include "wantrain/wan/model/unconditional_context.hpp"
#include "wantrain/wan/run/sampling_weights.hpp"
#include "wantrain/wan/sample/dataset_sample.hpp"
#include "wantrain/wan/sample/latent_comparison.hpp"
#include "wantrain/wan/sample/latent_preview.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"

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
    const nn::AutocastScope autocast(options_.compute_dtype, device.type());
    const auto cond = context_.unsqueeze(0).to(device);  // [1, L, D]
    const auto uncond = unconditional_context(cond);     // what caption dropout trains
    // Both branches see the picture (Wan's image2video guides on the text only).
    ImageCondition image;
    if (image_.y.defined()) image.y = image_.y.to(device);
    if (image_.clip_fea.defined()) image.clip_fea = image_.clip_fea.to(device);
    const VelocityField velocity = model_velocity(model, cond, uncond, image);
    std::optional<HighNoiseExpert> high_expert;
    if (high)
      high_expert =
          HighNoiseExpert{model_velocity(*high->model, cond, uncond, image), options_.sampler.cfg, high->boundary};
    // The same noise at every draw, from a generator of its own: training's
    // random streams are untouched.
    auto generator = at::make_generator<at::CPUGeneratorImpl>(options_.seed);
    auto shape = latents_.sizes().vec();  // the data fit the model: C is its out_dim
    shape.insert(shape.begin(), 1);
    const auto noise = torch::randn(shape, generator, torch::kFloat32).to(device);
    auto sampler = options_.sampler;
    if (options_.first_frame && latents_.size(1) > 1) {
      sampler.first_frame = latents_.slice(1, 0, 1).unsqueeze(0).to(device);  // [1, C, 1, H, W]
      sampler.patch = model.config().patch_size;
    }
    latents = sample_flow(noise, velocity, sampler, high_expert ? &*high_expert : nullptr)[0].cpu();  // [C, F, H, W]
  }
  train::SampleReport report;
  report.index = options_.index;
  const auto comparison = compare_latents(latents, latents_);
  report.correlation = comparison.correlation;
  report.mse = comparison.mse;
  const auto preview = latent_preview({latents, latents_});
  report.image = {preview.width, preview.height, 1, preview.png()};
  if (options_.directory.empty()) return report;
  // A sample is for looking at: a full or read-only disk costs its PNG, not the run.
  std::error_code error;
  std::filesystem::create_directories(options_.directory, error);
  report.png_path = fmt::format("{}/step-{:08d}.png", options_.directory, step);
  try {
    write_file_durably(report.png_path, report.image.png);
  } catch (const Error& e) {
    report_warning("{} (the sample is not saved; training goes on)", e.what());
    report.png_path.clear();
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace wt::wan
