#include "wantrain/ckpt/writer.hpp"

#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>

#include "wantrain/ckpt/directory.hpp"
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

WriteResult CheckpointWriter::write_now(const Checkpoint& checkpoint, const WriterOptions& options,
                                        double& best_val_loss) {
  namespace fs = std::filesystem;
  const auto start = std::chrono::steady_clock::now();
  WriteResult result;
  result.step = checkpoint.state.step;
  const std::string name = checkpoint_file_name(checkpoint.state.step);
  const std::string path = (fs::path(options.directory) / name).string();
  const std::string temporary = path + ".tmp";
  try {
    test_delay("checkpoint_write");
    write_checkpoint(temporary, checkpoint);
    sync_file(temporary);
    std::error_code error;
    fs::rename(temporary, path, error);
    if (error) throw Error(fmt::format("checkpoint {}: cannot rename {} to it: {}", path, temporary, error.message()));
    sync_directory(options.directory);
    replace_link(options.directory, "latest", name);
    const double val = checkpoint.state.val_loss;
    if (options.keep_best && std::isfinite(val) && val < best_val_loss) {
      replace_link(options.directory, "best", name);
      best_val_loss = val;
    }
    prune(options.directory, options.keep);
    result.path = path;
  } catch (const std::exception& e) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    result.error = e.what();
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace wt::ckpt
