#include "wantrain/model/autocast.hpp"

#include <ATen/autocast_mode.h>
#include <ATen/core/Tensor.h>

namespace wt::model {

c10::ScalarType autocast_dtype(const at::Tensor& x) {
  if (x.is_cuda()) return at::autocast::is_enabled() ? at::autocast::get_autocast_gpu_dtype() : at::kFloat;
  return at::autocast::is_cpu_enabled() ? at::autocast::get_autocast_cpu_dtype() : at::kFloat;
}

AutocastScope::AutocastScope(c10::ScalarType dtype)
    : cpu_(at::autocast::is_cpu_enabled()),
      gpu_(at::autocast::is_enabled()),
      cpu_dtype_(at::autocast::get_autocast_cpu_dtype()),
      gpu_dtype_(at::autocast::get_autocast_gpu_dtype()) {
  const bool on = dtype != c10::ScalarType::Float;
  if (on) {
    at::autocast::set_autocast_cpu_dtype(dtype);
    at::autocast::set_autocast_gpu_dtype(dtype);
  }
  at::autocast::set_cpu_enabled(on);
  at::autocast::set_enabled(on);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  // As torch.autocast's __exit__: drop the cached low-precision weight copies
  // when the outermost scope ends.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_cpu_enabled(cpu_);
  at::autocast::set_enabled(gpu_);
  at::autocast::set_autocast_cpu_dtype(cpu_dtype_);
  at::autocast::set_autocast_gpu_dtype(gpu_dtype_);
}

Fp32Scope::Fp32Scope() : cpu_(at::autocast::is_cpu_enabled()), gpu_(at::autocast::is_enabled()) {
  at::autocast::set_cpu_enabled(false);
  at::autocast::set_enabled(false);
}

Fp32Scope::~Fp32Scope() {
  at::autocast::set_cpu_enabled(cpu_);
  at::autocast::set_enabled(gpu_);
}

}  // namespace wt::model
