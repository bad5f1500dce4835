#include "wantrain/ckpt/writer.hpp"

#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>

#include "wantrain/ckpt/directory.hpp"
#include "wantrain/ckpt/shard_file.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/util/test_hooks.hpp"

namespace wt::ckpt {

CheckpointWriter::CheckpointWriter(WriterOptions options)
    : options_(std::move(options)), best_val_loss_(options_.best_val_loss), thread_([this] { run(); }) {}

CheckpointWriter::~CheckpointWriter() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void CheckpointWriter::submit(Checkpoint checkpoint) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return !pending_ && !writing_; });
  pending_ = std::move(checkpoint);
  changed_.notify_all();
}

Checkpoint CheckpointWriter::recycle() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(spare_, {});
}

std::vector<WriteResult> CheckpointWriter::take_results() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(results_, {});
}

std::vector<WriteResult> CheckpointWriter::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return !pending_ && !writing_; });
  return std::exchange(results_, {});
}

bool CheckpointWriter::wait_idle(std::chrono::milliseconds bound) {
  std::unique_lock<std::mutex> lock(mutex_);
  return changed_.wait_for(lock, bound, [this] { return !pending_ && !writing_; });
}

bool CheckpointWriter::busy() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return pending_ || writing_;
}

void CheckpointWriter::run() {
  // Training comes first where they share a core: this thread yields to it
  // (nice 10 applies to this thread only on Linux).
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10);
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return stop_ || pending_; });
    if (!pending_) return;  // stopped, nothing left
    Checkpoint checkpoint = std::move(*pending_);
    pending_.reset();
    writing_ = true;
    lock.unlock();
    WriteResult result = write_now(checkpoint, options_, best_val_loss_);
    lock.lock();
    spare_ = std::move(checkpoint);
    writing_ = false;
    results_.push_back(std::move(result));
    changed_.notify_all();
  }
}

namespace {

// The commit, after `temporary` became `path` (the moment the checkpoint
// exists, with its shards): `latest`, `best` and pruning.
void publish(const std::string& path, const std::string& name, const Checkpoint& checkpoint,
             const WriterOptions& options, double& best_val_loss) {
  sync_directory(options.directory);
  replace_link(options.directory, "latest", name);
  const double val = checkpoint.state.val_loss;
  if (options.keep_best && std::isfinite(val) && val < best_val_loss) {
    replace_link(options.directory, "best", name);
    best_val_loss = val;
  }
  prune(options.directory, options.keep);
}

// The writers' agreement on a sharded checkpoint: false when any rank
// failed, or when the agreement itself did (which must not end this thread).
bool agree(const WriterOptions& options, bool ok) {
  if (!options.agree) return false;  // a sharded checkpoint needs every rank's writer
  try {
    return options.agree(ok);
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

WriteResult CheckpointWriter::write_now(const Checkpoint& checkpoint, const WriterOptions& options,
                                        double& best_val_loss) {
  namespace fs = std::filesystem;
  const auto start = std::chrono::steady_clock::now();
  WriteResult result;
  result.step = checkpoint.state.step;
  const std::string name = checkpoint_file_name(checkpoint.state.step);
  const std::string path = (fs::path(options.directory) / name).string();
  const std::string temporary = path + ".tmp";
  const bool sharded = checkpoint.shard.ranks > 0;
  const bool root = options.rank == 0;
  const std::string shard =
      sharded ? (fs::path(options.directory) /
                 shard_file_name(checkpoint.state.step, checkpoint.shard.rank, checkpoint.shard.ranks))
                    .string()
              : std::string();
  auto remove_files = [&] {
    std::error_code ignored;
    // The main file's .tmp is rank 0's: another rank removing it could pull
    // it from under rank 0's write (its H5Fcreate then fails on a vanished file).
    if (root) fs::remove(temporary, ignored);
    if (sharded) {
      fs::remove(shard + ".tmp", ignored);
      fs::remove(shard, ignored);
    }
  };
  try {
    if (checkpoint.filled.valid()) checkpoint.filled.get();  // the snapshot's copies first (their error is ours)
    test_delay("checkpoint_write");
    if (sharded) {
      test_failure("shard_write");
      write_shard(shard + ".tmp", checkpoint.shard, checkpoint.state.step);
      sync_file(shard + ".tmp");
      std::error_code error;
      fs::rename(shard + ".tmp", shard, error);
      if (error) throw Error(fmt::format("checkpoint shard {}: cannot rename its .tmp: {}", shard, error.message()));
    }
    if (root) {
      write_checkpoint(temporary, checkpoint);
      sync_file(temporary);
    }
    if (sharded) sync_directory(options.directory);
  } catch (const std::exception& e) {
    remove_files();
    result.error = e.what();
  }
  // Sharded: the main file becomes the checkpoint only once every rank's shard is durable.
  if (sharded && !agree(options, result.ok())) {
    if (result.ok())
      result.error = fmt::format("checkpoint {}: not completed: another rank could not write its shard", path);
    remove_files();
  }
  if (result.ok() && root) {
    std::error_code error;
    fs::rename(temporary, path, error);
    if (error) {
      // Not a checkpoint: its shards (other ranks' too) go at the next start.
      remove_files();
      result.error = fmt::format("checkpoint {}: cannot rename {} to it: {}", path, temporary, error.message());
    } else {
      try {
        publish(path, name, checkpoint, options, best_val_loss);
        result.path = path;
      } catch (const std::exception& e) {
        result.error = e.what();  // complete, but `latest` may still name the one before
      }
    }
  }
  if (result.ok() && !root) result.path = shard;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace wt::ckpt
