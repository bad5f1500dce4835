#include "train_run.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <optional>

#include "dist/comm.hpp"
#include "dist/world.hpp"
#include "train/train_log.hpp"
#include "train/trainer.hpp"
#include "train/validation.hpp"
#include "util/error.hpp"
#include "util/exit_codes.hpp"

namespace wt {

int run_training(World& world, Comm& comm, const TrainConfig& cfg, data::Dataset dataset,
                 const model::WanConfig& model_config) {
  std::unique_ptr<train::Trainer> trainer;
  std::unique_ptr<train::Validator> validator;
  world.agree([&] {
    // Options of what later issues build: refused rather than ignored.
    if (cfg.mode == "distill") throw UsageError("option --mode: distillation is not in this build yet (issue #7)");
    if (!cfg.resume.empty() || cfg.save_every > 0 || cfg.keep_best)
      throw UsageError(fmt::format("option --{}: checkpoints are not in this build yet (issue #6)",
                                   !cfg.resume.empty() ? "resume" : cfg.save_every > 0 ? "save-every" : "keep-best"));
    if (world.is_root()) {
      std::error_code error;
      std::filesystem::create_directories(cfg.output_dir, error);
      if (error) throw UsageError(fmt::format("option --output-dir: cannot create {}: {}", cfg.output_dir,
                                              error.message()));
    }
    if (!cfg.val_data.empty())
      validator = std::make_unique<train::Validator>(cfg.val_data, train::ValidationOptions{cfg.batch_size, 4, cfg.shift});
  });
  world.agree([&] { trainer = std::make_unique<train::Trainer>(cfg, comm, std::move(dataset), model_config); });

  train::TrainLogOptions log_options;
  log_options.metrics_path = cfg.output_dir + "/metrics.jsonl";
  log_options.log_every = cfg.log_every;
  log_options.total_steps = trainer->total_steps();
  log_options.first_step = trainer->steps_taken();
  log_options.samples_per_step = trainer->effective_batch();
  train::TrainLog log(world.is_root(), log_options);

  auto validate = [&](int64_t step) {
    log.validation(step, validator->evaluate(trainer->model(), comm, trainer->compute_dtype()));
  };
  while (!trainer->done()) {
    const auto result = trainer->step();
    log.record(result, trainer->skipped_steps());
    if (validator && (trainer->done() || (cfg.val_every > 0 && result.step % cfg.val_every == 0)))
      validate(result.step);
  }
  log.finish(trainer->skipped_steps());

  trainer->save_weights(cfg.output_dir);
  comm.barrier();  // the weights are complete before any rank reports success
  if (world.is_root())
    fmt::print("weights: {0}/model.safetensors{1}, config {0}/model-config.json\n", cfg.output_dir,
               trainer->ema() ? fmt::format(" (EMA: {}/ema.safetensors)", cfg.output_dir) : std::string());
  return kExitOk;
}

}  // namespace wt
