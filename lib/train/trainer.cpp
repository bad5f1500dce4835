#include "train/trainer.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>
#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <type_traits>

#include "ckpt/checkpoint.hpp"
#include "data/loader.hpp"
#include "data/shard.hpp"
#include "dist/comm.hpp"
#include "dist/reducer.hpp"
#include "model/autocast.hpp"
#include "model/safetensors.hpp"
#include "model/wan_model.hpp"
#include "model/weights.hpp"
#include "train/caption_dropout.hpp"
#include "train/distillation.hpp"
#include "train/ema.hpp"
#include "train/flow_matching.hpp"
#include "train/gradients.hpp"
#include "train/loss_scaler.hpp"
#include "train/lr_schedule.hpp"
#include "train/teacher.hpp"
#include "util/error.hpp"

namespace wt::train {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

at::ScalarType compute_dtype_of(const std::string& precision, const at::Device& device) {
  if (precision == "fp32") return at::kFloat;
  if (precision == "bf16") return at::kBFloat16;
  if (!device.is_cuda())
    throw UsageError("option --precision: fp16 needs CUDA devices (dynamic loss scaling); on CPU use bf16");
  return at::kHalf;
}

data::DistributedSampler make_sampler(const TrainConfig& cfg, const Comm& comm, const data::Dataset& dataset) {
  // One loader batch is this rank's whole step: B samples for each of the K micro-batches.
  return data::DistributedSampler(dataset.shard_sizes(),
                                  {comm.size(), comm.rank(), int64_t(cfg.batch_size) * cfg.grad_accum, cfg.seed,
                                   !cfg.no_drop_last, cfg.shard_affinity});
}


// Copies `saved` into the tensors of `into` with the same names (shapes checked by ckpt::check_fits).
void copy_named(const ckpt::NamedTensors& saved, const ckpt::NamedTensors& into) {
  std::map<std::string, at::Tensor> by_name(saved.begin(), saved.end());
  torch::NoGradGuard no_grad;
  for (const auto& [name, tensor] : into) tensor.copy_(by_name.at(name));
}

// LibTorch keys optimizer state by the parameter's TensorImpl: its address
// as a string up to 2.1, the pointer itself from 2.2 on.
using OptimizerKey = std::decay_t<decltype(std::declval<torch::optim::AdamW&>().state())>::key_type;
template <class Key>
Key key_of(c10::TensorImpl* impl) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream address;
    address << static_cast<const void*>(impl);
    return address.str();
  } else {
    return impl;
  }
}
OptimizerKey optimizer_key(const at::Tensor& parameter) { return key_of<OptimizerKey>(parameter.unsafeGetTensorImpl()); }

}  // namespace

struct Trainer::Impl {
  model::WanModel model;
  std::unique_ptr<Reducer> reducer;
  std::unique_ptr<torch::optim::AdamW> optimizer;
  std::unique_ptr<Ema> ema;
  std::unique_ptr<LossScaler> scaler;  // fp16 only
  std::unique_ptr<data::Loader> loader;
  LrSchedule schedule;
  FlowMatchingOptions flow;
  model::WanConfig model_config;
  bool communicate = true;
  ckpt::NamedTensors named;  // the parameters, by official name
  Teacher* teacher = nullptr;

  explicit Impl(model::WanConfig config) : model(std::move(config)) {}
};

