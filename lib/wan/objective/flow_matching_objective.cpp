#include "wantrain/wan/objective/flow_matching_objective.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <chrono>

#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/model/fun_control_start.hpp"
#include "wantrain/wan/model/reference_frame.hpp"
#include "wantrain/wan/objective/caption_dropout.hpp"
#include "wantrain/util/error.hpp"

namespace wt::wan {
namespace {

std::string sigma_range(const FlowMatchingOptions& flow) {
  return fmt::format("[{:g}, {:g}]", flow.sigma_min, flow.sigma_max);
}

// Noise of validation sample i at grid point j: independent of --seed, so
// runs with different seeds are scored on the same problem.
constexpr uint64_t kValidationSeed = 0x76616c6964617465;  // "validate"
constexpr int kValidationGrid = 4;
// The batch tensors make_inputs_ahead adds.
constexpr const char* kNoiseSigma = "noise.sigma";
constexpr const char* kNoiseEps = "noise.eps";
constexpr const char* kCaptionKeep = "caption.keep";
constexpr const char* kImageKeep = "image.keep";

}  // namespace

ModelCondition image_condition(const train::Batch& batch, const WanConfig& config, const std::vector<bool>& other,
                               const std::vector<bool>& reference_dropped) {
  ModelCondition image;
  if (const auto y = batch.tensors.find("y"); y != batch.tensors.end()) image.y = y->second.to(torch::kFloat32);
  if (const auto f = batch.tensors.find("clip_fea"); f != batch.tensors.end())
    image.clip_fea = f->second.to(torch::kFloat32);
  if (const auto v = batch.tensors.find("vace_context"); v != batch.tensors.end())
    image.vace_context = v->second.to(torch::kFloat32);
  if (const int64_t c = config.reference_y_channels(); c > 0 && image.y.defined() && image.y.size(1) == c)
    return pick_reference(image, config.out_dim, other, reference_dropped);
  return image;  // (shown_condition's case without draws)
}

at::Tensor training_latents(const train::Batch& batch) {
  const auto& latents = batch.at("latents");
  const auto v = batch.tensors.find("vace_context");
  if (v == batch.tensors.end() || v->second.size(2) == latents.size(2)) return latents;
  const int64_t references = v->second.size(2) - latents.size(2);
  return torch::cat(
      {v->second.narrow(1, 0, latents.size(1)).narrow(2, 0, references).to(latents.scalar_type()), latents}, 2);
}

FlowMatchingObjective::FlowMatchingObjective(WanModelImpl& model, FlowMatchingObjectiveOptions options)
    : model_(model), options_(options), groups_(1) {
  for (const auto& item : model_.named_parameters(/*recurse=*/true))
    if (item.value().requires_grad()) groups_.front().parameters.emplace_back(item.key(), item.value());
  groups_.front().unit_of = [config = model_.config()](const std::string& name) { return zero_unit(config, name); };
}

std::vector<at::Tensor> FlowMatchingObjective::buffers() const { return model_.buffers(); }

FlowMatchingObjective::Inputs FlowMatchingObjective::prepare(const train::Batch& micro_batch,
                                                             const train::StepContext& context) const {
  const auto x0 = training_latents(micro_batch).to(torch::kFloat32);
  Noise noise;
  if (micro_batch.tensors.count(kNoiseEps)) {
    if (micro_batch.ahead_step != context.step)
      throw Error(fmt::format("internal: a batch's noise was made for step {} but is used at step {}",
                              micro_batch.ahead_step, context.step));
    noise = {micro_batch.at(kNoiseSigma), micro_batch.at(kNoiseEps)};
  } else {
    noise = training_noise(x0.sizes(), micro_batch.indices, options_.seed, context.step, options_.flow);
  }
  noise.eps = noise.eps.to(x0.device());  // once: apply_noise reads it there
  Inputs inputs{apply_noise(x0, noise), noise.eps, {}, {}, {}};
  const auto text = micro_batch.at("text_emb").to(torch::kFloat32);
  const auto keep = micro_batch.tensors.find(kCaptionKeep);
  inputs.context =
      keep != micro_batch.tensors.end()
          ? drop_captions(text, keep->second)
          : drop_captions(text, caption_drops(micro_batch.indices, options_.seed, context.step, options_.text_drop));
  const auto& config = model_.config();
  if (config.reference_y_channels() > 0)
    inputs.image = image_condition(
        micro_batch, config,
        reference_draws(micro_batch.indices, options_.seed, context.step, options_.ref_other_frame, x0.size(2)),
        reference_drops(micro_batch.indices, options_.seed, context.step, options_.ref_drop));
  else
    inputs.image = image_condition(micro_batch, config);
  if ((options_.control_drop > 0 || options_.start_drop > 0) && inputs.image.y.defined())
    inputs.image.y =
        drop_fun_control(inputs.image.y, model_.config().out_dim,
                         control_drops(micro_batch.indices, options_.seed, context.step, options_.control_drop),
                         start_drops(micro_batch.indices, options_.seed, context.step, options_.start_drop));
  if (inputs.image.clip_fea.defined()) {
    const auto image_keep = micro_batch.tensors.find(kImageKeep);
    inputs.image.clip_fea = image_keep != micro_batch.tensors.end()
                                ? drop_captions(inputs.image.clip_fea, image_keep->second)
                                : drop_captions(inputs.image.clip_fea, image_drops(micro_batch.indices, options_.seed,
                                                                                   context.step, options_.image_drop));
  }
  // The first frame held clean: TI2V's drawn, Wan2.2-Fun-5B-Control's where
  // the (not dropped) condition shows a start.
  std::vector<bool> kept;
  if (options_.first_frame_prob > 0)
    kept = first_frame_draws(micro_batch.indices, options_.seed, context.step, options_.first_frame_prob, x0.size(2));
  else
    kept = held_starts(inputs.image, x0.size(2));
  if (!kept.empty()) {
    auto first = keep_first_frame(inputs.noisy, with_held_start(x0, inputs.image, {}), kept, config.patch_size);
    inputs.noisy.x_t = std::move(first.x_t);
    inputs.noisy.timesteps = std::move(first.timesteps);
    inputs.first_frame_kept = std::move(first.kept);
  }
  return inputs;
}

std::vector<bool> FlowMatchingObjective::held_starts(const ModelCondition& image, int64_t latent_frames) const {
  const auto& config = model_.config();
  if (!config.holds_start_frame() || !image.y.defined() || latent_frames < 2) return {};
  return start_given(image.y, config.out_dim);
}

at::Tensor FlowMatchingObjective::with_held_start(const at::Tensor& x0, const ModelCondition& image,
                                                  const at::Tensor& kept) const {
  const auto& config = model_.config();
  if (!config.holds_start_frame() || !image.y.defined()) return x0;
  const auto start = start_latents(image.y, config.out_dim).to(x0.device(), x0.scalar_type());
  auto out = x0.clone();
  // Without `kept`, every row's (keep_first_frame reads the kept rows' alone).
  out.slice(2, 0, 1).copy_(kept.defined() ? torch::where(kept.view({x0.size(0), 1, 1, 1, 1}), start, x0.slice(2, 0, 1))
                                          : start);
  return out;
}

train::ObjectiveLoss FlowMatchingObjective::loss(const train::Batch& micro_batch, const train::StepContext& context) {
  const auto start = std::chrono::steady_clock::now();
  const auto in = prepare(micro_batch, context);
  train::ObjectiveLoss out;
  out.prepare_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.loss = loss_of(model_.forward(in.noisy.x_t, in.noisy.timesteps, in.context, in.image), in.noisy.target, in);
  return out;
}

at::Tensor FlowMatchingObjective::loss_of(const at::Tensor& prediction, const at::Tensor& target, const Inputs& in) {
  return in.first_frame_kept.defined() ? first_frame_loss(prediction, target, in.first_frame_kept)
                                       : flow_matching_loss(prediction, target);
}

void FlowMatchingObjective::make_inputs_ahead(train::Batch& batch, int64_t step,
                                              const train::HostAllocator& allocate) const {
  const auto latents = training_latents(batch);
  const auto sizes = latents.sizes();
  Noise noise = training_noise(sizes, batch.indices, options_.seed, step, options_.flow,
                               {allocate({sizes[0]}, torch::kFloat32), allocate(sizes, torch::kFloat32)});
  batch.tensors[kNoiseSigma] = std::move(noise.sigmas);
  batch.tensors[kNoiseEps] = std::move(noise.eps);
  if (options_.text_drop > 0) {  // the drops as a mask that travels with the batch
    const auto drops = caption_drops(batch.indices, options_.seed, step, options_.text_drop);
    auto keep = allocate({sizes[0]}, torch::kBool);  // [B]
    for (size_t i = 0; i < drops.size(); ++i) keep.data_ptr<bool>()[i] = !drops[i];
    batch.tensors[kCaptionKeep] = std::move(keep);
  }
  if (options_.image_drop > 0 && batch.tensors.count("clip_fea")) {
    const auto drops = image_drops(batch.indices, options_.seed, step, options_.image_drop);
    auto keep = allocate({sizes[0]}, torch::kBool);  // [B]
    for (size_t i = 0; i < drops.size(); ++i) keep.data_ptr<bool>()[i] = !drops[i];
    batch.tensors[kImageKeep] = std::move(keep);
  }
  batch.ahead_step = step;
}

at::Tensor FlowMatchingObjective::validation_losses(const train::Batch& batch) {
  const bool was_training = model_.is_training();
  model_.eval();
  const auto x0 = training_latents(batch).to(torch::kFloat32);
  const auto context = batch.at("text_emb").to(torch::kFloat32);
  const auto image = image_condition(batch, model_.config());  // with a reference frame: the start
  const int64_t b = batch.size();
  auto sum = torch::zeros({b}, torch::kFloat64);
  for (int j = 0; j < kValidationGrid; ++j) {
    const double sigma = training_sigma((j + 0.5) / kValidationGrid, options_.flow);
    std::vector<uint64_t> keys(b);
    for (int64_t i = 0; i < b; ++i) keys[i] = sample_key(kValidationSeed, j, batch.indices[i]);
    const auto noisy = noisy_batch_at(x0, std::vector<double>(b, sigma), keys);
    // TI2V: every sample keeps its first frame; Wan2.2-Fun-5B-Control: those whose condition shows a start.
    const auto kept =
        options_.first_frame_prob > 0 ? std::vector<bool>(b, x0.size(2) > 1) : held_starts(image, x0.size(2));
    if (!kept.empty()) {
      const auto first = keep_first_frame(noisy, with_held_start(x0, image, {}), kept, model_.config().patch_size);
      const auto prediction = model_.forward(first.x_t, first.timesteps, context, image);
      sum += first_frame_losses(prediction, noisy.target, first.kept).to(torch::kCPU, torch::kFloat64);
      continue;
    }
    const auto prediction = model_.forward(noisy.x_t, noisy.timesteps, context, image);
    sum += per_sample_loss(prediction, noisy.target).to(torch::kCPU, torch::kFloat64);
  }
  if (was_training) model_.train();
  return sum / kValidationGrid;
}

}  // namespace wt::wan

