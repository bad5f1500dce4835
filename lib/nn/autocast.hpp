// Mixed precision scopes. LibTorch's autocast state is thread-local and kept
// per device type; these set it for the current thread and restore what was
// there on exit.
//
// Every call into LibTorch's autocast API is in autocast.cpp: the
// device-typed calls of LibTorch >= 2.4 (set_autocast_enabled(device_type, ...)).
#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

namespace at {
class Tensor;
}

namespace wt::nn {

// The dtype autocast computes matrix products in on x's device right now;
// kFloat when autocast is off there.
c10::ScalarType autocast_dtype(const at::Tensor& x);
// The same for a device type (CPU or CUDA; any other counts as CPU).
c10::ScalarType autocast_dtype(c10::DeviceType device);

// Runs matrix products on `device` in `dtype` (kBFloat16 or kHalf), as
// torch.autocast(device_type) does; kFloat turns autocast off there. Only
// `device`'s state is touched: a GPU run never switches CPU autocast on.
class AutocastScope {
 public:
  AutocastScope(c10::ScalarType dtype, c10::DeviceType device);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType device_;
  bool was_enabled_;
  c10::ScalarType was_dtype_;
};

// Turns autocast off inside, on the devices where it is on: what a model
// computes in fp32 (Wan: norms, modulation, time embedding, head) stays fp32
// under a bf16 run. A device whose autocast is off is not touched.
class Fp32Scope {
 public:
  Fp32Scope();
  ~Fp32Scope();
  Fp32Scope(const Fp32Scope&) = delete;
  Fp32Scope& operator=(const Fp32Scope&) = delete;

 private:
  bool cpu_, cuda_;  // what was switched off here, to switch back on
};

}  // namespace wt::nn