Trainer::Trainer(const TrainConfig& cfg, Comm& comm, data::Dataset dataset, model::WanConfig model_config,
                 TrainerOptions options)
    : cfg_(cfg), comm_(comm), compute_dtype_(compute_dtype_of(cfg.precision, comm.device())) {
  auto sampler = make_sampler(cfg, comm, dataset);
  steps_per_epoch_ = sampler.batches_per_epoch();
  total_steps_ = cfg.steps > 0 ? cfg.steps : cfg.epochs * steps_per_epoch_;
  if (total_steps_ <= 0) throw UsageError("option --steps: give --steps N or --epochs N to train");

  torch::manual_seed(cfg.seed);  // the same initial weights for the same --seed (rank 0's are broadcast anyway)
  impl_ = std::make_unique<Impl>(model_config);
  impl_->model_config = std::move(model_config);
  impl_->communicate = options.communicate;
  auto& model = impl_->model;
  const bool init_from_checkpoint = !cfg.init.empty() && ckpt::is_checkpoint_file(cfg.init);
  if (!cfg.init.empty() && !init_from_checkpoint) model::load_weights(*model, cfg.init, model::LoadMode::Strict);
  model->to(comm.device());
  model->train();
  auto& named = impl_->named;
  for (const auto& item : model->named_parameters(/*recurse=*/true)) named.emplace_back(item.key(), item.value());
  if (options.resume) {
    ckpt::check_fits(*options.resume, options.resume_path, named, cfg.ema_decay > 0);
    copy_named(options.resume->model, named);
  } else if (init_from_checkpoint) {
    const auto init = ckpt::read_checkpoint(cfg.init);
    ckpt::check_fits(init, cfg.init, named, false);
    copy_named(init.model, named);
  }
  impl_->teacher = options.teacher;
  if (options.teacher) {
    if (options.teacher->config().patch_size[0] > 1 && impl_->model_config.patch_size[0] == 1)
      options.teacher->show_frames_as_stills(true);
    if (!options.resume) start_student(*options.teacher);
  }
  ReducerOptions reducer_options;
  reducer_options.bucket_bytes = static_cast<int64_t>(cfg.bucket_mb * (1 << 20));
  reducer_options.allow_unused = cfg.allow_unused;
  reducer_options.average = false;  // the loss is divided by the world size: the gradient's sum is the mean
  impl_->reducer = std::make_unique<Reducer>(comm, named, model->buffers(), reducer_options);

  impl_->schedule = {peak_lr(), parse_schedule(cfg.schedule.c_str()), cfg.warmup_steps, total_steps_};
  impl_->optimizer = std::make_unique<torch::optim::AdamW>(
      model->parameters(), torch::optim::AdamWOptions(impl_->schedule.at(0))
                               .betas({cfg.betas.beta1, cfg.betas.beta2})
                               .weight_decay(cfg.weight_decay)
                               .eps(1e-8));
  if (cfg.ema_decay > 0) impl_->ema = std::make_unique<Ema>(named, cfg.ema_decay);
  if (compute_dtype_ == at::kHalf) impl_->scaler = std::make_unique<LossScaler>();
  if (options.resume) restore(*options.resume, options.resume_path, sampler);
  impl_->flow = {parse_timestep_sampling(cfg.timestep_sampling), cfg.logit_mean, cfg.logit_std, cfg.shift};

  // On GPU the loader hands over the stored dtype (half the bytes to copy for
  // fp16 data) and the device converts; on CPU its thread converts, off the
  // training thread's critical path.
  data::LoaderOptions loader_options;
  loader_options.prefetch = cfg.prefetch;
  const auto& shape = dataset.shape();
  loader_options.dtype = comm.device().is_cuda() && shape.latents == shape.text ? data::scalar_type(shape.latents)
                                                                                 : at::kFloat;
  impl_->loader = std::make_unique<data::Loader>(std::move(dataset), std::move(sampler), loader_options);
}

Trainer::~Trainer() = default;

int64_t Trainer::effective_batch() const { return int64_t(cfg_.batch_size) * comm_.size() * cfg_.grad_accum; }
double Trainer::peak_lr() const { return scaled_lr(cfg_.lr, effective_batch(), cfg_.scale_lr); }
model::WanModelImpl& Trainer::model() { return *impl_->model; }
const Ema* Trainer::ema() const { return impl_->ema.get(); }

