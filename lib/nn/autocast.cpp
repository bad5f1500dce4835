#include "wantrain/nn/autocast.hpp"

#include <ATen/autocast_mode.h>
#include <ATen/core/Tensor.h>

namespace wt::nn {

// The only place that names LibTorch's autocast calls: the device-typed API
// of LibTorch >= 2.4 (cmake/WantrainTorch.cmake requires it).
namespace {

bool is_enabled(c10::DeviceType device) { return at::autocast::is_autocast_enabled(device); }
void set_enabled(c10::DeviceType device, bool on) { at::autocast::set_autocast_enabled(device, on); }
c10::ScalarType get_dtype(c10::DeviceType device) { return at::autocast::get_autocast_dtype(device); }
void set_dtype(c10::DeviceType device, c10::ScalarType dtype) { at::autocast::set_autocast_dtype(device, dtype); }

// wantrain runs on CPU or CUDA; any other device type is held as CPU's.
c10::DeviceType autocast_device(c10::DeviceType device) {
  return device == c10::DeviceType::CUDA ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
}

}  // namespace

c10::ScalarType autocast_dtype(c10::DeviceType device) {
  device = autocast_device(device);
  return is_enabled(device) ? get_dtype(device) : at::kFloat;
}

c10::ScalarType autocast_dtype(const at::Tensor& x) { return autocast_dtype(x.device().type()); }

AutocastScope::AutocastScope(c10::ScalarType dtype, c10::DeviceType device)
    : device_(autocast_device(device)), was_enabled_(is_enabled(device_)), was_dtype_(get_dtype(device_)) {
  const bool on = dtype != c10::ScalarType::Float;
  if (on) set_dtype(device_, dtype);
  set_enabled(device_, on);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  // As torch.autocast's __exit__: drop the cached low-precision weight copies
  // when the outermost scope ends.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_enabled(device_, was_enabled_);
  set_dtype(device_, was_dtype_);
}

Fp32Scope::Fp32Scope() : cpu_(is_enabled(c10::DeviceType::CPU)), cuda_(is_enabled(c10::DeviceType::CUDA)) {
  if (cpu_) set_enabled(c10::DeviceType::CPU, false);
  if (cuda_) set_enabled(c10::DeviceType::CUDA, false);
}

Fp32Scope::~Fp32Scope() {
  if (cpu_) set_enabled(c10::DeviceType::CPU, true);
  if (cuda_) set_enabled(c10::DeviceType::CUDA, true);
}

}  // namespace wt::nn
