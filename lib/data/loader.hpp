// Loader: a background thread that reads and collates batches ahead of the
// trainer.
//
// Contract: the Loader's thread is the only one that reads the dataset; it
// reads each batch's samples in sorted order (sequential within a shard),
// keeps the shards open, and converts to the training dtype, into buffers it
// recycles once the trainer has dropped a batch and its copies to the device
// have finished (the batch's CopyFence). For a GPU the buffers are pinned,
// so those copies run asynchronously. Up to `prefetch` batches wait ready;
// an optional `finish` adds work that depends only on the batch (a
// trainer's noise) on the same thread. An error in the thread (an unreadable
// sample) is rethrown by next() in the caller's thread as wt::Error naming
// the shard and sample. The destructor stops and joins the thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "wantrain/data/copy_fence.hpp"
#include "wantrain/data/dataset.hpp"
#include "wantrain/data/sampler.hpp"

namespace wt::data {

struct Batch {
  at::Tensor latents;   // [B, C, F, H, W] training dtype
  at::Tensor text_emb;  // [B, L, D] training dtype
  at::Tensor text_len;  // [B] int32
  // The image-to-video condition, where the dataset has one (undefined
  // otherwise): y as latents, clip_fea as text_emb are converted.
  at::Tensor y;                  // [B, Cy, F, H, W] training dtype
  at::Tensor clip_fea;           // [B, T, D] training dtype
  std::vector<int64_t> indices;  // global sample indices, in batch order
  SamplerState position;         // where this batch starts (epoch, samples consumed before it)
  int64_t number = 0;            // 0 for the first batch this Loader read, then 1, 2, ...
  // Tensors added by LoaderOptions::finish, in the Loader's buffers too.
  std::map<std::string, at::Tensor> extra;
  // Record it after copying the batch's tensors to a device: until it is
  // done the Loader does not refill their buffers.
  std::shared_ptr<CopyFence> copied;
  // A VACE model's context, where the dataset has one (undefined
  // otherwise), converted as latents are.
  at::Tensor vace_context;  // [B, Cv, R + F, H, W] training dtype
};

struct LoaderOptions {
  LoaderOptions(int prefetch = 2, at::ScalarType dtype = at::kFloat) : prefetch(prefetch), dtype(dtype) {}
  int prefetch;
  at::ScalarType dtype;
  // Page-locked buffers, for batches that go to a GPU (needs LibTorch with
  // CUDA).
  bool pin_memory = false;
  // Called on the loader's thread with each batch once it is read; may add
  // tensors to batch.extra, taking them from `allocate` (the recycled,
  // pinned buffers). Its exceptions reach next() as a read error's do.
  using Allocate = std::function<at::Tensor(at::IntArrayRef sizes, at::ScalarType dtype)>;
  std::function<void(Batch&, const Allocate& allocate)> finish;
};

class Loader {
 public:
  // Starts reading at the sampler's current state.
  Loader(Dataset dataset, DistributedSampler sampler, LoaderOptions options = {});
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // The next batch; blocks until it is read. Rethrows the reader's error.
  Batch next();

  // The sampler position after the last batch next() returned: what a
  // checkpoint stores to resume exactly.
  SamplerState state() const;

  const Dataset& dataset() const { return dataset_; }
  const DistributedSampler& sampler() const { return sampler_; }
  // Buffers allocated so far (staging and batch tensors): steady-state
  // loading adds none, also when batches alternate between shapes.
  int64_t allocations() const { return allocations_.load(std::memory_order_relaxed); }

 private:
  void run();
  Batch read_batch(SampleReader& reader, const std::vector<int64_t>& indices, SamplerState position);
  // A tensor of this shape and dtype from the recycled buffers, or a new one;
  // `fence` (null for staging) is the batch's that will hold it.
  at::Tensor buffer(at::IntArrayRef sizes, at::ScalarType dtype, const std::shared_ptr<CopyFence>& fence);

  const Dataset dataset_;
  DistributedSampler sampler_;  // advanced by the thread only
  const LoaderOptions options_;
  SamplerState delivered_;
  // The loader thread's buffers (staging and batch tensors). A buffer is
  // reused once nothing but this list refers to it and the copies of the
  // batch that held it are done, so steady-state loading allocates (and
  // page-faults, or pins) nothing.
  struct Buffer {
    at::Tensor tensor;
    std::shared_ptr<CopyFence> fence;  // of the batch it went into last
    bool pinned = false;
    bool free() const;
  };
  std::vector<Buffer> buffers_;
  int64_t batches_read_ = 0;
  std::atomic<int64_t> allocations_{0};

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Batch> ready_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace wt::data