StepResult Trainer::step() {
  auto& im = *impl_;
  const auto step_start = Clock::now();
  StepResult result;
  StepTimes& t = result.times;
  const auto device = comm_.device();
  const int K = cfg_.grad_accum;
  const int64_t B = cfg_.batch_size;
  const double loss_scale = im.scaler ? im.scaler->scale() : 1.0;

  auto phase = Clock::now();
  const data::Batch batch = im.loader->next();
  t.data += seconds_since(phase);
  result.epoch = epoch_ = batch.position.epoch;

  im.reducer->zero_grad();
  auto loss_sum = torch::zeros({}, torch::dtype(torch::kFloat64).device(device));
  for (int m = 0; m < K; ++m) {
    phase = Clock::now();
    const std::vector<int64_t> indices(batch.indices.begin() + m * B, batch.indices.begin() + (m + 1) * B);
    const auto x0 = batch.latents.narrow(0, m * B, B).to(device, torch::kFloat32, /*non_blocking=*/true);
    // The same context, dropped captions included, for the student and the teacher.
    const auto context =
        drop_captions(batch.text_emb.narrow(0, m * B, B).to(device, torch::kFloat32, /*non_blocking=*/true),
                      caption_drops(indices, cfg_.seed, step_, cfg_.text_drop));
    const auto noisy = make_noisy_batch(x0, indices, cfg_.seed, step_, im.flow);
    t.data += seconds_since(phase);

    phase = Clock::now();
    const bool sync = im.communicate && m == K - 1;
    im.reducer->prepare_for_backward(sync);
    at::Tensor teacher_prediction;
    if (im.teacher) {
      teacher_prediction = im.teacher->predict(noisy.x_t, noisy.timesteps, context, compute_dtype_);
      t.teacher += seconds_since(phase);
      phase = Clock::now();
    }
    at::Tensor loss;
    {
      model::AutocastScope autocast(compute_dtype_);
      const auto prediction = im.model->forward(noisy.x_t, noisy.timesteps, context);
      loss = im.teacher ? distillation_loss(prediction, teacher_prediction, noisy.target, cfg_.distill_target_weight)
                        : flow_matching_loss(prediction, noisy.target);
    }
    t.forward += seconds_since(phase);

    phase = Clock::now();
    (loss * (loss_scale / (K * comm_.size()))).backward();
    loss_sum += loss.detach().to(torch::kFloat64);
    t.backward += seconds_since(phase);

    // Waiting for the buckets backward did not finish, and the ranks'
    // agreement on unused parameters: the communication left exposed.
    phase = Clock::now();
    im.reducer->finalize_backward();
    if (sync) t.comm += seconds_since(phase);
  }

  // The loss averaged over ranks: what is logged, and (with the gradient
  // norm, identical everywhere after the all-reduce) what decides a skip, so
  // every rank decides alike.
  auto mean_loss = loss_sum / K;
  if (im.communicate) {
    phase = Clock::now();
    comm_.all_reduce(mean_loss, {ReduceOp::Avg});
    t.comm += seconds_since(phase);
  }
  result.loss = mean_loss.item<double>();

  phase = Clock::now();
  const auto buffers = im.reducer->bucket_buffers();
  if (im.scaler) scale_gradients(buffers, 1.0 / loss_scale);
  result.grad_norm = global_norm(buffers);
  result.lr = im.schedule.at(step_);
  const bool finite = std::isfinite(result.loss) && std::isfinite(result.grad_norm);
  if (finite) {
    clip_to_norm(buffers, result.grad_norm, cfg_.clip);
    for (auto& group : im.optimizer->param_groups())
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(result.lr);
    im.optimizer->step();
    if (im.ema) im.ema->update();
  } else {
    result.skipped = true;
    ++skipped_;
    // An fp16 overflow is the loss scaler's business; anything else is news.
    if (comm_.rank() == 0 && (!im.scaler || !std::isfinite(result.loss)))
      spdlog::warn("step {}: non-finite {}; the step is skipped on every rank", step_ + 1,
                   std::isfinite(result.loss) ? "gradient norm" : "loss");
  }
  if (im.scaler) im.scaler->update(finite);
  t.optimizer = seconds_since(phase);

  result.step = ++step_;
  t.total = seconds_since(step_start);
  return result;
}

