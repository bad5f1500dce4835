#include "wantrain/train/trainer.hpp"

#include <fmt/format.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "wantrain/ckpt/checkpoint.hpp"
#include "wantrain/data/loader.hpp"
#include "wantrain/data/shard.hpp"
#include "wantrain/distributed/comm.hpp"
#include "wantrain/model/safetensors.hpp"
#include "wantrain/model/wan_model.hpp"
#include "wantrain/model/weights.hpp"
#include "wantrain/train/distillation_objective.hpp"
#include "wantrain/train/ema.hpp"
#include "wantrain/train/engine.hpp"
#include "wantrain/train/flow_matching_objective.hpp"
#include "wantrain/train/lr_schedule.hpp"
#include "wantrain/train/teacher.hpp"
#include "wantrain/util/error.hpp"

namespace wt::train {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

at::ScalarType compute_dtype_of(const std::string& precision, const at::Device& device) {
  if (precision == "fp32") return at::kFloat;
  if (precision == "bf16") return at::kBFloat16;
  if (!device.is_cuda())
    throw UsageError("option --precision: fp16 needs CUDA devices (dynamic loss scaling); on CPU use bf16");
  return at::kHalf;
}

data::DistributedSampler make_sampler(const TrainConfig& cfg, const distributed::Comm& comm,
                                      const data::Dataset& dataset) {
  // One loader batch is this rank's whole step: B samples for each of the K micro-batches.
  return data::DistributedSampler(dataset.shard_sizes(),
                                  {comm.size(), comm.rank(), int64_t(cfg.batch_size) * cfg.grad_accum, cfg.seed,
                                   !cfg.no_drop_last, cfg.shard_affinity});
}

}  // namespace

struct Trainer::Impl {
  model::WanModel model;
  std::unique_ptr<Objective> objective;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<data::Loader> loader;
  model::WanConfig model_config;
  Teacher* teacher = nullptr;

  explicit Impl(model::WanConfig config) : model(std::move(config)) {}
};

Trainer::Trainer(const TrainConfig& cfg, distributed::Comm& comm, data::Dataset dataset, model::WanConfig model_config,
                 TrainerOptions options)
    : cfg_(cfg), comm_(comm), compute_dtype_(compute_dtype_of(cfg.precision, comm.device())) {
  auto sampler = make_sampler(cfg, comm, dataset);
  steps_per_epoch_ = sampler.batches_per_epoch();
  total_steps_ = cfg.steps > 0 ? cfg.steps : cfg.epochs * steps_per_epoch_;
  if (total_steps_ <= 0) throw UsageError("option --steps: give --steps N or --epochs N to train");

  torch::manual_seed(cfg.seed);  // the same initial weights for the same --seed (rank 0's are broadcast anyway)
  impl_ = std::make_unique<Impl>(model_config);
  impl_->model_config = std::move(model_config);
  auto& model = impl_->model;
  const bool init_from_checkpoint = !cfg.init.empty() && ckpt::is_checkpoint_file(cfg.init);
  if (!cfg.init.empty() && !init_from_checkpoint) model::load_weights(*model, cfg.init, model::LoadMode::Strict);
  model->to(comm.device());
  model->train();
  FlowMatchingObjectiveOptions objective_options;
  objective_options.flow = {parse_timestep_sampling(cfg.timestep_sampling), cfg.logit_mean, cfg.logit_std, cfg.shift};
  objective_options.text_drop = cfg.text_drop;
  objective_options.seed = cfg.seed;
  if (options.teacher)
    impl_->objective = std::make_unique<DistillationObjective>(*model, *options.teacher, objective_options,
                                                               cfg.distill_target_weight, compute_dtype_);
  else
    impl_->objective = std::make_unique<FlowMatchingObjective>(*model, objective_options);
  // The trained parameters by official name: what checkpoints and projection fill.
  const auto& named = impl_->objective->trainable();
  if (options.resume) {
    ckpt::check_fits(*options.resume, options.resume_path, named, cfg.ema_decay > 0);
    ckpt::copy_named(options.resume->model, named);
  } else if (init_from_checkpoint) {
    const auto init = ckpt::read_checkpoint(cfg.init);
    ckpt::check_fits(init, cfg.init, named, false);
    ckpt::copy_named(init.model, named);
  }
  impl_->teacher = options.teacher;
  if (options.teacher) {
    if (options.teacher->config().patch_size[0] > 1 && impl_->model_config.patch_size[0] == 1)
      options.teacher->show_frames_as_stills(true);
    if (!options.resume) start_student(*options.teacher);
  }

  EngineOptions engine_options;
  engine_options.micro_batch = cfg.batch_size;
  engine_options.accumulation = cfg.grad_accum;
  engine_options.compute_dtype = compute_dtype_;
  engine_options.schedule = {peak_lr(), parse_schedule(cfg.schedule.c_str()), cfg.warmup_steps, total_steps_};
  engine_options.adamw = {cfg.betas.beta1, cfg.betas.beta2, cfg.weight_decay, 1e-8};
  engine_options.clip = cfg.clip;
  engine_options.ema_decay = cfg.ema_decay;
  engine_options.bucket_bytes = static_cast<int64_t>(cfg.bucket_mb * (1 << 20));
  engine_options.allow_unused = cfg.allow_unused;
  engine_options.communicate = options.communicate;
  impl_->engine = std::make_unique<Engine>(comm, *impl_->objective, engine_options);
  if (options.resume) restore(*options.resume, options.resume_path, sampler);

  // On GPU the loader hands over the stored dtype (half the bytes to copy for
  // fp16 data) and the device converts; on CPU its thread converts, off the
  // training thread's critical path.
  data::LoaderOptions loader_options;
  loader_options.prefetch = cfg.prefetch;
  const auto& shape = dataset.shape();
  loader_options.dtype =
      comm.device().is_cuda() && shape.latents == shape.text ? data::scalar_type(shape.latents) : at::kFloat;
  impl_->loader = std::make_unique<data::Loader>(std::move(dataset), std::move(sampler), loader_options);
}

