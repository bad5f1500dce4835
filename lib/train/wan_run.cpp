#include "wantrain/train/wan_run.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <filesystem>

#include "wantrain/ckpt/checkpoint.hpp"
#include "wantrain/distributed/comm.hpp"
#include "wantrain/model/projection.hpp"
#include "wantrain/model/safetensors.hpp"
#include "wantrain/model/wan_model.hpp"
#include "wantrain/model/weights.hpp"
#include "wantrain/train/distillation_objective.hpp"
#include "wantrain/train/ema.hpp"
#include "wantrain/train/run_plan.hpp"
#include "wantrain/train/shard_source.hpp"
#include "wantrain/train/teacher.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"

namespace wt::train {

struct WanRun::Impl {
  model::WanModel model;
  model::WanConfig config;
  std::unique_ptr<Objective> objective;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<ShardBatches> batches;
  Teacher* teacher = nullptr;
  int64_t first_epoch = 0;
  bool resumed = false;
  // Kept from construction for connect().
  std::unique_ptr<data::DistributedSampler> sampler;
  std::unique_ptr<data::Dataset> dataset;
  int prefetch = 2;
  bool teacher_bf16 = false;
  EngineOptions engine_options;

  explicit Impl(model::WanConfig c) : model(c), config(std::move(c)) {}
};

WanRun::WanRun(const RunPlan& plan, const WanRunOptions& options, distributed::Comm& comm, data::Dataset dataset,
               model::WanConfig config, const StartPoint& start, Teacher* teacher) {
  const ckpt::Checkpoint* resume = start.checkpoint ? &*start.checkpoint : nullptr;
  data::DistributedSampler sampler(dataset.shard_sizes(), plan.sampler);

  torch::manual_seed(plan.settings.seed);  // the same initial weights for the same seed (rank 0's are broadcast)
  impl_ = std::make_unique<Impl>(std::move(config));
  auto& im = *impl_;
  im.teacher = teacher;
  auto& model = im.model;
  const bool init_from_checkpoint = !options.init.empty() && ckpt::is_checkpoint_file(options.init);
  if (!options.init.empty() && !init_from_checkpoint)
    model::load_weights(*model, options.init, model::LoadMode::Strict);
  model->to(comm.device());
  model->train();
  if (teacher)
    im.objective = std::make_unique<DistillationObjective>(*model, *teacher, options.objective,
                                                           options.distill_target_weight, plan.engine.compute_dtype);
  else
    im.objective = std::make_unique<FlowMatchingObjective>(*model, options.objective);
  // The trained parameters by official name: what checkpoints and projection fill.
  const auto& named = im.objective->trainable();
  if (resume) {
    im.objective->check_resume(resume->objective_kind, resume->objective, start.path);
    ckpt::check_fits(*resume, start.path, named, plan.engine.ema_decay > 0);
    ckpt::copy_named(resume->model, named);
  } else if (init_from_checkpoint) {
    const auto init = ckpt::read_checkpoint(options.init);
    ckpt::check_fits(init, options.init, named, false);
    ckpt::copy_named(init.model, named);
  }
  if (teacher) {
    if (teacher->config().patch_size[0] > 1 && im.config.patch_size[0] == 1) teacher->show_frames_as_stills(true);
    if (!resume) start_student(*teacher, options, comm.rank(), plan.settings.seed);
  }

  if (resume) {
    restore_sampler(*resume, start.path, sampler);
    im.first_epoch = resume->state.epoch;
  }
  im.sampler = std::make_unique<data::DistributedSampler>(std::move(sampler));
  im.dataset = std::make_unique<data::Dataset>(std::move(dataset));
  im.prefetch = options.prefetch;
  im.teacher_bf16 = options.teacher_bf16;
  im.engine_options = plan.engine;
}

void WanRun::connect(distributed::Comm& comm, const StartPoint& start) {
  auto& im = *impl_;
  im.engine = std::make_unique<Engine>(comm, *im.objective, im.engine_options);
  if (Teacher* teacher = im.teacher) {
    // After the student's projection, which reads the teacher in fp32, and
    // after the Engine's broadcast: the device only ever holds the teacher
    // in its final precision.
    if (im.teacher_bf16) teacher->hold_in_bf16();
    teacher->to(comm.device());
    if (comm.rank() == 0)
      fmt::print("teacher: {} ({}), checksum {}, frozen{}{}\n", teacher->path(), teacher->source(), teacher->checksum(),
                 teacher->held_in_bf16() ? ", Linear weights held in bf16" : "",
                 teacher->shows_frames_as_stills() ? ", each frame shown to it as a still video" : "");
  }
  if (start.checkpoint) {
    im.engine->load_state(*start.checkpoint);
    im.resumed = true;
  }
  im.batches = std::make_unique<ShardBatches>(std::move(*im.dataset), std::move(*im.sampler), im.prefetch,
                                              comm.device().is_cuda());
}

WanRun::~WanRun() = default;

Engine& WanRun::engine() { return *impl_->engine; }

FitRun WanRun::fit_run(Validator* validator) {
  FitRun run;
  run.engine = impl_->engine.get();
  run.batches = impl_->batches.get();
  run.validator = validator;
  run.first_epoch = impl_->first_epoch;
  run.resumed = impl_->resumed;
  run.save_weights = [this](const std::string& directory) { return save_weights(directory); };
  return run;
}

void WanRun::start_student(const Teacher& teacher, const WanRunOptions& options, int rank, uint64_t seed) {
  auto& im = *impl_;
  const bool report = rank == 0;
  if (!options.init.empty()) {
    if (report) fmt::print("student init: the weights of {} (not projected)\n", options.init);
    return;
  }
  if (options.student_init == StudentInit::Random) {
    if (report) fmt::print("student init: random (seed {})\n", seed);
    return;
  }
  model::check_projectable(teacher.config(), options.teacher_name, im.config, options.model_config_name);
  const auto projection =
      model::project_weights(teacher.weights(), teacher.config(), im.objective->trainable(), im.config);
  if (report) fmt::print("student init: projection from the teacher {}\n{}", teacher.path(), projection.describe());
}

std::string WanRun::save_weights(const std::string& directory) const {
  std::filesystem::create_directories(directory);
  model::save_weights(*impl_->model, directory + "/model.safetensors");
  const auto* ema = impl_->engine->ema();
  if (ema) model::write_safetensors(directory + "/ema.safetensors", ema->averages(), at::kFloat);
  write_file_durably(directory + "/model-config.json", model::to_json(impl_->config) + "\n");
  return fmt::format("weights: {0}/model.safetensors{1}, config {0}/model-config.json", directory,
                     ema ? fmt::format(" (EMA: {}/ema.safetensors)", directory) : std::string());
}

}  // namespace wt::train
