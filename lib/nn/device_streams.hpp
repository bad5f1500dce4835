// A device's streams through c10's device-generic interface (c10::Stream,
// c10::Event, c10::StreamGuard), which LibTorch's CUDA backend implements
// once it is loaded (distributed/cuda_libraries.hpp): the code that queues
// copies beside the compute stream links no CUDA library of its own.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/VirtualGuardImpl.h>

namespace wt::nn {

// The stream the device's kernels are queued on now.
inline c10::Stream current_stream(const c10::Device& device) {
  return c10::impl::VirtualGuardImpl(device.type()).getStream(device);
}

// A stream from the device's pool, for copies beside the compute stream.
inline c10::Stream side_stream(const c10::Device& device) {
  return c10::impl::VirtualGuardImpl(device.type()).getStreamFromGlobalPool(device, /*isHighPriority=*/false);
}

}  // namespace wt::nn
