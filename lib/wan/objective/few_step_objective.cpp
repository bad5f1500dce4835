#include "wantrain/wan/objective/few_step_objective.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <chrono>
#include <stdexcept>

#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/model/unconditional_context.hpp"
#include "wantrain/wan/objective/distribution_matching.hpp"
#include "wantrain/wan/model/flow_matching.hpp"
#include "wantrain/wan/objective/teacher.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/wan/model/flow_solver.hpp"
#include "wantrain/util/seconds.hpp"

namespace wt::wan {
namespace {

// Validation noise and points: independent of --seed, as flow matching's.
constexpr uint64_t kFewStepValidationSeed = 0x66657773746570;  // "fewstep"
constexpr int kValidationPoints = 4;

std::string sigma_list(const std::vector<double>& sigmas) {
  std::string text;
  for (const double sigma : sigmas) text += (text.empty() ? "" : ",") + fmt::format("{:.6g}", sigma);
  return text;
}

}  // namespace

const char* few_step_method_name(FewStepMethod method) {
  return method == FewStepMethod::DistributionMatching ? "dmd" : "consistency";
}

FewStepObjective::FewStepObjective(WanModelImpl& student, const Teacher& teacher, FlowMatchingObjectiveOptions options,
                                   FewStepOptions few_step, at::ScalarType compute_dtype, WanModelImpl* fake_score)
    : FlowMatchingObjective(student, options),
      teacher_(teacher),
      few_step_(few_step),
      schedule_(few_step_schedule(few_step.steps, few_step.teacher_steps, options.flow.shift)),
      compute_dtype_(compute_dtype),
      fake_score_(fake_score),
      groups_(FlowMatchingObjective::groups()) {
  if ((few_step.method == FewStepMethod::DistributionMatching) != (fake_score != nullptr))
    throw std::invalid_argument(fmt::format("few-step {} distillation {} a fake score model",
                                            few_step_method_name(few_step.method), fake_score ? "takes no" : "needs"));
  if (!fake_score_) return;
  // DMD2 clips the fake score on its own, at the generator's bound, and
  // keeps no average of it: it is training state, not a model anyone samples.
  train::ParameterGroup fake;
  fake.name = "fake_score";
  fake.checkpoint_prefix = "fake_score.";  // the names its checkpoints always had
  fake.ema = false;
  fake.weights = false;
  for (const auto& item : fake_score_->named_parameters(/*recurse=*/true))
    if (item.value().requires_grad()) fake.parameters.emplace_back(item.key(), item.value());
  fake.unit_of = [config = fake_score_->config()](const std::string& name) { return zero_unit(config, name); };
  groups_.push_back(std::move(fake));
}

at::Tensor FewStepObjective::with_first_frame(const at::Tensor& x, const at::Tensor& x0, const at::Tensor& kept) {
  if (!kept.defined()) return x;
  auto out = x.clone();
  out.slice(2, 0, 1).copy_(torch::where(kept.view({x.size(0), 1, 1, 1, 1}), x0.slice(2, 0, 1), x.slice(2, 0, 1)));
  return out;
}

FewStepObjective::Models FewStepObjective::models(const Inputs& in, const at::Tensor& x0, const at::Tensor& kept,
                                                  double* teacher_seconds) {
  const int64_t b = x0.size(0);
  Models m;
  if (kept.defined()) {
    m.moving = torch::ones({b, 1, x0.size(2), 1, 1}, x0.options());
    m.moving.slice(2, 0, 1).masked_fill_(kept.view({b, 1, 1, 1, 1}), 0.0);
  }
  const auto timesteps = [this, kept, sizes = x0.sizes().vec(), b](const at::Tensor& sigma) {
    const auto t = sigma * 1000.0;
    if (!kept.defined()) return t;
    const auto with_first = first_frame_timesteps(t, sizes, model_.config().patch_size);  // [B, L]
    return torch::where(kept.view({b, 1}), with_first, t.view({b, 1}).expand_as(with_first));
  };
  const auto held = [moving = m.moving](at::Tensor v) { return moving.defined() ? v * moving : v; };
  const auto uncond = unconditional_context(in.context);  // what caption dropout trains
  m.guided_teacher = [=, &in](const at::Tensor& x, const at::Tensor& sigma) {
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
  // A model's map without gradient and in eval mode (no LoRA dropout): the
  // target network θ⁻ is the student's map itself.
  const auto without_gradient = [=, &in](WanModelImpl& model) {
    return [=, &in, &model](const at::Tensor& x, const at::Tensor& sigma) {
      torch::NoGradGuard no_grad;
      const bool was_training = model.is_training();
      model.eval();
      auto v = model.forward(x, timesteps(sigma), in.context, in.image).to(torch::kFloat32);
      if (was_training) model.train();
      return held(v);
    };
  };
  const auto with_gradient = [=, &in](WanModelImpl& model) {
    return [=, &in, &model](const at::Tensor& x, const at::Tensor& sigma) {
      return held(model.forward(x, timesteps(sigma), in.context, in.image).to(torch::kFloat32));
    };
  };
  m.target = without_gradient(model_);
  m.student = with_gradient(model_);
  if (fake_score_) {
    m.fake_score = with_gradient(*fake_score_);
    m.fake_score_without_gradient = without_gradient(*fake_score_);
  }
  return m;
}

at::Tensor FewStepObjective::consistency_losses(const at::Tensor& x0, const at::Tensor& eps,
                                                const ConsistencySigmas& sigmas, const Inputs& in,
                                                const at::Tensor& kept, double* teacher_seconds) {
  // A kept first frame (Wan2.2 TI2V) is the clean picture on every point of
  // the ODE and out of the loss, as in flow matching's first-frame loss.
  const auto x_t = with_first_frame(noised_at(x0, eps, sigmas.t), x0, kept);
  const auto m = models(in, x0, kept, teacher_seconds);
  const auto wanted = consistency_target(x_t, sigmas, m.guided_teacher, m.target);
  const auto prediction = m.student(x_t, sigmas.t);
  return kept.defined() ? first_frame_losses(prediction, wanted, kept) : per_sample_loss(prediction, wanted);
}

at::Tensor FewStepObjective::matching_losses(const at::Tensor& x0, const Inputs& in,
                                             const std::vector<int64_t>& indices, int64_t step,
                                             double* teacher_seconds) {
  const auto& kept = in.first_frame_kept;
  const auto m = models(in, x0, kept, teacher_seconds);
  const auto draws = matching_draws(indices, options_.seed, step, schedule_.steps, schedule_.shift);
  const auto sigmas = [&](const std::vector<double>& values) {
    return torch::tensor(std::vector<float>(values.begin(), values.end()), torch::kFloat32).to(x0.device());
  };
  const auto noise = [&](const std::vector<uint64_t>& keys) {
    return noise_at(x0.sizes(), std::vector<double>(keys.size(), 0.0), keys).eps.to(x0.device());
  };
  // The student's sample from the step's noise, its first frame kept clean.
  const auto generated =
      generator_sample(with_first_frame(in.eps, x0, kept), draws.generator_steps, schedule_.student_sigmas(), m.target,
                       m.student, few_step_.same_calls_on_every_rank);
  const auto sample = generated.detach();
  const auto t = sigmas(draws.matching_sigmas);
  const auto noised = with_first_frame(noised_at(sample, noise(draws.matching_noise_keys), t), x0, kept);
  const auto direction =
      matching_direction(sample, noised, t, m.guided_teacher, m.fake_score_without_gradient, m.moving);
  // The fake score learns the student's samples by flow matching.
  const auto t_f = sigmas(draws.fake_sigmas);
  const auto eps_f = noise(draws.fake_noise_keys);
  const auto fake_prediction = m.fake_score(with_first_frame(noised_at(sample, eps_f, t_f), x0, kept), t_f);
  const auto fake_losses = kept.defined() ? first_frame_losses(fake_prediction, eps_f - sample, kept)
                                          : per_sample_loss(fake_prediction, eps_f - sample);
  auto losses = generator_losses(generated, direction) + fake_losses;
  if (few_step_.regression_weight > 0) {
    // The teacher's own sample from the student's noise: DMD's paired target.
    const auto teacher_video =
        teacher_sample(with_first_frame(in.eps, x0, kept), sampling_sigmas(few_step_.regression_steps, schedule_.shift),
                       m.guided_teacher);
    losses = losses + few_step_.regression_weight * (kept.defined() ? first_frame_losses(generated, teacher_video, kept)
                                                                    : per_sample_loss(generated, teacher_video));
  }
  return losses;
}

train::ObjectiveLoss FewStepObjective::loss(const train::Batch& micro_batch, const train::StepContext& context) {
  auto phase = std::chrono::steady_clock::now();
  const auto in = prepare(micro_batch, context);
  const auto x0 = with_held_start(micro_batch.at("latents").to(torch::kFloat32), in.image, in.first_frame_kept);
  train::ObjectiveLoss out;
  if (few_step_.method == FewStepMethod::DistributionMatching) {
    out.prepare_seconds = seconds_since(phase);
    out.loss = matching_losses(x0, in, micro_batch.indices, context.step, &out.teacher_seconds).mean();
    return out;
  }
  const auto sigmas = consistency_sigmas(
      schedule_, consistency_points(micro_batch.indices, options_.seed, context.step, schedule_), x0.device());
  out.prepare_seconds = seconds_since(phase);
  out.loss = consistency_losses(x0, in.eps, sigmas, in, in.first_frame_kept, &out.teacher_seconds).mean();
  return out;
}

at::Tensor FewStepObjective::validation_losses(const train::Batch& batch) {
  const bool was_training = model_.is_training();
  model_.eval();
  auto x0 = batch.at("latents").to(torch::kFloat32);
  Inputs in;
  in.context = batch.at("text_emb").to(torch::kFloat32);
  in.image = image_condition(batch, model_.config());
  const int64_t b = batch.size();
  // With the first-frame condition every sample keeps its first frame, as
  // flow matching's validation does.
  at::Tensor kept;
  if (options_.first_frame_prob > 0 && x0.size(2) > 1)
    kept = torch::ones({b}, torch::dtype(torch::kBool).device(x0.device()));
  if (const auto starts = held_starts(in.image, x0.size(2)); !starts.empty()) {  // Wan2.2-Fun-5B-Control
    std::vector<uint8_t> flags(starts.begin(), starts.end());
    kept = torch::tensor(flags).to(x0.device(), torch::kBool);
    x0 = with_held_start(x0, in.image, kept);
  }
  auto sum = torch::zeros({b}, torch::kFloat64);
  for (int j = 0; j < kValidationPoints; ++j) {
    const int n = (2 * j + 1) * schedule_.teacher_steps / (2 * kValidationPoints);
    std::vector<uint64_t> keys(size_t(b), 0);
    for (int64_t i = 0; i < b; ++i) keys[size_t(i)] = sample_key(kFewStepValidationSeed, j, batch.indices[size_t(i)]);
    const auto eps = noise_at(x0.sizes(), std::vector<double>(size_t(b), 0.0), keys).eps.to(x0.device());
    const auto sigmas = consistency_sigmas(schedule_, std::vector<int>(size_t(b), n), x0.device());
    sum += consistency_losses(x0, eps, sigmas, in, kept, nullptr).to(torch::kCPU, torch::kFloat64);
  }
  if (was_training) model_.train();
  return sum / kValidationPoints;
}

std::map<std::string, std::string> FewStepObjective::checkpoint_state() const {
  auto state = FlowMatchingObjective::checkpoint_state();
  state["teacher"] = teacher_.path();
  state["teacher_checksum"] = teacher_.checksum();
  state["method"] = few_step_method_name(few_step_.method);
  state["sampler_solver"] = "euler";
  state["sampler_steps"] = std::to_string(schedule_.steps);
  state["sampler_shift"] = fmt::format("{:g}", schedule_.shift);
  state["sampler_sigmas"] = sigma_list(schedule_.student_sigmas());
  state["teacher_steps"] = std::to_string(schedule_.teacher_steps);
  state["guidance"] = fmt::format("{:g}", few_step_.guidance);
  if (few_step_.method == FewStepMethod::DistributionMatching) {
    state["regression_weight"] = fmt::format("{:g}", few_step_.regression_weight);
    state["regression_steps"] = std::to_string(few_step_.regression_steps);
    // Absent from checkpoints of whole fake scores before it could be LoRA.
    if (few_step_.fake_score_lora_rank > 0) {
      state["fake_score_lora_rank"] = std::to_string(few_step_.fake_score_lora_rank);
      state["fake_score_base"] = teacher_.held_in_bf16() ? "bf16" : "fp32";  // the teacher's precision, its base's
    }
  }
  return state;
}

void FewStepObjective::check_resume(const std::string& kind, const std::map<std::string, std::string>& state,
                                    const std::string& path) const {
  // A setting as recorded; a method's own settings are "none" in the other's.
  const auto recorded = [](const std::map<std::string, std::string>& fields, const std::string& name) {
    const auto it = fields.find(name);
    if (it != fields.end()) return it->second;
    // Checkpoints from before distribution matching are consistency's.
    if (name == "fake_score_lora_rank") return std::string("0 (a whole fake score)");
    if (name == "fake_score_base") return std::string("none");
    return std::string(name == "method" ? "consistency" : name.rfind("regression", 0) == 0 ? "none" : "unknown");
  };
  const auto saved = [&](const char* name) { return recorded(state, name); };
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
  for (const auto& [key, setting] : {std::pair{"method", "distill_method"},
                                     {"regression_weight", "distill_regression"},
                                     {"regression_steps", "distill_regression_steps"},
                                     {"fake_score_lora_rank", "fake_score_lora_rank"},
                                     {"fake_score_base", "teacher_precision"},
                                     {"sampler_steps", "distill_steps"},
                                     {"teacher_steps", "distill_teacher_steps"},
                                     {"guidance", "distill_guidance"},
                                     {"sampler_shift", "shift"}})
    if (saved(key) != recorded(mine, key))
      throw UsageError(fmt::format("checkpoint {}: trained with {} {}, this run with {}; resume with the same", path,
                                   setting_reference(setting), saved(key), recorded(mine, key)));
  auto same_teacher = state;  // the same weights may come from another path
  same_teacher["teacher"] = teacher_.path();
  FlowMatchingObjective::check_resume(kind, same_teacher, path);
}

}  // namespace wt::wan
