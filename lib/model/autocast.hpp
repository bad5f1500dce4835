// Mixed precision scopes. LibTorch's autocast state is thread-local; these
// set it for the current thread and restore what was there on exit.
#pragma once

#include <c10/core/ScalarType.h>

namespace at {
class Tensor;
}

namespace wt::model {

// The dtype autocast computes matrix products in on x's device right now;
// kFloat when autocast is off there.
c10::ScalarType autocast_dtype(const at::Tensor& x);

// Runs matrix products in `dtype` (kBFloat16 or kHalf) on CPU and CUDA, as
// torch.autocast does; kFloat leaves autocast off.
class AutocastScope {
 public:
  explicit AutocastScope(c10::ScalarType dtype);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool cpu_, gpu_;
  c10::ScalarType cpu_dtype_, gpu_dtype_;
};

// Turns autocast off inside: what Wan computes in fp32 (norms, modulation,
// time embedding, head) stays fp32 under a bf16 run.
class Fp32Scope {
 public:
  Fp32Scope();
  ~Fp32Scope();
  Fp32Scope(const Fp32Scope&) = delete;
  Fp32Scope& operator=(const Fp32Scope&) = delete;

 private:
  bool cpu_, gpu_;
};

}  // namespace wt::model