Trainer::~Trainer() = default;

int64_t Trainer::effective_batch() const { return int64_t(cfg_.batch_size) * comm_.size() * cfg_.grad_accum; }
double Trainer::peak_lr() const { return scaled_lr(cfg_.lr, effective_batch(), cfg_.scale_lr); }
model::WanModelImpl& Trainer::model() { return *impl_->model; }
Objective& Trainer::objective() { return *impl_->objective; }
const Ema* Trainer::ema() const { return impl_->engine->ema(); }
int64_t Trainer::steps_taken() const { return impl_->engine->steps_taken(); }
int64_t Trainer::skipped_steps() const { return impl_->engine->skipped_steps(); }

StepResult Trainer::step() {
  const auto wait = Clock::now();
  data::Batch loaded = impl_->loader->next();
  const double waited = seconds_since(wait);
  epoch_ = loaded.position.epoch;
  Batch batch;
  batch.indices = std::move(loaded.indices);
  batch.tensors.emplace("latents", std::move(loaded.latents));
  batch.tensors.emplace("text_emb", std::move(loaded.text_emb));
  StepResult result = impl_->engine->step(batch);
  result.epoch = epoch_;
  result.times.data += waited;
  result.times.total += waited;
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
  const auto projection =
      model::project_weights(teacher.weights(), teacher.config(), im.objective->trainable(), im.model_config);
  if (report) fmt::print("student init: projection from the teacher {}\n{}", teacher.path(), projection.describe());
}

void Trainer::restore(const ckpt::Checkpoint& saved, const std::string& path, data::DistributedSampler& sampler) {
  auto& im = *impl_;
  const auto& state = saved.state;
  // The teacher is an input of a distillation run, as the data are: resuming
  // against other weights would silently change the objective.
  if (im.teacher && saved.teacher.empty())
    throw UsageError(
        fmt::format("checkpoint {}: written by a training run (--mode train), not by distillation; "
                    "start the student from it with --init instead of --resume",
                    path));
  if (!im.teacher && !saved.teacher.empty())
    throw UsageError(
        fmt::format("checkpoint {}: written by a distillation run (teacher {}); resume it with --mode "
                    "distill --teacher, or start from its weights with --init",
                    path, saved.teacher));
  if (im.teacher && saved.teacher_checksum != im.teacher->checksum())
    throw UsageError(
        fmt::format("checkpoint {}: distilled from the teacher {} ({}), but --teacher {} has other "
                    "weights ({}); resume with the same teacher",
                    path, saved.teacher, saved.teacher_checksum, im.teacher->path(), im.teacher->checksum()));
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
    throw UsageError(
        fmt::format("checkpoint {}: written mid-epoch by {} ranks {} --shard-affinity, whose data order "
                    "depends on both; resume it on {} ranks {} --shard-affinity",
                    path, saved.world_size, saved_affinity ? "with" : "without", saved.world_size,
                    saved_affinity ? "with" : "without"));
  sampler.restore({state.sampler_epoch, state.sampler_consumed});
  impl_->engine->load_state(saved);
  epoch_ = state.epoch;
}

ckpt::Checkpoint Trainer::snapshot(const std::string& run_config, double val_loss) const {
  ckpt::Checkpoint c;
  snapshot_into(c, run_config, val_loss);
  return c;
}

void Trainer::snapshot_into(ckpt::Checkpoint& c, const std::string& run_config, double val_loss) const {
  auto& im = *impl_;
  im.engine->save_state(c);
  const auto position = im.loader->state();
  c.state.epoch = epoch_;
  c.state.sampler_epoch = position.epoch;
  c.state.sampler_consumed = position.consumed;
  c.state.val_loss = val_loss;
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
  if (const auto* ema = impl_->engine->ema())
    model::write_safetensors(directory + "/ema.safetensors", ema->averages(), at::kFloat);
  std::ofstream config(directory + "/model-config.json");
  config << model::to_json(impl_->model_config) << '\n';
  if (!config) throw Error(fmt::format("{}/model-config.json: cannot write", directory));
}

}  // namespace wt::train
