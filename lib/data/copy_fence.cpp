#include "wantrain/data/copy_fence.hpp"

#include "wantrain/config.hpp"

#if WANTRAIN_TORCH_HAS_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace wt::data {

#if WANTRAIN_TORCH_HAS_CUDA
// GPU only (never executed here: no CI machine has a GPU).
struct CopyFence::Event {
  at::cuda::CUDAEvent event;
};
#else
struct CopyFence::Event {};
#endif

CopyFence::CopyFence() = default;
CopyFence::~CopyFence() = default;

void CopyFence::record(const c10::Device& device) {
  if (!device.is_cuda()) return;  // CPU copies are finished when they return
#if WANTRAIN_TORCH_HAS_CUDA
  std::lock_guard<std::mutex> lock(mutex_);
  if (!event_) event_ = std::make_unique<Event>();
  event_->event.record(c10::cuda::getCurrentCUDAStream(device.index()));
#endif
}

bool CopyFence::done() const {
#if WANTRAIN_TORCH_HAS_CUDA
  std::lock_guard<std::mutex> lock(mutex_);
  return !event_ || event_->event.query();
#else
  return true;
#endif
}

void CopyFence::wait() const {
#if WANTRAIN_TORCH_HAS_CUDA
  std::lock_guard<std::mutex> lock(mutex_);
  if (event_) event_->event.synchronize();
#endif
}

}  // namespace wt::data
