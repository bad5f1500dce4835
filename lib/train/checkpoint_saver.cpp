#include "wantrain/train/checkpoint_saver.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include "wantrain/ckpt/directory.hpp"
#include "wantrain/ckpt/writer.hpp"
#include "wantrain/distributed/abort.hpp"
#include "wantrain/distributed/mpi_comm.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/train/run_plan.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/reporter.hpp"

namespace wt::train {
namespace {

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

}  // namespace

std::vector<int64_t> agree_after_writes(const distributed::World& world, const FitOptions& options,
                                        std::vector<int64_t> values, const std::string& what) {
  return world.max_over_ranks(
      std::move(values), what,
      options.checkpoint_timeout + std::max<std::chrono::milliseconds>(world.timeout(), std::chrono::seconds(60)),
      "checkpoint_timeout");
}

CheckpointSaver::CheckpointSaver(const distributed::World& world, const FitOptions& options, const RunPlan& plan,
                                 Engine& engine, const BatchSource& batches, RunRecord& record, double best_val_loss,
                                 int64_t last_saved)
    : world_(world),
      options_(options),
      plan_(plan),
      engine_(engine),
      batches_(batches),
      record_(record),
      last_saved_(last_saved) {
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
    // Ended by its watchdog after the checkpoint timeout.
    writers_comm_ = std::make_shared<distributed::MpiComm>(world, distributed::CommOptions{options.checkpoint_timeout});
    writer_options.agree = [comm = writers_comm_](bool ok) {
      auto failed = torch::tensor({int32_t(!ok)}, torch::kInt32);
      comm->all_reduce(failed, {distributed::ReduceOp::Max});
      return failed.item<int32_t>() == 0;
    };
  }
  // Without ZeRO the other ranks never touch the file system for checkpoints.
  if (world.is_root() || options.sharded_state) writer_ = std::make_unique<ckpt::CheckpointWriter>(writer_options);
}

CheckpointSaver::~CheckpointSaver() = default;

void CheckpointSaver::save(int64_t epoch, double val_loss) {
  if (engine_.steps_taken() == last_saved_) return;
  if (writer_) wait_for_writer(*writer_, options_);
  agree_after_writes(world_, options_, {0});
  if (writer_) {
    auto c = writer_->recycle();
    engine_.save_state(c);
    const auto position = batches_.position();
    c.state.epoch = epoch;
    c.state.sampler_epoch = position.epoch;
    c.state.sampler_consumed = position.consumed;
    c.state.val_loss = val_loss;
    c.world_size = plan_.data_parallel;  // the sampler's ranks (with --sp: its groups)
    c.shard_affinity = plan_.sampler.shard_affinity;
    c.run_config = options_.run_options;
    c.model_config = options_.model_config;
    c.objective_kind = engine_.objective().kind();
    c.objective = engine_.objective().checkpoint_state();
    writer_->submit(std::move(c));
  }
  last_saved_ = engine_.steps_taken();
  record_.write_started();  // a job killed from here on is recorded this far
}

bool CheckpointSaver::take_results() { return writer_ ? report(writer_->take_results(), options_) : true; }

bool CheckpointSaver::finish(bool ok) {
  if (writer_) {
    wait_for_writer(*writer_, options_);
    ok = report(writer_->drain(), options_) && ok;
  }
  return agree_after_writes(world_, options_, {int64_t(!ok)})[0] == 0;
}

bool CheckpointSaver::all_written() {
  bool written = true;
  if (writer_) {
    wait_for_writer(*writer_, options_);
    const auto results = writer_->drain();
    report(results, options_);
    for (const auto& r : results) written = written && r.ok();
  }
  return agree_after_writes(world_, options_, {int64_t(!written)})[0] == 0;
}

}  // namespace wt::train
