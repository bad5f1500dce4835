#include "wantrain/nn/activation_offload.hpp"

#include <torch/torch.h>

#include <optional>

#if WANTRAIN_TORCH_HAS_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace wt::nn {

struct ActivationOffload::Entry {
  at::Tensor host;    // the input in host memory
  at::Tensor device;  // on its way back (or back), until taken
  c10::Device where = c10::Device(c10::kCPU);
  bool taken = false;
#if WANTRAIN_TORCH_HAS_CUDA
  // GPU only (never executed here: no CI machine has a GPU).
  std::optional<c10::cuda::CUDAStream> stream;  // both copies, in order
  at::cuda::CUDAEvent back;                     // the copy back done
#endif
};

ActivationOffload::ActivationOffload() = default;
ActivationOffload::~ActivationOffload() = default;

void ActivationOffload::begin_forward() { entries_.clear(); }

int64_t ActivationOffload::keep(const at::Tensor& input) {
  torch::NoGradGuard no_grad;
  auto entry = std::make_unique<Entry>();
  entry->where = input.device();
#if WANTRAIN_TORCH_HAS_CUDA
  if (input.is_cuda()) {
    auto side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, input.device().index());
    at::cuda::CUDAEvent computed;
    computed.record(c10::cuda::getCurrentCUDAStream(input.device().index()));
    computed.block(side);
    entry->host = torch::empty(input.sizes(), input.options().device(torch::kCPU).pinned_memory(true));
    {
      c10::cuda::CUDAStreamGuard guard(side);
      entry->host.copy_(input, /*non_blocking=*/true);
    }
    input.record_stream(side.unwrap());  // its memory is not reused before the copy is done
    entry->stream = side;
    entries_.push_back(std::move(entry));
    return int64_t(entries_.size()) - 1;
  }
#endif
  entry->host = input.detach().clone();
  entries_.push_back(std::move(entry));
  return int64_t(entries_.size()) - 1;
}

void ActivationOffload::fetch(int64_t index) {
  if (index < 0 || index >= int64_t(entries_.size())) return;
  auto& e = *entries_[size_t(index)];
  if (e.taken || e.device.defined()) return;
  torch::NoGradGuard no_grad;
#if WANTRAIN_TORCH_HAS_CUDA
  if (e.stream) {
    at::cuda::CUDAEvent ready;  // the memory it goes into may have been freed by queued kernels
    ready.record(c10::cuda::getCurrentCUDAStream(e.where.index()));
    ready.block(*e.stream);
    c10::cuda::CUDAStreamGuard guard(*e.stream);
    e.device = e.host.to(e.where, /*non_blocking=*/true);
    e.back.record(*e.stream);
    return;
  }
#endif
  e.device = e.host.to(e.where, e.host.scalar_type(), false, /*copy=*/true);
}

at::Tensor ActivationOffload::bring_back(int64_t index) {
  TORCH_CHECK(index >= 0 && index < int64_t(entries_.size()) && !entries_[size_t(index)]->taken,
              "ActivationOffload: input ", index, " is not held (brought back twice, or after another forward)");
  auto& e = *entries_[size_t(index)];
  fetch(index);
#if WANTRAIN_TORCH_HAS_CUDA
  if (e.stream) {
    const auto compute = c10::cuda::getCurrentCUDAStream(e.where.index());
    e.back.block(compute);
    e.device.record_stream(compute.unwrap());
  }
#endif
  auto input = std::move(e.device);
  e.device = at::Tensor();
  e.host = at::Tensor();
  e.taken = true;
  fetch(index - 1);  // while this block is recomputed
  return input;
}

double ActivationOffload::host_bytes() const {
  double bytes = 0;
  for (const auto& e : entries_)
    if (e->host.defined()) bytes += double(e->host.nbytes());
  return bytes;
}

}  // namespace wt::nn
