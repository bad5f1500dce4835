// Loader: a background thread that reads and collates batches ahead of the
// trainer.
//
// Contract: the Loader's thread is the only one that reads the dataset; it
// reads each batch's samples in sorted order (sequential within a shard),
// keeps the shards open, and converts to the training dtype, into buffers it
// recycles once the trainer has dropped a batch. Up to
// `prefetch` batches wait ready. An error in the thread (an unreadable
// sample) is rethrown by next() in the caller's thread as wt::Error naming
// the shard and sample. The destructor stops and joins the thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "wantrain/data/dataset.hpp"
#include "wantrain/data/sampler.hpp"

namespace wt::data {

struct Batch {
  at::Tensor latents;            // [B, C, F, H, W] training dtype
  at::Tensor text_emb;           // [B, L, D] training dtype
  at::Tensor text_len;           // [B] int32
  std::vector<int64_t> indices;  // global sample indices, in batch order
  SamplerState position;         // where this batch starts (epoch, samples consumed before it)
};

struct LoaderOptions {
  int prefetch = 2;
  at::ScalarType dtype = at::kFloat;
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

 private:
  void run();
  Batch read_batch(SampleReader& reader, const std::vector<int64_t>& indices, SamplerState position);
  // A tensor of this shape and dtype from the recycled buffers, or a new one.
  at::Tensor buffer(at::IntArrayRef sizes, at::ScalarType dtype);

  const Dataset dataset_;
  DistributedSampler sampler_;  // advanced by the thread only
  const LoaderOptions options_;
  SamplerState delivered_;
  // The loader thread's buffers (staging and batch tensors). A buffer is
  // reused once nothing but this list refers to it, so steady-state loading
  // allocates (and page-faults) nothing.
  std::vector<at::Tensor> buffers_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Batch> ready_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace wt::data
