#include "train_run.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>

#include "wantrain/ckpt/checkpoint.hpp"
#include "wantrain/ckpt/directory.hpp"
#include "wantrain/ckpt/writer.hpp"
#include "wantrain/distributed/comm.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/train/teacher.hpp"
#include "wantrain/train/train_log.hpp"
#include "wantrain/train/trainer.hpp"
#include "wantrain/train/validation.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/stop_signals.hpp"

namespace wt {
namespace {

constexpr double kNoValidation = std::numeric_limits<double>::quiet_NaN();

// What the training thread does with finished background writes (rank 0).
// Returns false when a write failed and --on-ckpt-error is fail.
bool report(const std::vector<ckpt::WriteResult>& results, const TrainConfig& cfg) {
  bool ok = true;
  for (const auto& r : results) {
    if (r.ok()) {
      spdlog::info("checkpoint {} written in {:.2f} s", r.path, r.seconds);
      continue;
    }
    if (cfg.on_ckpt_error == "fail") {
      spdlog::error("{} (--on-ckpt-error fail: stopping; the previous checkpoint is intact)", r.error);
      ok = false;
    } else {
      spdlog::warn("{} (--on-ckpt-error warn: training goes on; the previous checkpoint is intact)", r.error);
    }
  }
  return ok;
}

// Collective: true when `ok` on every rank.
bool all_ok(distributed::Comm& comm, bool ok) {
  auto failed = torch::tensor({int64_t(!ok)}, torch::kInt64).to(comm.device());
  comm.all_reduce(failed, {distributed::ReduceOp::Max});
  return failed.cpu().item<int64_t>() == 0;
}

}  // namespace

int run_training(distributed::World& world, distributed::Comm& comm, const TrainConfig& cfg, data::Dataset dataset,
                 const model::WanConfig& model_config, const std::optional<model::WanConfig>& teacher_config,
                 const std::string& run_config) {
  std::unique_ptr<train::Teacher> teacher;
  std::unique_ptr<train::Trainer> trainer;
  std::unique_ptr<train::Validator> validator;
  std::optional<ckpt::Checkpoint> resume;
  std::string resume_path;
  double best_val_loss = std::numeric_limits<double>::infinity();  // of the directory's `best`
  const StopSignalHandlers stop_signals;  // from here on a signal means "checkpoint and requeue"
  world.agree([&] {
    if (world.is_root()) {
      std::error_code error;
      std::filesystem::create_directories(cfg.output_dir, error);
      if (error)
        throw UsageError(fmt::format("option --output-dir: cannot create {}: {}", cfg.output_dir, error.message()));
    }
    if (!cfg.val_data.empty()) validator = std::make_unique<train::Validator>(cfg.val_data, cfg.batch_size);
    // Rank 0 chooses the file (right after a requeue, nodes may see the
    // `latest` link differently); every rank then reads it (a shared file
    // system, as for the data) and checks it before anything is built.
    if (!cfg.resume.empty()) {
      std::string chosen, error;
      if (world.is_root()) {
        try {
          chosen = ckpt::resolve_resume(cfg.resume, cfg.output_dir).value_or("");
        } catch (const UsageError& e) {
          error = e.what();
        }
      }
      world.broadcast(chosen);
      world.broadcast(error);
      if (!error.empty()) {
        if (world.is_root()) throw UsageError(error);
        return;
      }
      if (!chosen.empty()) {
        resume = ckpt::read_checkpoint(chosen);
        resume_path = chosen;
        ckpt::check_model_config(resume->model_config, resume_path, model::to_json(model_config),
                                 "--model-config " + cfg.model_config);
      }
    }
    if (world.is_root() && cfg.keep_best)
      if (const auto best = ckpt::linked_checkpoint(cfg.output_dir, "best"))
        best_val_loss = ckpt::read_trainer_state(*best).val_loss;
  });
  if (world.is_root() && !cfg.resume.empty()) {
    if (resume)
      fmt::print("resume: {} (step {}, epoch {}, written by {} rank{}{})\n", resume_path, resume->state.step,
                 resume->state.epoch, resume->world_size, resume->world_size == 1 ? "" : "s",
                 resume->world_size == world.size() ? "" : "; the sampler re-partitions its position");
    else
      fmt::print("resume: auto: no checkpoint in {}; starting fresh\n", cfg.output_dir);
  }
  // Every rank loads the frozen teacher (from the shared file system, as the
  // data), on the CPU in fp32, in an agreement of its own: a rank that cannot
  // read it must not leave the others in the Reducer's broadcast.
  world.agree([&] {
    if (teacher_config)
      teacher = std::make_unique<train::Teacher>(
          cfg.teacher, *teacher_config,
          cfg.teacher_config.empty() ? "stored in the checkpoint" : "--teacher-config " + cfg.teacher_config);
  });
  world.agree([&] {
    train::TrainerOptions options;
    options.resume = resume ? &*resume : nullptr;
    options.resume_path = resume_path;
    options.teacher = teacher.get();
    trainer = std::make_unique<train::Trainer>(cfg, comm, std::move(dataset), model_config, options);
  });
  if (teacher) {
    // After the student's projection, which reads the teacher in fp32; the
    // device only ever holds the teacher in its final precision.
    if (cfg.teacher_precision == "bf16") teacher->hold_in_bf16();
    teacher->to(comm.device());
    if (world.is_root())
      fmt::print("teacher: {} ({}), checksum {}, frozen{}{}\n", teacher->path(), teacher->source(), teacher->checksum(),
                 teacher->held_in_bf16() ? ", Linear weights held in bf16" : "",
                 teacher->shows_frames_as_stills() ? ", each frame shown to it as a still video" : "");
  }
  const bool resumed = resume.has_value();
  resume.reset();  // the state lives in the Trainer now

  // Rank 0's writer; other ranks never touch the file system for checkpoints.
  std::unique_ptr<ckpt::CheckpointWriter> writer;
  if (world.is_root()) {
    for (const auto& partial : ckpt::remove_partial_writes(cfg.output_dir))
      spdlog::warn("removed {}, left by a checkpoint write that did not finish", partial);
    ckpt::WriterOptions writer_options{cfg.output_dir, cfg.keep, cfg.keep_best, best_val_loss};
    writer = std::make_unique<ckpt::CheckpointWriter>(writer_options);
  }
  int64_t last_saved = resumed ? trainer->steps_taken() : -1;
  auto save = [&](double val_loss) {
    if (writer && trainer->steps_taken() != last_saved) {
      auto checkpoint = writer->recycle();
      trainer->snapshot_into(checkpoint, run_config, val_loss);
      writer->submit(std::move(checkpoint));
    }
    last_saved = trainer->steps_taken();
  };

  train::TrainLogOptions log_options;
  log_options.metrics_path = cfg.output_dir + "/metrics.jsonl";
  log_options.append = resumed;
  log_options.log_every = cfg.log_every;
  log_options.total_steps = trainer->total_steps();
  log_options.first_step = trainer->steps_taken();
  log_options.samples_per_step = trainer->effective_batch();
  train::TrainLog log(world.is_root(), log_options);

  auto validate = [&](int64_t step) {
    const double loss = validator->evaluate(trainer->objective(), comm, trainer->compute_dtype());
    log.validation(step, loss);
    return loss;
  };
  bool writes_ok = true;
  double val_loss = kNoValidation;  // of the step just taken
  while (!trainer->done()) {
    const auto result = trainer->step();
    log.record(result, trainer->skipped_steps());
    val_loss = kNoValidation;
    if (validator && (trainer->done() || (cfg.val_every > 0 && result.step % cfg.val_every == 0)))
      val_loss = validate(result.step);
    if (cfg.save_every > 0 && result.step % cfg.save_every == 0) save(val_loss);
    if (writer) writes_ok = report(writer->take_results(), cfg) && writes_ok;

    // The ranks agree at every step boundary on a signal any of them got,
    // and on a failed write rank 0 saw: [signal, write failed].
    auto flags = torch::tensor({int64_t(stop_signal()), int64_t(!writes_ok)}, torch::kInt64).to(comm.device());
    comm.all_reduce(flags, {distributed::ReduceOp::Max});
    flags = flags.cpu();
    if (flags[1].item<int64_t>() != 0) {
      if (writer) writer->drain();
      return kExitFailure;
    }
    if (const int signal = int(flags[0].item<int64_t>()); signal != 0) {
      save(val_loss);
      bool written = true;  // whatever --on-ckpt-error says: the message must be true
      if (writer) {
        const auto results = writer->drain();
        report(results, cfg);
        for (const auto& r : results) written = written && r.ok();
      }
      const bool saved = all_ok(comm, written);
      if (world.is_root())
        fmt::print(
            "stopping at step {} on {}: {}; exit status {}\n", trainer->steps_taken(), signal_name(signal),
            saved ? fmt::format("checkpoint {}/{}", cfg.output_dir, ckpt::checkpoint_file_name(trainer->steps_taken()))
                  : std::string("the checkpoint could not be written"),
            saved ? fmt::format("{} (requeue, then --resume auto)", kExitRequeue) : std::string("1"));
      std::fflush(stdout);  // before a launcher's kill-on-bad-exit can end this rank
      return saved ? kExitRequeue : kExitFailure;
    }
  }
  log.finish(trainer->skipped_steps());

  // The final checkpoint; not after a failed write under --on-ckpt-error fail.
  // Every rank learns how the writes went, so all exit with one status.
  writes_ok = all_ok(comm, writes_ok && (!writer || report(writer->drain(), cfg)));
  if (writes_ok || cfg.on_ckpt_error == "warn") save(val_loss);
  writes_ok = all_ok(comm, writes_ok && (!writer || report(writer->drain(), cfg)));
  trainer->save_weights(cfg.output_dir);
  comm.barrier();  // the weights are complete before any rank reports success
  if (world.is_root())
    fmt::print("weights: {0}/model.safetensors{1}, config {0}/model-config.json\n", cfg.output_dir,
               trainer->ema() ? fmt::format(" (EMA: {}/ema.safetensors)", cfg.output_dir) : std::string());
  return writes_ok || cfg.on_ckpt_error == "warn" ? kExitOk : kExitFailure;
}

}  // namespace wt
