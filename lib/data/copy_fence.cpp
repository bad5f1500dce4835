#include "wantrain/data/copy_fence.hpp"

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

namespace wt::data {

// GPU only (never executed here: no CI machine has a GPU). c10's
// device-generic event, which LibTorch's CUDA backend implements once it is
// loaded (distributed/cuda_libraries.hpp).
struct CopyFence::Event {
  c10::Event event{c10::DeviceType::CUDA};
};

CopyFence::CopyFence() = default;
CopyFence::~CopyFence() = default;

void CopyFence::record(const c10::Device& device) {
  if (!device.is_cuda()) return;  // CPU copies are finished when they return
  std::lock_guard<std::mutex> lock(mutex_);
  if (!event_) event_ = std::make_unique<Event>();
  event_->event.record(c10::impl::VirtualGuardImpl(device.type()).getStream(device));
}

bool CopyFence::done() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !event_ || event_->event.query();
}

void CopyFence::wait() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (event_) event_->event.synchronize();
}

}  // namespace wt::data
