// CopyFence: whether the device copies out of a batch's host buffers have
// finished, so that the Loader may fill those buffers again.
//
// Copies from pinned host memory are queued (non_blocking) and return at
// once; refilling the buffer before the device has read it would change the
// batch under the copy. Whoever copies a batch to a device records the
// fence after its copies (train::Batch::slice does); the Loader recycles a
// buffer only when nothing refers to it and its fence is done. On the CPU a
// copy is finished when it returns, and a recorded fence is done at once:
// the same code path, with nothing to wait for.
#pragma once

#include <c10/core/Device.h>

#include <memory>
#include <mutex>

namespace wt::data {

class CopyFence {
 public:
  CopyFence();
  ~CopyFence();
  CopyFence(const CopyFence&) = delete;
  CopyFence& operator=(const CopyFence&) = delete;

  // Marks the copies queued so far on `device`'s current stream: a CUDA
  // event there, nothing on the CPU. A later record supersedes an earlier
  // one (copies on one stream finish in order).
  void record(const c10::Device& device);
  // Whether every recorded copy has finished; never blocks.
  bool done() const;
  // Blocks until it has.
  void wait() const;

 private:
  struct Event;  // the CUDA event, in builds whose LibTorch has CUDA
  mutable std::mutex mutex_;
  std::unique_ptr<Event> event_;
};

}  // namespace wt::data
