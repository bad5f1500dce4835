#include "wantrain/wan/objective/teacher.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <filesystem>
#include <map>

#include "wantrain/ckpt/checkpoint.hpp"
#include "wantrain/wan/model/checkpoint_weights.hpp"
#include "wantrain/nn/autocast.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/model/weight_names.hpp"
#include "wantrain/wan/model/weights.hpp"
#include "wantrain/util/error.hpp"

namespace wt::wan {
WanConfig resolve_teacher_config(const std::string& teacher_path, const std::string& config_path) {
  if (!std::filesystem::exists(teacher_path))
    throw SettingError("teacher", fmt::format("{} does not exist", teacher_path));
  if (!ckpt::is_checkpoint_file(teacher_path)) {
    if (config_path.empty())
      throw SettingError("teacher_config", fmt::format("the teacher {} is not a wantrain checkpoint (safetensors "
                                                       "or an index of them), so its model config must be given "
                                                       "(e.g. data/configs/wan2.1-t2v-1.3b.json)",
                                                       teacher_path));
    return load_model_config(config_path);
  }
  try {
    const auto stored = ckpt::read_model_config(teacher_path);
    const auto config = parse_model_config(stored, fmt::format("checkpoint {}: attribute model_config", teacher_path));
    if (!config_path.empty())
      ckpt::check_model_config(stored, teacher_path, to_json(load_model_config(config_path)),
                               setting_reference("teacher_config") + " " + config_path);
    return config;
  } catch (const UsageError& e) {
    throw SettingError("teacher", e.what());
  }
}

Teacher::Teacher(const std::string& path, const WanConfig& config, const std::string& config_source,
                 at::ScalarType linear_dtype)
    : path_(path), config_(config), bf16_(linear_dtype == at::kBFloat16) {
  // Allocated in its final precision and not drawn: every tensor is loaded next.
  model_ = std::make_shared<WanModelImpl>(config, linear_dtype, WanInit::Empty);
  if (bf16_) {
    torch::NoGradGuard no_grad;
    for (auto& [name, parameter] : weights())  // the text embedding's Linears: torch::nn::Linear, built in fp32
      if (held_in_bf16_by_teacher(name) && parameter.scalar_type() != at::kBFloat16)
        parameter.set_data(torch::empty(parameter.sizes(), torch::kBFloat16));
  }
  // The checksum of the values as read (fp32 bytes), whatever they are held in.
  WeightsChecksum checksum(config);
  try {
    if (ckpt::is_checkpoint_file(path)) {
      auto saved = checkpoint_weights(path, /*prefer_ema=*/true);
      file_ = std::move(saved.source);
      source_ = fmt::format("{} weights of checkpoint step {}", saved.ema ? "EMA" : "model", saved.step);
    } else {
      file_ = open_weights(path);
      source_ = fmt::format("safetensors, {} names", file_.diffusers_names ? "diffusers" : "official");
    }
    load_weights(*model_, file_, LoadMode::Strict,
                 [&](const std::string& name, const at::Tensor& t) { checksum.add(name, t); });
  } catch (const std::exception& e) {  // a bad file is bad input, whatever layer noticed it
    throw SettingError("teacher", fmt::format("{} (the teacher's config {}: dim {}, {} layers)", e.what(),
                                              config_source, config.dim, config.num_layers));
  }
  checksum_ = checksum.value();
  for (auto& parameter : model_->parameters()) parameter.set_requires_grad(false);
  model_->eval();
}

Teacher::Sharing Teacher::share_frozen_weights(const WanModelImpl& base) {
  torch::NoGradGuard no_grad;
  Sharing sharing;
  const auto frozen = base.named_parameters(/*recurse=*/true);
  for (auto& item : model_->named_parameters(/*recurse=*/true)) {
    ++sharing.of;
    const auto* held = frozen.find(item.key());
    if (!held || held->requires_grad()) continue;  // a trained parameter changes: never shared
    auto& mine = item.value();
    if (held->sizes() != mine.sizes() || held->scalar_type() != mine.scalar_type()) continue;
    if (!torch::equal(mine.to(held->device()), *held)) continue;  // e.g. a base from --init
    sharing.bytes += double(mine.numel()) * double(mine.element_size());
    mine.set_data(*held);
    ++sharing.tensors;
  }
  return sharing;
}

Teacher::Sharing Teacher::lend_frozen_weights(WanModelImpl& model) const {
  torch::NoGradGuard no_grad;
  Sharing sharing;
  const auto mine = model_->named_parameters(/*recurse=*/true);
  for (auto& item : model.named_parameters(/*recurse=*/true)) {
    ++sharing.of;
    auto& frozen = item.value();
    const auto* held = mine.find(item.key());
    if (!held || frozen.requires_grad()) continue;  // an adapter: trained, its own
    if (held->sizes() != frozen.sizes() || held->scalar_type() != frozen.scalar_type()) continue;
    if (!torch::equal(frozen.to(held->device()), *held)) continue;
    sharing.bytes += double(frozen.numel()) * double(frozen.element_size());
    frozen.set_data(*held);
    ++sharing.tensors;
  }
  return sharing;
}

void Teacher::to(at::Device device) { model_->to(device); }

void Teacher::set_attention_chunk(int64_t queries) { model_->set_attention_chunk(queries); }

Teacher::~Teacher() = default;

io::NamedTensors Teacher::weights() const {
  io::NamedTensors named;
  for (const auto& item : model_->named_parameters(/*recurse=*/true)) named.emplace_back(item.key(), item.value());
  return named;
}

at::Tensor Teacher::predict(const at::Tensor& x_t, const at::Tensor& timesteps, const at::Tensor& context,
                            at::ScalarType compute_dtype, const ModelCondition& image) const {
  torch::NoGradGuard no_grad;
  nn::AutocastScope autocast(bf16_ || compute_dtype == at::kHalf ? at::kBFloat16 : compute_dtype, x_t.device().type());
  const int64_t pt = config_.patch_size[0];
  if (!stills_ || pt == 1) return model_->forward(x_t, timesteps, context, image).to(torch::kFloat32);
  if (image.y.defined()) throw UsageError("an image student of a video teacher cannot take an image condition");
  // [B, C, F, H, W] -> each frame repeated pt times -> prediction [B, C, F*pt, H, W] -> frame means.
  const auto prediction = model_->forward(x_t.repeat_interleave(pt, 2), timesteps, context);
  return prediction.to(torch::kFloat32).unflatten(2, {x_t.size(2), pt}).mean(3);
}

TensorSource Teacher::unrounded_weights() const { return bf16_ ? file_ : tensors_source(weights(), path_); }

}  // namespace wt::wan
