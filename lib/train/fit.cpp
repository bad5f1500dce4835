#include "wantrain/train/fit.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "wantrain/ckpt/directory.hpp"
#include "wantrain/ckpt/shard_file.hpp"
#include "wantrain/ckpt/writer.hpp"
#include "wantrain/distributed/abort.hpp"
#include "wantrain/distributed/comm.hpp"
#include "wantrain/distributed/mpi_comm.hpp"
#include "wantrain/distributed/nccl_comm.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/train/run_plan.hpp"
#include "wantrain/train/sample_videos.hpp"
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

// What the training thread does with finished background writes (rank 0).
// Returns false when a write failed and the run must stop on it.
bool report(const std::vector<ckpt::WriteResult>& results, const FitOptions& options) {
  bool ok = true;
  for (const auto& r : results) {
    if (r.ok()) {
      report_info("checkpoint {} written in {:.2f} s", r.path, r.seconds);
      continue;
    }
    if (options.stop_on_checkpoint_error) {
      report_error("{} (stopping on a failed checkpoint write; the previous checkpoint is intact)", r.error);
      ok = false;
    } else {
      report_warning("{} (training goes on; the previous checkpoint is intact)", r.error);
    }
  }
  return ok;
}

// Rank 0: waits for the write in flight, at most options.checkpoint_timeout;
// past it the job ends with the writer's own line (the other ranks wait in a
// World agreement meanwhile, never under the comm timeout). The .tmp left
// behind is removed by the next start; `latest` names the previous file.
void wait_for_writer(ckpt::CheckpointWriter& writer, const FitOptions& options) {
  if (writer.wait_idle(options.checkpoint_timeout)) return;
  distributed::abort_job(
      fmt::format("a checkpoint write in {} has not finished after {:g} s ({}): the file system is too slow or "
                  "hung; the previous checkpoint is intact",
                  options.output_dir, std::chrono::duration<double>(options.checkpoint_timeout).count(),
                  setting_reference("checkpoint_timeout")),
      kExitFailure);
}

// Collective over the World: the maximum of `values` over the ranks. Rank 0
// may be in wait_for_writer meanwhile, so the bound is the checkpoint
// timeout plus a margin in which rank 0's own abort reaches the others
// first (this bound only catches a rank 0 that vanished silently).
std::vector<int64_t> agree_after_writes(const distributed::World& world, const FitOptions& options,
                                        std::vector<int64_t> values,
                                        const std::string& what = "agreement after a checkpoint write") {
  return world.max_over_ranks(
      std::move(values), what,
      options.checkpoint_timeout + std::max<std::chrono::milliseconds>(world.timeout(), std::chrono::seconds(60)),
      "checkpoint_timeout");
}

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