void Trainer::start_student(const Teacher& teacher) {
  auto& im = *impl_;
  const bool report = comm_.rank() == 0;
  if (!cfg_.init.empty()) {
    if (report) fmt::print("student init: the weights of --init {} (--student-init is not used)\n", cfg_.init);
    return;
  }
  if (cfg_.student_init == "random") {
    if (report) fmt::print("student init: random (--seed {})\n", cfg_.seed);
    return;
  }
  model::check_projectable(teacher.config(), "--teacher " + teacher.path(), im.model_config,
                           "--model-config " + cfg_.model_config);
  const auto projection = model::project_weights(teacher.weights(), teacher.config(), im.named, im.model_config);
  if (report)
    fmt::print("student init: projection from the teacher {}\n{}", teacher.path(), projection.describe());
}

void Trainer::restore(const ckpt::Checkpoint& saved, const std::string& path, data::DistributedSampler& sampler) {
  auto& im = *impl_;
  const auto& state = saved.state;
  // The teacher is an input of a distillation run, as the data are: resuming
  // against other weights would silently change the objective.
  if (im.teacher && saved.teacher.empty())
    throw UsageError(fmt::format("checkpoint {}: written by a training run (--mode train), not by distillation; "
                                 "start the student from it with --init instead of --resume",
                                 path));
  if (!im.teacher && !saved.teacher.empty())
    throw UsageError(fmt::format("checkpoint {}: written by a distillation run (teacher {}); resume it with --mode "
                                 "distill --teacher, or start from its weights with --init",
                                 path, saved.teacher));
  if (im.teacher && saved.teacher_checksum != im.teacher->checksum())
    throw UsageError(fmt::format("checkpoint {}: distilled from the teacher {} ({}), but --teacher {} has other "
                                 "weights ({}); resume with the same teacher",
                                 path, saved.teacher, saved.teacher_checksum, im.teacher->path(),
                                 im.teacher->checksum()));
  if (state.sampler_consumed % sampler.global_batch() != 0)
    throw UsageError(fmt::format(
        "checkpoint {}: it stopped {} samples into epoch {}, not a whole number of this run's global batches of {} "
        "({} samples past the last whole one; global batch = batch size x ranks x accumulation); resume with the "
        "same effective batch",
        path, state.sampler_consumed, state.sampler_epoch, sampler.global_batch(),
        state.sampler_consumed % sampler.global_batch()));
  // With shard affinity each rank's order depends on the world size: a
  // position mid-epoch names other samples under another world size, or
  // with affinity switched on or off.
  const auto saved_options = nlohmann::json::parse(saved.run_config, nullptr, false);
  const bool saved_affinity = saved_options.is_object() && saved_options.value("shard-affinity", "false") == "true";
  if ((saved_affinity || cfg_.shard_affinity) && state.sampler_consumed != 0 &&
      (saved.world_size != comm_.size() || saved_affinity != cfg_.shard_affinity))
    throw UsageError(fmt::format("checkpoint {}: written mid-epoch by {} ranks {} --shard-affinity, whose data order "
                                 "depends on both; resume it on {} ranks {} --shard-affinity",
                                 path, saved.world_size, saved_affinity ? "with" : "without", saved.world_size,
                                 saved_affinity ? "with" : "without"));
  sampler.restore({state.sampler_epoch, state.sampler_consumed});
  if (im.ema) copy_named(saved.ema, im.ema->averages());
  // AdamW's state, created as its first step would, keyed as it looks it up.
  std::map<std::string, const ckpt::OptimizerSlot*> slots;
  for (const auto& slot : saved.optim) slots.emplace(slot.name, &slot);
  auto& optimizer_state = im.optimizer->state();
  for (const auto& [name, parameter] : im.named) {
    const auto it = slots.find(name);
    if (it == slots.end()) continue;  // no step taken yet
    auto param_state = std::make_unique<torch::optim::AdamWParamState>();
    param_state->step(it->second->step);
    param_state->exp_avg(it->second->exp_avg.to(parameter.device()).clone());
    param_state->exp_avg_sq(it->second->exp_avg_sq.to(parameter.device()).clone());
    optimizer_state[optimizer_key(parameter)] = std::move(param_state);
  }
  if (im.scaler && std::isfinite(state.loss_scale)) im.scaler->restore(state.loss_scale, state.loss_scale_good_steps);
  if (saved.rng_cpu.defined() && saved.rng_cpu.numel() > 0) {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(saved.rng_cpu);
  }
  step_ = state.step;
  epoch_ = state.epoch;
  skipped_ = state.skipped;
}

