#include "wantrain/wan/objective/few_step_objective.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <chrono>

#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/objective/caption_dropout.hpp"
#include "wantrain/wan/objective/flow_matching.hpp"
#include "wantrain/wan/objective/teacher.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/seconds.hpp"

namespace wt::wan {
namespace {

// Validation noise and points: independent of --seed, as flow matching's.
constexpr uint64_t kValidationSeed = 0x66657773746570;  // "fewstep"
constexpr int kValidationPoints = 4;

std::string sigma_list(const std::vector<double>& sigmas) {
  std::string text;
  for (const double sigma : sigmas) text += (text.empty() ? "" : ",") + fmt::format("{:.6g}", sigma);
  return text;
}

}  // namespace

FewStepObjective::FewStepObjective(WanModelImpl& student, const Teacher& teacher, FlowMatchingObjectiveOptions options,
                                   FewStepOptions few_step, at::ScalarType compute_dtype)
    : FlowMatchingObjective(student, options),
      teacher_(teacher),
      few_step_(few_step),
      schedule_(few_step_schedule(few_step.steps, few_step.teacher_steps, options.flow.shift)),
      compute_dtype_(compute_dtype) {}

at::Tensor FewStepObjective::row_losses(const at::Tensor& x0, const at::Tensor& eps, const ConsistencySigmas& sigmas,
                                        const Inputs& in, const at::Tensor& kept, double* teacher_seconds) {
  const int64_t b = x0.size(0);
  auto x_t = noised_at(x0, eps, sigmas.t);
  // The first-frame condition (Wan2.2 TI2V): a kept row's frame 0 is the
  // clean picture on every point of the ODE, its tokens at timestep 0, so
  // every model sees it and no step moves it (its velocity is zeroed), and
  // the loss leaves it out, as flow matching's first-frame loss does.
  at::Tensor moving;  // [B, 1, F, 1, 1]: 0 on a kept row's frame 0, else 1
  if (kept.defined()) {
    const auto row = kept.view({b, 1, 1, 1, 1});
    x_t = x_t.clone();
    x_t.slice(2, 0, 1).copy_(torch::where(row, x0.slice(2, 0, 1), x_t.slice(2, 0, 1)));
    moving = torch::ones({b, 1, x0.size(2), 1, 1}, x0.options());
    moving.slice(2, 0, 1).masked_fill_(row, 0.0);
  }
  const auto timesteps = [&](const at::Tensor& sigma) {
    const auto t = sigma * 1000.0;
    if (!kept.defined()) return t;
    const auto with_first = first_frame_timesteps(t, x0.sizes(), model_.config().patch_size);  // [B, L]
    return torch::where(kept.view({b, 1}), with_first, t.view({b, 1}).expand_as(with_first));
  };
  const auto held = [&](at::Tensor v) { return moving.defined() ? v * moving : v; };
  const auto uncond = unconditional_context(in.context);  // what caption dropout trains
  const SigmaVelocity guided_teacher = [&](const at::Tensor& x, const at::Tensor& sigma) {
    const auto start = std::chrono::steady_clock::now();
    const auto t = timesteps(sigma);
    auto v = teacher_.predict(x, t, in.context, compute_dtype_, in.image);
    if (few_step_.guidance != 1.0) {
      const auto v_uncond = teacher_.predict(x, t, uncond, compute_dtype_, in.image);
      v = v_uncond + few_step_.guidance * (v - v_uncond);
    }
    if (teacher_seconds) *teacher_seconds += seconds_since(start);
    return held(v);
  };
  // The target network: the student without gradient, in eval mode (no
  // LoRA dropout: θ⁻ is the student's map itself).
  const SigmaVelocity target = [&](const at::Tensor& x, const at::Tensor& sigma) {
    torch::NoGradGuard no_grad;
    const bool was_training = model_.is_training();
    model_.eval();
    auto v = model_.forward(x, timesteps(sigma), in.context, in.image).to(torch::kFloat32);
    if (was_training) model_.train();
    return held(v);
  };
  const auto wanted = consistency_target(x_t, sigmas, guided_teacher, target);
  const auto prediction = model_.forward(x_t, timesteps(sigmas.t), in.context, in.image);
  return kept.defined() ? first_frame_losses(prediction, wanted, kept) : per_sample_loss(prediction, wanted);
}

train::ObjectiveLoss FewStepObjective::loss(const train::Batch& micro_batch, const train::StepContext& context) {
  auto phase = std::chrono::steady_clock::now();
  const auto in = prepare(micro_batch, context);
  const auto x0 = micro_batch.at("latents").to(torch::kFloat32);
  const auto sigmas = consistency_sigmas(
      schedule_, consistency_points(micro_batch.indices, options_.seed, context.step, schedule_), x0.device());
  train::ObjectiveLoss out;
  out.prepare_seconds = seconds_since(phase);
  out.loss = row_losses(x0, in.eps, sigmas, in, in.first_frame_kept, &out.teacher_seconds).mean();
  return out;
}

at::Tensor FewStepObjective::validation_losses(const train::Batch& batch) {
  const bool was_training = model_.is_training();
  model_.eval();
  const auto x0 = batch.at("latents").to(torch::kFloat32);
  Inputs in;
  in.context = batch.at("text_emb").to(torch::kFloat32);
  in.image = image_condition(batch);
  const int64_t b = batch.size();
  // With the first-frame condition every sample keeps its first frame, as
  // flow matching's validation does.
  at::Tensor kept;
  if (options_.first_frame_prob > 0 && x0.size(2) > 1)
    kept = torch::ones({b}, torch::dtype(torch::kBool).device(x0.device()));
  auto sum = torch::zeros({b}, torch::kFloat64);
  for (int j = 0; j < kValidationPoints; ++j) {
    const int n = (2 * j + 1) * schedule_.teacher_steps / (2 * kValidationPoints);
    std::vector<uint64_t> keys(size_t(b), 0);
    for (int64_t i = 0; i < b; ++i) keys[size_t(i)] = sample_key(kValidationSeed, j, batch.indices[size_t(i)]);
    const auto eps = noise_at(x0.sizes(), std::vector<double>(size_t(b), 0.0), keys).eps.to(x0.device());
    const auto sigmas = consistency_sigmas(schedule_, std::vector<int>(size_t(b), n), x0.device());
    sum += row_losses(x0, eps, sigmas, in, kept, nullptr).to(torch::kCPU, torch::kFloat64);
  }
  if (was_training) model_.train();
  return sum / kValidationPoints;
}

std::map<std::string, std::string> FewStepObjective::checkpoint_state() const {
  auto state = FlowMatchingObjective::checkpoint_state();
  state["teacher"] = teacher_.path();
  state["teacher_checksum"] = teacher_.checksum();
  state["sampler_solver"] = "euler";
  state["sampler_steps"] = std::to_string(schedule_.steps);
  state["sampler_shift"] = fmt::format("{:g}", schedule_.shift);
  state["sampler_sigmas"] = sigma_list(schedule_.student_sigmas());
  state["teacher_steps"] = std::to_string(schedule_.teacher_steps);
  state["guidance"] = fmt::format("{:g}", few_step_.guidance);
  return state;
}

void FewStepObjective::check_resume(const std::string& kind, const std::map<std::string, std::string>& state,
                                    const std::string& path) const {
  const auto saved = [&](const char* name) {
    const auto it = state.find(name);
    return it == state.end() ? std::string("unknown") : it->second;
  };
  if (kind != this->kind())
    throw UsageError(fmt::format(
        "checkpoint {}: written by a {} run, not by few-step distillation; start from its weights with {} instead "
        "of resuming it",
        path, kind, setting_reference("init")));
  if (saved("teacher_checksum") != teacher_.checksum())
    throw UsageError(fmt::format(
        "checkpoint {}: distilled from the teacher {} ({}), but {} {} has other weights ({}); resume with the same "
        "teacher",
        path, saved("teacher"), saved("teacher_checksum"), setting_reference("teacher"), teacher_.path(),
        teacher_.checksum()));
  const auto mine = checkpoint_state();
  for (const auto& [key, setting] : {std::pair{"sampler_steps", "distill_steps"},
                                     {"teacher_steps", "distill_teacher_steps"},
                                     {"guidance", "distill_guidance"},
                                     {"sampler_shift", "shift"}})
    if (saved(key) != mine.at(key))
      throw UsageError(fmt::format("checkpoint {}: trained with {} {}, this run with {}; resume with the same", path,
                                   setting_reference(setting), saved(key), mine.at(key)));
  auto same_teacher = state;  // the same weights may come from another path
  same_teacher["teacher"] = teacher_.path();
  FlowMatchingObjective::check_resume(kind, same_teacher, path);
}

}  // namespace wt::wan
