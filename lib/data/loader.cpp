#include "wantrain/data/loader.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <numeric>

#include "wantrain/util/error.hpp"

namespace wt::data {

Loader::Loader(Dataset dataset, DistributedSampler sampler, LoaderOptions options)
    : dataset_(std::move(dataset)), sampler_(std::move(sampler)), options_(options), delivered_(sampler_.state()) {
  if (options_.prefetch < 1) throw SettingError("prefetch", "must be at least 1");
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
  at::init_num_threads();  // conversions use the process's intra-op threads
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

bool Loader::Buffer::free() const {
  return tensor.use_count() == 1 && tensor.storage().use_count() == 1 && (!fence || fence->done());
}

at::Tensor Loader::buffer(at::IntArrayRef sizes, at::ScalarType dtype, const std::shared_ptr<CopyFence>& fence) {
  const bool pin = options_.pin_memory && fence;  // staging never leaves the host
  for (auto& b : buffers_)
    if (b.tensor.scalar_type() == dtype && b.tensor.sizes() == sizes && b.pinned == pin && b.free()) {
      b.fence = fence;
      return b.tensor;
    }
  // Bounded: the batches in flight (queued, held by the trainer, a copy not
  // yet done) times the buffers a batch takes, plus staging, for each
  // bucket's shape: a batch of one bucket does not evict another's buffers,
  // so a mixed dataset allocates nothing once every shape has been seen.
  constexpr size_t kPerBatch = 8, kSlack = 8;
  const size_t shapes = dataset_.buckets().size();
  // y and clip_fea: two more batch tensors and their staging; vace_context one more.
  const auto& first = dataset_.buckets().front().shape;
  const size_t per_batch = kPerBatch + (first.has_condition() ? 4 : 0) + (first.has_vace() ? 2 : 0);
  if (buffers_.size() > (per_batch * (static_cast<size_t>(options_.prefetch) + 3) + kSlack) * shapes)
    buffers_.erase(std::remove_if(buffers_.begin(), buffers_.end(), [](const Buffer& b) { return b.free(); }),
                   buffers_.end());
  buffers_.push_back({at::empty(sizes, at::TensorOptions().dtype(dtype).pinned_memory(pin)), fence, pin});
  allocations_.fetch_add(1, std::memory_order_relaxed);
  return buffers_.back().tensor;
}

Batch Loader::read_batch(SampleReader& reader, const std::vector<int64_t>& indices, SamplerState position) {
  const SampleShape& s = dataset_.shape_of(indices.front());  // the sampler's batches are of one bucket
  const int64_t B = static_cast<int64_t>(indices.size());
  auto fence = std::make_shared<CopyFence>();
  at::Tensor latents = buffer({B, s.channels, s.frames, s.height, s.width}, options_.dtype, fence);  // [B,C,F,H,W]
  at::Tensor text = buffer({B, s.text_len, s.text_dim}, options_.dtype, fence);                      // [B,L,D]
  at::Tensor text_len = at::empty({B}, at::kInt);                                                    // [B]
  // The condition (where the dataset has one) goes as the latents and text go: y is stored as
  // the latents are, clip_fea as the text is.
  const bool with_y = s.has_condition(), with_clip = s.has_condition() && s.clip_tokens > 0;
  at::Tensor y = with_y ? buffer({B, s.condition_channels, s.frames, s.height, s.width}, options_.dtype, fence)
                        : at::Tensor();  // [B,Cy,F,H,W]
  at::Tensor clip =
      with_clip ? buffer({B, s.clip_tokens, s.clip_dim}, options_.dtype, fence) : at::Tensor();  // [B,T,D]
  // A VACE model's context, stored as the latents are.
  at::Tensor vace = s.has_vace() ? buffer({B, s.vace_channels, s.vace_references + s.frames, s.height, s.width},
                                          options_.dtype, fence)
                                 : at::Tensor();  // [B,Cv,R+F,H,W]
  const bool convert_latents = scalar_type(s.latents) != options_.dtype;
  const bool convert_text = scalar_type(s.text) != options_.dtype;
  // Sorted order: sequential reads within a shard.
  std::vector<int64_t> order(indices.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return indices[a] < indices[b]; });
  int32_t* lengths = text_len.data_ptr<int32_t>();
  // Samples stored in another dtype are read as stored into a staging
  // buffer of the batch's shape, then converted in one call (what that
  // costs against the alternatives: docs/performance.md, "Loading").
  const auto staged = [&](const at::Tensor& to, bool convert, Stored stored) {
    return to.defined() && convert ? buffer(to.sizes(), scalar_type(stored), nullptr) : to;
  };
  const at::Tensor l = staged(latents, convert_latents, s.latents), t = staged(text, convert_text, s.text);
  const at::Tensor ys = staged(y, convert_latents, s.latents), cs = staged(clip, convert_text, s.text);
  const at::Tensor vs = staged(vace, convert_latents, s.latents);
  for (const int64_t slot : order) {
    SampleCondition condition;
    if (with_y) condition.y = ys[slot];
    if (with_clip) condition.clip_fea = cs[slot];
    if (vace.defined()) condition.vace_context = vs[slot];
    reader.read(indices[slot], l[slot], t[slot], lengths[slot], with_y || vace.defined() ? &condition : nullptr);
  }
  if (convert_latents) {
    latents.copy_(l);
    if (with_y) y.copy_(ys);
    if (vace.defined()) vace.copy_(vs);
  }
  if (convert_text) {
    text.copy_(t);
    if (with_clip) clip.copy_(cs);
  }
  Batch batch{latents, text, text_len, y, clip, indices, position, batches_read_++, {}, fence, vace};
  if (options_.finish)
    options_.finish(batch, [&](at::IntArrayRef sizes, at::ScalarType dtype) { return buffer(sizes, dtype, fence); });
  return batch;
}

}  // namespace wt::data