ckpt::Checkpoint Trainer::snapshot(const std::string& run_config, double val_loss) const {
  ckpt::Checkpoint c;
  snapshot_into(c, run_config, val_loss);
  return c;
}

void Trainer::snapshot_into(ckpt::Checkpoint& c, const std::string& run_config, double val_loss) const {
  auto& im = *impl_;
  // Copies `t` into the i-th entry of `list`, reusing its buffer when it fits.
  auto put = [](at::Tensor& slot, const at::Tensor& t) {
    if (slot.defined() && slot.sizes() == t.sizes() && slot.scalar_type() == at::kFloat && slot.is_cpu()) {
      slot.copy_(t.detach());
    } else {
      slot = t.detach().to(torch::kCPU, torch::kFloat32, false, /*copy=*/true);
    }
  };
  auto put_named = [&](ckpt::NamedTensors& list, size_t i, const std::string& name, const at::Tensor& t) {
    if (list.size() <= i) list.resize(i + 1);
    list[i].first = name;
    put(list[i].second, t);
  };
  size_t i = 0;
  for (const auto& [name, parameter] : im.named) put_named(c.model, i++, name, parameter);
  c.model.resize(i);
  i = 0;
  if (im.ema)
    for (const auto& [name, average] : im.ema->averages()) put_named(c.ema, i++, name, average);
  c.ema.resize(i);
  const auto& optimizer_state = im.optimizer->state();
  i = 0;
  for (const auto& [name, parameter] : im.named) {
    const auto it = optimizer_state.find(optimizer_key(parameter));
    if (it == optimizer_state.end()) continue;
    const auto& adam = static_cast<const torch::optim::AdamWParamState&>(*it->second);
    if (c.optim.size() <= i) c.optim.resize(i + 1);
    auto& slot = c.optim[i++];
    slot.name = name;
    slot.step = adam.step();
    put(slot.exp_avg, adam.exp_avg());
    put(slot.exp_avg_sq, adam.exp_avg_sq());
  }
  c.optim.resize(i);
  const auto position = im.loader->state();
  c.state.step = step_;
  c.state.epoch = epoch_;
  c.state.sampler_epoch = position.epoch;
  c.state.sampler_consumed = position.consumed;
  c.state.skipped = skipped_;
  c.state.lr = step_ > 0 ? im.schedule.at(step_ - 1) : im.schedule.at(0);
  c.state.loss_scale = im.scaler ? im.scaler->scale() : std::numeric_limits<double>::quiet_NaN();
  c.state.loss_scale_good_steps = im.scaler ? im.scaler->good_steps() : 0;
  c.state.val_loss = val_loss;
  {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    c.rng_cpu = generator.get_state();
  }
  c.run_config = run_config;
  c.model_config = model::to_json(im.model_config);
  c.world_size = comm_.size();
  c.teacher = im.teacher ? im.teacher->path() : std::string();
  c.teacher_checksum = im.teacher ? im.teacher->checksum() : std::string();
}

void Trainer::save_weights(const std::string& directory) const {
  if (comm_.rank() != 0) return;
  std::filesystem::create_directories(directory);
  model::save_weights(*impl_->model, directory + "/model.safetensors");
  if (impl_->ema) model::write_safetensors(directory + "/ema.safetensors", impl_->ema->averages(), at::kFloat);
  std::ofstream config(directory + "/model-config.json");
  config << model::to_json(impl_->model_config) << '\n';
  if (!config) throw Error(fmt::format("{}/model-config.json: cannot write", directory));
}

}  // namespace wt::train
