#include "data/loader.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <numeric>

#include "util/error.hpp"

namespace wt::data {

Loader::Loader(Dataset dataset, DistributedSampler sampler, LoaderOptions options)
    : dataset_(std::move(dataset)), sampler_(std::move(sampler)), options_(options), delivered_(sampler_.state()) {
  if (options_.prefetch < 1) throw UsageError("option --prefetch: must be at least 1");
  thread_ = std::thread([this] { run(); });
}

Loader::~Loader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

Batch Loader::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return !ready_.empty() || error_; });
  if (ready_.empty()) std::rethrow_exception(error_);
  Batch batch = std::move(ready_.front());
  ready_.pop_front();
  delivered_ = batch.position;
  delivered_.consumed += sampler_.global_batch();
  if (delivered_.consumed / sampler_.global_batch() == sampler_.batches_per_epoch())
    delivered_ = {delivered_.epoch + 1, 0};
  lock.unlock();
  changed_.notify_all();  // room for the next prefetch
  return batch;
}

SamplerState Loader::state() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return delivered_;
}

void Loader::run() {
  try {
    SampleReader reader(dataset_);
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [this] { return stop_ || static_cast<int>(ready_.size()) < options_.prefetch; });
        if (stop_) return;
      }
      const SamplerState position = sampler_.state();
      const auto indices = sampler_.next();
      Batch batch = read_batch(reader, indices, position);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ready_.push_back(std::move(batch));
      }
      changed_.notify_all();
    }
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
    }
    changed_.notify_all();
  }
}

Batch Loader::read_batch(SampleReader& reader, const std::vector<int64_t>& indices, SamplerState position) {
  const SampleShape& s = dataset_.shape();
  const int64_t B = static_cast<int64_t>(indices.size());
  // Read in the stored dtypes, then convert the whole batch at once.
  at::Tensor latents = at::empty({B, s.channels, s.frames, s.height, s.width}, scalar_type(s.latents));  // [B,C,F,H,W]
  at::Tensor text = at::empty({B, s.text_len, s.text_dim}, scalar_type(s.text));                         // [B,L,D]
  at::Tensor text_len = at::empty({B}, at::kInt);                                                        // [B]
  // Sorted order: sequential reads within a shard.
  std::vector<int64_t> order(indices.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return indices[a] < indices[b]; });
  int32_t* lengths = text_len.data_ptr<int32_t>();
  for (const int64_t slot : order) reader.read(indices[slot], latents[slot], text[slot], lengths[slot]);
  return {latents.to(options_.dtype), text.to(options_.dtype), text_len, indices, position};
}

}  // namespace wt::data