// fit's loop; `reason` says how it ended, for run.json.
int fit_steps(distributed::World& world, distributed::Comm& comm, const RunPlan& plan, FitRun& run,
              const FitOptions& options, double best_val_loss, TrainLog& log, RunRecord& record, std::string& reason,
              double& device_peak) {
  Engine& engine = *run.engine;
  const bool resumed = run.resumed;
  int64_t epoch = run.first_epoch;

  // Rank 0's writer; without ZeRO the other ranks never touch the file
  // system for checkpoints. With it every rank writes its shard, and the
  // writers agree on each checkpoint over a communicator of their own
  // (ended by its watchdog after the checkpoint timeout).
  std::unique_ptr<ckpt::CheckpointWriter> writer;
  std::shared_ptr<distributed::MpiComm> writers_comm;
  if (world.is_root())
    for (const auto& partial : ckpt::remove_partial_writes(options.output_dir))
      report_warning("removed {}, left by a checkpoint write that did not finish", partial);
  ckpt::WriterOptions writer_options;
  writer_options.directory = options.output_dir;
  writer_options.keep = options.keep;
  writer_options.keep_best = options.keep_best;
  writer_options.best_val_loss = best_val_loss;
  writer_options.rank = world.rank();
  if (options.sharded_state) {
    writers_comm = std::make_shared<distributed::MpiComm>(world, distributed::CommOptions{options.checkpoint_timeout});
    writer_options.agree = [writers_comm](bool ok) {
      auto failed = torch::tensor({int32_t(!ok)}, torch::kInt32);
      writers_comm->all_reduce(failed, {distributed::ReduceOp::Max});
      return failed.item<int32_t>() == 0;
    };
  }
  if (world.is_root() || options.sharded_state) writer = std::make_unique<ckpt::CheckpointWriter>(writer_options);
  // Collective: rank 0 drains its writer (bounded) and reports; true on
  // every rank when every write so far succeeded and `ok`.
  auto finish_writes = [&](bool ok) {
    if (writer) {
      wait_for_writer(*writer, options);
      ok = report(writer->drain(), options) && ok;
    }
    return agree_after_writes(world, options, {int64_t(!ok)})[0] == 0;
  };
  int64_t last_saved = resumed ? engine.steps_taken() : -1;
  // Collective (at the same steps on every rank): rank 0 hands a snapshot to
  // its writer once the previous write finished; the others wait for that.
  auto save = [&](double val_loss) {
    if (engine.steps_taken() == last_saved) return;
    if (writer) wait_for_writer(*writer, options);
    agree_after_writes(world, options, {0});
    if (writer) {
      auto c = writer->recycle();
      engine.save_state(c);
      const auto position = run.batches->position();
      c.state.epoch = epoch;
      c.state.sampler_epoch = position.epoch;
      c.state.sampler_consumed = position.consumed;
      c.state.val_loss = val_loss;
      c.world_size = plan.data_parallel;  // the sampler's ranks (with --sp: its groups)
      c.shard_affinity = plan.sampler.shard_affinity;
      c.run_config = options.run_options;
      c.model_config = options.model_config;
      c.objective_kind = engine.objective().kind();
      c.objective = engine.objective().checkpoint_state();
      writer->submit(std::move(c));
    }
    last_saved = engine.steps_taken();
    record.write_started();  // a job killed from here on is recorded this far
  };

  const at::ScalarType compute_dtype = plan.engine.compute_dtype;
  auto validate = [&](int64_t step) {
    const WholeWeights whole(engine);  // ZeRO-3: ranks may run different numbers of batches
    const ValidationResult result =
        run.validator->evaluate(engine.objective(), comm, compute_dtype, plan.settings.sequence_parallel);
    log.validation(step, result);
    record.validation(step, result.loss);
    return result.loss;
  };
  // Rank 0 draws while the others wait in the agreement that follows its
  // checkpoint writes (rank 0's own long work), never under the comm timeout.
  // The prompts' videos first, every rank its share, gathered (waiting out
  // the ranks' uneven shares as a checkpoint write is waited out).
  auto draw_sample = [&](int64_t step) {
    std::vector<SampleVideo> videos;
    if (run.draw_videos)
      videos = gather_sample_videos(
          world, run.draw_videos(step),
          options.checkpoint_timeout + std::max<std::chrono::milliseconds>(world.timeout(), std::chrono::seconds(60)));
    if (auto sample = run.draw_sample(step)) {
      sample->videos = std::move(videos);
      log.sample(step, *sample);
      record.sample(step, *sample);
    }
    agree_after_writes(world, options, {0}, "agreement after drawing a training sample");
  };
  // With sample ranks: the weights go to them, or the sample is dropped
  // (never a wait, but for the last one's, bounded as a checkpoint write is).
  auto hand_off = [&](int64_t step, bool last) {
    using Readiness = SampleSender::Readiness;
    SampleSender* sender = run.hand_off->sender;
    Readiness readiness = Readiness::Busy;
    if (sender) readiness = last ? sender->wait_ready(step, options.checkpoint_timeout) : sender->ready(step);
    readiness =
        Readiness(agree_after_writes(world, options, {int64_t(readiness)}, "agreement on handing a sample over")[0]);
    if (readiness == Readiness::NotWanted) return;  // the sample ranks wait for the other expert's step
    if (readiness == Readiness::Busy) {
      if (world.is_root() && last)
        report_warning(
            "step {}: the sample ranks are still busy with an earlier sample after {:g} s ({}): the last "
            "sample is dropped",
            step, std::chrono::duration<double>(options.checkpoint_timeout).count(),
            setting_reference("checkpoint_timeout"));
      else if (world.is_root())
        report_warning(
            "step {}: the sample ranks are still busy with an earlier sample: this one is dropped (a sample "
            "takes them longer than {} steps train; {} with a larger N, or more sample ranks)",
            step, options.sample_every, setting_reference("sample_every"));
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    int64_t count = 0;
    for (const auto& item : engine.objective().trainable()) count += run.hand_off->sends(item.first) ? 1 : 0;
    if (sender) sender->begin(step, count, run.hand_off->base);
    engine.each_sampling_weight(
        [&](const std::string& name, const at::Tensor& whole) {
          if (sender) sender->send(name, whole);
        },
        run.hand_off->sends);
    if (world.is_root())
      report_info("step {}: the weights of the sample went to the sample ranks in {:.2f} s", step,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  };
  // A stop signal that came during start-up: nothing new to save (a resumed
  // run's checkpoint is `latest` already); the requeue starts again from it.
  test_delay("before_first_step");
  if (const int signal = int(world.max_over_ranks({stop_signal()}, "agreement on a stop signal", world.timeout())[0])) {
    reason = fmt::format("stopped before the first step by {} (nothing to save)", signal_name(signal));
    if (world.is_root())
      report_info("stopping before the first step on {}: nothing to save; exit status {} (requeue, then {} auto)",
                  signal_name(signal), kExitRequeue, setting_reference("resume"));
    std::fflush(stdout);
    return kExitRequeue;
  }

  using Clock = std::chrono::steady_clock;
  bool writes_ok = true;
  int64_t skipped_in_a_row = 0;     // the skip decision is the same on every rank, so is this
  double val_loss = kNoValidation;  // of the step just taken
  while (engine.steps_taken() < plan.total_steps) {
    const auto wait = Clock::now();
    const Batch batch = run.batches->next(epoch);
    const double waited = std::chrono::duration<double>(Clock::now() - wait).count();
    // The ranks agree on a signal any of them got and a failed write any
    // of them saw in the step's own reduction (no collective of their own):
    // what arrives after it counts at the next step.
    StepResult result = engine.step(batch, {stop_signal, !writes_ok});
    result.epoch = epoch;
    result.times.data += waited;
    result.times.total += waited;
    log.record(result, engine.skipped_steps(),
               log.is_logged_step(result.step) ? memory_peaks(comm, device_peak) : MemoryPeaks{});
    record.progress(progress_of(engine, log, plan.effective_batch));
    skipped_in_a_row = result.skipped ? skipped_in_a_row + 1 : 0;
    if (options.max_skipped > 0 && skipped_in_a_row >= options.max_skipped) {
      finish_writes(true);
      if (world.is_root())
        print_error_line(fmt::format(
            "stopping at step {}: {} steps in a row had a non-finite loss or gradient and were skipped ({} {}); "
            "check the data (wandata verify), the learning rate and the precision",
            result.step, skipped_in_a_row, setting_reference("max_skipped"), options.max_skipped));
      reason = fmt::format("stopped at step {}: {} steps in a row were skipped (non-finite loss or gradient)",
                           result.step, skipped_in_a_row);
      return kExitFailure;
    }
    // A failed write stops the run before it writes anything more.
    if (result.write_failed) {
      finish_writes(true);
      reason = fmt::format("stopped at step {}: a checkpoint write failed", engine.steps_taken());
      return kExitFailure;
    }
    const bool done = engine.steps_taken() >= plan.total_steps;
    val_loss = kNoValidation;
    if (run.validator && (done || (options.val_every > 0 && result.step % options.val_every == 0)))
      val_loss = validate(result.step);
    if (options.sample_every > 0 && (done || result.step % options.sample_every == 0)) {
      if (run.hand_off)
        hand_off(result.step, done);
      else
        draw_sample(result.step);
    }
    if (options.save_every > 0 && result.step % options.save_every == 0) save(val_loss);
    if (writer) writes_ok = report(writer->take_results(), options) && writes_ok;

    if (const int signal = result.stop_signal; signal != 0) {
      save(val_loss);
      bool written = true;  // whatever the error policy says: the message must be true
      if (writer) {
        wait_for_writer(*writer, options);
        const auto results = writer->drain();
        report(results, options);
        for (const auto& r : results) written = written && r.ok();
      }
      const bool saved = agree_after_writes(world, options, {int64_t(!written)})[0] == 0;
      if (world.is_root())
        report_info("stopping at step {} on {}: {}; exit status {}", engine.steps_taken(), signal_name(signal),
                    saved ? fmt::format("checkpoint {}/{}", options.output_dir,
                                        ckpt::checkpoint_file_name(engine.steps_taken()))
                          : std::string("the checkpoint could not be written"),
                    saved ? fmt::format("{} (requeue, then {} auto)", kExitRequeue, setting_reference("resume"))
                          : std::string("1"));
      std::fflush(stdout);  // before a launcher's kill-on-bad-exit can end this rank
      reason = fmt::format("stopped at step {} by {}: {}", engine.steps_taken(), signal_name(signal),
                           saved ? "checkpoint written, requeue to go on" : "the checkpoint could not be written");
      return saved ? kExitRequeue : kExitFailure;
    }
  }
  log.finish(engine.skipped_steps(), memory_peaks(comm, device_peak));

  // The final checkpoint; not after a failed write that stops the run.
  // Every rank learns how the writes went, so all exit with one status.
  writes_ok = finish_writes(writes_ok);
  if (writes_ok || !options.stop_on_checkpoint_error) save(val_loss);
  writes_ok = finish_writes(writes_ok);
  // A stop signal while the final checkpoint was written: it is complete,
  // and the requeued job (--resume auto) only writes the weights.
  if (const int signal = int(world.max_over_ranks({stop_signal()}, "agreement on a stop signal", world.timeout())[0])) {
    if (world.is_root())
      report_info("stopping after the last step on {}: {}", signal_name(signal),
                  writes_ok ? fmt::format("the final checkpoint is complete ({}/latest); exit status {} (requeue, then "
                                          "{} auto)",
                                          options.output_dir, kExitRequeue, setting_reference("resume"))
                            : std::string("the final checkpoint could not be written; exit status 1"));
    std::fflush(stdout);
    reason = fmt::format(
        "finished, then stopped by {} while the final checkpoint was written{}", signal_name(signal),
        writes_ok ? " (it is complete; the requeued run writes the weights)" : " (it could not be written)");
    return writes_ok ? kExitRequeue : kExitFailure;
  }
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
