#include "wantrain/train/fit.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "wantrain/ckpt/directory.hpp"
#include "wantrain/ckpt/shard_file.hpp"
#include "wantrain/distributed/comm.hpp"
#include "wantrain/distributed/nccl_comm.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/train/checkpoint_saver.hpp"
#include "wantrain/train/run_plan.hpp"
#include "wantrain/train/sample_sink.hpp"
#include "wantrain/train/train_log.hpp"
#include "wantrain/train/validation.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/memory.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/fatal.hpp"
#include "wantrain/util/reporter.hpp"
#include "wantrain/util/stop_signals.hpp"
#include "wantrain/util/test_hooks.hpp"

namespace wt::train {
namespace {

// Every rank's peak memory in MiB (collective: each rank fills its own
// slots of a sum). Device memory is sampled now: `device_peak` keeps this
// rank's most seen.
MemoryPeaks memory_peaks(distributed::Comm& comm, double& device_peak) {
  const int ranks = comm.size();
  const bool gpu = comm.device().is_cuda();
  if (gpu) device_peak = std::max(device_peak, distributed::cuda_device_memory_in_use_bytes(comm.device().index()));
  auto slots = torch::zeros({2 * ranks}, torch::kFloat64);
  slots[comm.rank()] = peak_rss_mib();
  slots[ranks + comm.rank()] = device_peak / (1024.0 * 1024.0);
  slots = slots.to(comm.device());
  comm.all_reduce(slots, {distributed::ReduceOp::Sum});
  slots = slots.cpu();
  const double* values = slots.data_ptr<double>();
  MemoryPeaks peaks;
  peaks.rss_mib.assign(values, values + ranks);
  if (gpu) peaks.device_mib.assign(values + ranks, values + 2 * ranks);
  return peaks;
}

// What run.json says of the steps so far (rank 0's log knows them).
RunProgress progress_of(const Engine& engine, const TrainLog& log, int64_t samples_per_step) {
  RunProgress p;
  p.last_step = engine.steps_taken();
  p.steps = log.run_steps();
  p.train_seconds = log.run_seconds();
  p.samples_per_s = p.train_seconds > 0 ? double(p.steps * samples_per_step) / p.train_seconds : 0.0;
  p.last_loss = log.last_loss();
  return p;
}

// This rank's own figure, where the others cannot be asked (an error).
MemoryPeaks own_memory_peak() { return {{peak_rss_mib()}, {}}; }

constexpr double kNoValidation = std::numeric_limits<double>::quiet_NaN();

}  // namespace

StartPoint start_run(distributed::World& world, const FitOptions& options, const std::string& resume,
                     const std::string& model_config_name) {
  StartPoint start;
  // Each agreement holds one phase, so that an error on rank 0 meets the
  // other ranks in the agreement's collective, never in a broadcast of the
  // next phase (which would hang the job).
  world.agree([&] {
    if (!world.is_root()) return;
    std::error_code error;
    std::filesystem::create_directories(options.output_dir, error);
    if (error)
      throw SettingError("output_dir", fmt::format("cannot create {}: {}", options.output_dir, error.message()));
    start.lock = std::make_shared<ckpt::DirectoryLock>(options.output_dir);
  });
  world.agree([&] {
    // Rank 0 chooses the file (right after a requeue, nodes may see the
    // `latest` link differently); every rank then reads it (a shared file
    // system, as for the data) and checks it before anything is built.
    if (!resume.empty()) {
      std::string chosen, error;
      if (world.is_root()) {
        try {
          chosen = ckpt::resolve_resume(resume, options.output_dir).value_or("");
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
        start.checkpoint = ckpt::read_checkpoint(chosen, {!options.sharded_state, !options.sharded_state});
        // A ZeRO run reads its slices later (Engine::load_state): its shard
        // files are found and checked now, with the rest.
        if (options.sharded_state) ckpt::StateReader check_shards(chosen);
        start.path = chosen;
        ckpt::check_model_config(start.checkpoint->model_config, start.path, options.model_config, model_config_name);
      }
    }
    if (world.is_root() && options.keep_best)
      if (const auto best = ckpt::linked_checkpoint(options.output_dir, "best"))
        start.best_val_loss = ckpt::read_trainer_state(*best).val_loss;
  });
  if (world.is_root() && !resume.empty()) {
    const auto& saved = start.checkpoint;
    if (saved)
      report_info("resume: {} (step {}, epoch {}, written by {} rank{}{})", start.path, saved->state.step,
                  saved->state.epoch, saved->world_size, saved->world_size == 1 ? "" : "s",
                  saved->world_size == world.size() ? "" : "; the sampler re-partitions its position");
    else
      report_info("resume: auto: no checkpoint in {}; starting fresh", options.output_dir);
  }
  return start;
}

void restore_sampler(const ckpt::Checkpoint& saved, const std::string& path, data::DistributedSampler& sampler) {
  const auto& state = saved.state;
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
  const bool affinity = sampler.options().shard_affinity;
  if ((saved.shard_affinity || affinity) && state.sampler_consumed != 0 &&
      (saved.world_size != sampler.options().world_size || saved.shard_affinity != affinity))
    throw UsageError(
        fmt::format("checkpoint {}: written mid-epoch by {} ranks {} shard affinity, whose data order "
                    "depends on both; resume it on {} ranks {} shard affinity",
                    path, saved.world_size, saved.shard_affinity ? "with" : "without", saved.world_size,
                    saved.shard_affinity ? "with" : "without"));
  sampler.restore({state.sampler_epoch, state.sampler_consumed});
}

namespace {

// Where a stop signal found the run.
enum class StopPoint {
  BeforeFirstStep,  // during start-up: nothing new to save (a resumed run's checkpoint is `latest` already)
  AtStep,           // at a step boundary: the step's checkpoint was written (`saved`) or could not be
  AfterLastStep,    // while the final checkpoint was written: complete (`saved`) or not
};

// Collective: a stop signal any rank has received (0: none).
int agreed_stop_signal(const distributed::World& world) {
  return int(world.max_over_ranks({stop_signal()}, "agreement on a stop signal", world.timeout())[0]);
}

// The one way a stop signal ends a run: rank 0's line, `reason` for
// run.json, and the exit status (kExitRequeue when there is a checkpoint to
// go on from, kExitFailure when it could not be written).
int stopped(const distributed::World& world, const FitOptions& options, StopPoint point, int signal, bool saved,
            int64_t step, std::string& reason) {
  const std::string requeue = fmt::format("{} (requeue, then {} auto)", kExitRequeue, setting_reference("resume"));
  const std::string name = signal_name(signal);
  std::string line;
  switch (point) {
    case StopPoint::BeforeFirstStep:
      line = fmt::format("stopping before the first step on {}: nothing to save; exit status {}", name, requeue);
      reason = fmt::format("stopped before the first step by {} (nothing to save)", name);
      break;
    case StopPoint::AtStep:
      line = fmt::format("stopping at step {} on {}: {}; exit status {}", step, name,
                         saved ? fmt::format("checkpoint {}/{}", options.output_dir, ckpt::checkpoint_file_name(step))
                               : std::string("the checkpoint could not be written"),
                         saved ? requeue : std::string("1"));
      reason = fmt::format("stopped at step {} by {}: {}", step, name,
                           saved ? "checkpoint written, requeue to go on" : "the checkpoint could not be written");
      break;
    case StopPoint::AfterLastStep:
      line = fmt::format("stopping after the last step on {}: {}", name,
                         saved ? fmt::format("the final checkpoint is complete ({}/latest); exit status {}",
                                             options.output_dir, requeue)
                               : std::string("the final checkpoint could not be written; exit status 1"));
      reason =
          fmt::format("finished, then stopped by {} while the final checkpoint was written{}", name,
                      saved ? " (it is complete; the requeued run writes the weights)" : " (it could not be written)");
      break;
  }
  if (world.is_root()) report_info("{}", line);
  std::fflush(stdout);  // before a launcher's kill-on-bad-exit can end this rank
  return saved ? kExitRequeue : kExitFailure;
}

// One optimizer step on the next batch, logged and recorded. The ranks
// agree on a signal any of them got and a failed write any of them saw in
// the step's own reduction (no collective of their own): what arrives
// after it counts at the next step.
StepResult take_step(distributed::Comm& comm, const RunPlan& plan, FitRun& run, int64_t& epoch, bool writes_ok,
                     TrainLog& log, RunRecord& record, double& device_peak) {
  using Clock = std::chrono::steady_clock;
  Engine& engine = *run.engine;
  const auto wait = Clock::now();
  const Batch batch = run.batches->next(epoch);
  const double waited = std::chrono::duration<double>(Clock::now() - wait).count();
  StepResult result = engine.step(batch, {stop_signal, !writes_ok});
  result.epoch = epoch;
  result.times.data += waited;
  result.times.total += waited;
  log.record(result, engine.skipped_steps(),
             log.is_logged_step(result.step) ? memory_peaks(comm, device_peak) : MemoryPeaks{});
  record.progress(progress_of(engine, log, plan.effective_batch));
  return result;
}

// fit's loop; `reason` says how it ended, for run.json.
int fit_steps(distributed::World& world, distributed::Comm& comm, const RunPlan& plan, FitRun& run,
              const FitOptions& options, double best_val_loss, TrainLog& log, RunRecord& record, std::string& reason,
              double& device_peak) {
  Engine& engine = *run.engine;
  int64_t epoch = run.first_epoch;
  CheckpointSaver saver(world, options, plan, engine, *run.batches, record, best_val_loss,
                        run.resumed ? engine.steps_taken() : -1);
  const auto samples = make_sample_sink(world, run, options, log, record);
  auto validate = [&](int64_t step) {
    const WholeWeights whole(engine);  // ZeRO-3: ranks may run different numbers of batches
    const ValidationResult result =
        run.validator->evaluate(engine.objective(), comm, plan.engine.compute_dtype, plan.settings.sequence_parallel);
    log.validation(step, result);
    record.validation(step, result.loss);
    return result.loss;
  };
  test_delay("before_first_step");
  if (const int signal = agreed_stop_signal(world))
    return stopped(world, options, StopPoint::BeforeFirstStep, signal, true, 0, reason);

  bool writes_ok = true;
  int64_t skipped_in_a_row = 0;     // the skip decision is the same on every rank, so is this
  double val_loss = kNoValidation;  // of the step just taken
  while (engine.steps_taken() < plan.total_steps) {
    const StepResult result = take_step(comm, plan, run, epoch, writes_ok, log, record, device_peak);
    skipped_in_a_row = result.skipped ? skipped_in_a_row + 1 : 0;
    if (options.max_skipped > 0 && skipped_in_a_row >= options.max_skipped) {
      saver.finish(true);
      if (world.is_root())
        print_error_line(fmt::format(
            "stopping at step {}: {} steps in a row had a non-finite loss or gradient and were skipped ({} {}); "
            "check the data (wandata verify), the learning rate and the precision",
            result.step, skipped_in_a_row, setting_reference("max_skipped"), options.max_skipped));
      reason = fmt::format("stopped at step {}: {} steps in a row were skipped (non-finite loss or gradient)",
                           result.step, skipped_in_a_row);
      return kExitFailure;
    }
    if (result.write_failed) {  // a failed write stops the run before it writes anything more
      saver.finish(true);
      reason = fmt::format("stopped at step {}: a checkpoint write failed", engine.steps_taken());
      return kExitFailure;
    }
    const bool done = engine.steps_taken() >= plan.total_steps;
    val_loss = kNoValidation;
    if (run.validator && (done || (options.val_every > 0 && result.step % options.val_every == 0)))
      val_loss = validate(result.step);
    if (options.sample_every > 0 && (done || result.step % options.sample_every == 0))
      samples->sample(result.step, done);
    if (options.save_every > 0 && result.step % options.save_every == 0) saver.save(epoch, val_loss);
    writes_ok = saver.take_results() && writes_ok;
    if (result.stop_signal != 0) {
      saver.save(epoch, val_loss);
      const bool saved = saver.all_written();  // whatever the error policy says: the message must be true
      return stopped(world, options, StopPoint::AtStep, result.stop_signal, saved, engine.steps_taken(), reason);
    }
  }
  log.finish(engine.skipped_steps(), memory_peaks(comm, device_peak));

  // The final checkpoint; not after a failed write that stops the run.
  // Every rank learns how the writes went, so all exit with one status.
  writes_ok = saver.finish(writes_ok);
  if (writes_ok || !options.stop_on_checkpoint_error) saver.save(epoch, val_loss);
  writes_ok = saver.finish(writes_ok);
  // A stop signal while the final checkpoint was written: it is complete,
  // and the requeued job (--resume auto) only writes the weights.
  if (const int signal = agreed_stop_signal(world))
    return stopped(world, options, StopPoint::AfterLastStep, signal, writes_ok, engine.steps_taken(), reason);
  std::string weights;
  if (run.save_weights) weights = run.save_weights(options.output_dir, world.is_root());
  comm.barrier();  // the weights are complete before any rank reports success
  if (world.is_root() && !weights.empty()) report_info("{}", weights);
  reason = writes_ok ? "finished" : "finished; a checkpoint write failed";
  return writes_ok || !options.stop_on_checkpoint_error ? kExitOk : kExitFailure;
}

}  // namespace

int fit(distributed::World& world, distributed::Comm& comm, const RunPlan& plan, FitRun run, const FitOptions& options,
        double best_val_loss) {
  if (options.sample_every > 0 && !run.draw_sample && !run.hand_off)
    throw UsageError("fit: sample_every is set, but this run cannot draw samples");
  const int64_t first_step = run.engine->steps_taken();
  TrainLogOptions log_options;
  log_options.metrics_path = options.output_dir + "/metrics.jsonl";
  if (options.tensorboard) log_options.tensorboard_dir = options.output_dir + "/tb";
  log_options.append = run.resumed;
  log_options.log_every = options.log_every;
  log_options.total_steps = plan.total_steps;
  log_options.first_step = first_step;
  log_options.samples_per_step = plan.effective_batch;
  TrainLog log(world.is_root(), log_options);
  RunRecord record(world.is_root(), options.output_dir, options.identity, options.run_options, options.model_config,
                   first_step, plan.total_steps);
  std::string reason;
  double device_peak = 0;
  // An error ends the job without unwinding (app/app.hpp): rank 0 records it
  // from the fatal hook, with its own memory only (the others may be gone).
  const FatalHookScope on_fatal_error([&](std::string_view message) {
    record.write(kExitFailure, fmt::format("error: {}", message), own_memory_peak());
  });
  record.write_started();
  const int status = fit_steps(world, comm, plan, run, options, best_val_loss, log, record, reason, device_peak);
  // Every return of fit_steps is reached by all ranks together.
  record.progress(progress_of(*run.engine, log, plan.effective_batch));
  record.write(status, reason, memory_peaks(comm, device_peak));
  return status;
}

}  // namespace wt::train