namespace wt::wan {

std::map<std::string, std::string> FlowMatchingObjective::checkpoint_state() const {
  std::map<std::string, std::string> state;
  if (!options_.lora.empty())
    state = {{"lora", options_.lora},
             {"lora_base", options_.lora_base},
             {"lora_base_precision", options_.lora_base_precision}};
  if (!options_.vace_base.empty()) state["vace_base"] = options_.vace_base;
  if (!options_.flow.full_range()) state["sigma_range"] = sigma_range(options_.flow);
  if (options_.first_frame_prob > 0) state["first_frame_prob"] = fmt::format("{:g}", options_.first_frame_prob);
  return state;
}

void FlowMatchingObjective::check_resume(const std::string& kind, const std::map<std::string, std::string>& state,
                                         const std::string& path) const {
  // Only adapters are in a LoRA checkpoint: the same adapters, on the same base.
  auto saved = [&](const char* key) {
    const auto it = state.find(key);
    return it == state.end() ? std::string() : it->second;
  };
  const std::string range = options_.flow.full_range() ? "" : sigma_range(options_.flow);
  if (kind == this->kind() && saved("sigma_range") != range)
    throw UsageError(
        fmt::format("checkpoint {}: trained on sigma in {}, this run on {} ({}); resume with the same range", path,
                    saved("sigma_range").empty() ? "[0, 1]" : saved("sigma_range"), range.empty() ? "[0, 1]" : range,
                    setting_reference("timestep_range")));
  const std::string first_frame =
      options_.first_frame_prob > 0 ? fmt::format("{:g}", options_.first_frame_prob) : std::string();
  if (kind == this->kind() && saved("first_frame_prob") != first_frame)
    throw UsageError(fmt::format(
        "checkpoint {}: trained {}, this run {}; resume with the same {}", path,
        saved("first_frame_prob").empty() ? "without the first-frame condition"
                                          : "keeping the first frame with probability " + saved("first_frame_prob"),
        first_frame.empty() ? "without it" : "with probability " + first_frame, setting_reference("condition")));
  if (kind == this->kind() && saved("lora") != options_.lora)
    throw UsageError(fmt::format("checkpoint {}: written {}, this run {}; resume with the same LoRA options", path,
                                 saved("lora").empty() ? "by a full training run" : "with " + saved("lora"),
                                 !options_.lora.empty()       ? "has " + options_.lora
                                 : options_.vace_base.empty() ? "trains the whole model"
                                                              : "trains the VACE branch alone"));
  // A VACE branch trained alone: the branch only is in the checkpoint.
  if (kind == this->kind() && saved("vace_base").empty() != options_.vace_base.empty())
    throw UsageError(fmt::format(
        "checkpoint {}: {}, this run {}; resume with the same {}", path,
        saved("vace_base").empty() ? "its run trained the whole model" : "its run trained the VACE branch alone",
        options_.vace_base.empty() ? "the whole model" : "the VACE branch alone", setting_reference("trainable")));
  if (kind == this->kind() && saved("vace_base") != options_.vace_base)
    throw UsageError(
        fmt::format("checkpoint {}: its VACE branch was trained on base weights {}, this run's base is "
                    "{}; resume with the same {}",
                    path, saved("vace_base"), options_.vace_base, setting_reference("init")));
  // Before the checksum: an fp32 base file held in bf16 is other weights,
  // and this says why.
  // (LoRA checkpoints from before the option held their base in fp32.)
  const std::string held =
      saved("lora").empty() || !saved("lora_base_precision").empty() ? saved("lora_base_precision") : "fp32";
  if (kind == this->kind() && held != options_.lora_base_precision)
    throw UsageError(
        fmt::format("checkpoint {}: its LoRA adapters were trained on a base held in {}, this run "
                    "holds it in {}; resume with the same {}",
                    path, held, options_.lora_base_precision, setting_reference("base_precision")));
  if (kind == this->kind() && saved("lora_base") != options_.lora_base)
    throw UsageError(
        fmt::format("checkpoint {}: its LoRA adapters were trained on base weights {}, this run's base is "
                    "{}; resume with the same {}",
                    path, saved("lora_base"), options_.lora_base, setting_reference("init")));
  if (kind == "distillation") {
    const auto teacher = state.find("teacher");
    throw UsageError(fmt::format(
        "checkpoint {}: written by a distillation run (teacher {}); resume it as distillation from that teacher, or "
        "start from its weights with {}",
        path, teacher == state.end() ? std::string("unknown") : teacher->second, setting_reference("init")));
  }
  train::Objective::check_resume(kind, state, path);
}

}  // namespace wt::wan
