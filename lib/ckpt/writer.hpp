// CheckpointWriter: rank 0's background thread that makes checkpoints
// durable while training goes on.
//
// submit() takes a snapshot in CPU memory (its copies possibly still
// running: the thread waits for Checkpoint::filled first) and returns at
// once (after waiting for a previous write still in flight: at most one
// snapshot waits or is written; recycle() hands its buffers back afterwards,
// so two sets of buffers exist at most). The thread writes step-N.h5.tmp, fsyncs it, renames it
// to step-N.h5, points `latest` at it (and `best`, with keep_best, when its
// validation loss is the lowest so far), then prunes beyond `keep`. A failed
// write removes its .tmp and leaves every earlier file and link as it was;
// its message is kept for the training thread to take.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "wantrain/ckpt/checkpoint.hpp"

namespace wt::ckpt {

struct WriterOptions {
  std::string directory;
  int keep = 3;
  bool keep_best = false;
  // The best validation loss among checkpoints already in the directory
  // (from a resumed run's `best`).
  double best_val_loss = std::numeric_limits<double>::infinity();
  // ZeRO-1 (a Checkpoint with shard.ranks > 0): every rank has a writer and
  // writes its shard file; rank 0 also writes the main file as .tmp and
  // commits it (rename, links, pruning) only when `agree`, called once per
  // checkpoint on every rank's writer thread with this rank's success (a
  // collective), says that every shard is durable. A failure anywhere
  // removes that checkpoint's files on every rank.
  int rank = 0;
  std::function<bool(bool ok)> agree;
};

struct WriteResult {
  int64_t step = 0;
  std::string path;   // the complete checkpoint, when ok
  std::string error;  // one line, when not
  double seconds = 0;
  bool ok() const { return error.empty(); }
};

class CheckpointWriter {
 public:
  explicit CheckpointWriter(WriterOptions options);
  ~CheckpointWriter();  // finishes the write in flight
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  void submit(Checkpoint checkpoint);
  // The buffers of the last checkpoint written, for the next snapshot to
  // reuse (an empty Checkpoint when there are none).
  Checkpoint recycle();
  // Results of writes finished since the last call (non-blocking).
  std::vector<WriteResult> take_results();
  // Waits for the write in flight, then returns every untaken result.
  std::vector<WriteResult> drain();
  // Waits at most `bound` for the writer to have nothing in flight; false
  // when it still has (a write stalled on a slow or hung file system).
  bool wait_idle(std::chrono::milliseconds bound);
  bool busy() const;

  // The same steps, on the calling thread: what the background thread does.
  static WriteResult write_now(const Checkpoint& checkpoint, const WriterOptions& options, double& best_val_loss);

 private:
  void run();

  WriterOptions options_;
  double best_val_loss_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<Checkpoint> pending_;
  Checkpoint spare_;
  bool writing_ = false, stop_ = false;
  std::vector<WriteResult> results_;
  std::thread thread_;
};

}  // namespace wt::ckpt
