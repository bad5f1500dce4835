#include "wantrain/nn/activation_offload.hpp"

#include <torch/torch.h>

#include <optional>

#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>

#include "wantrain/nn/device_streams.hpp"

namespace wt::nn {

struct ActivationOffload::Entry {
  at::Tensor host;    // the input in host memory
  at::Tensor device;  // on its way back (or back), until taken
  c10::Device where = c10::Device(c10::kCPU);
  bool taken = false;
  // GPU only (never executed here: no CI machine has a GPU).
  std::optional<c10::Stream> stream;  // both copies, in order
  std::optional<c10::Event> back;     // the copy back done (made with it: CUDA must be loaded)
};

ActivationOffload::ActivationOffload() = default;
ActivationOffload::~ActivationOffload() = default;

void ActivationOffload::begin_forward() { entries_.clear(); }

int64_t ActivationOffload::keep(const at::Tensor& input) {
  torch::NoGradGuard no_grad;
  auto entry = std::make_unique<Entry>();
  entry->where = input.device();
  if (input.is_cuda()) {
    const auto side = side_stream(input.device());
    c10::Event computed(c10::DeviceType::CUDA);
    computed.record(current_stream(input.device()));
    computed.block(side);
    entry->host = torch::empty(input.sizes(), input.options().device(torch::kCPU).pinned_memory(true));
    {
      c10::StreamGuard guard(side);
      entry->host.copy_(input, /*non_blocking=*/true);
    }
    input.record_stream(side);  // its memory is not reused before the copy is done
    entry->stream = side;
    entries_.push_back(std::move(entry));
    return int64_t(entries_.size()) - 1;
  }
  entry->host = input.detach().clone();
  entries_.push_back(std::move(entry));
  return int64_t(entries_.size()) - 1;
}

void ActivationOffload::fetch(int64_t index) {
  if (index < 0 || index >= int64_t(entries_.size())) return;
  auto& e = *entries_[size_t(index)];
  if (e.taken || e.device.defined()) return;
  torch::NoGradGuard no_grad;
  if (e.stream) {
    c10::Event ready(c10::DeviceType::CUDA);  // the memory it goes into may have been freed by queued kernels
    ready.record(current_stream(e.where));
    ready.block(*e.stream);
    c10::StreamGuard guard(*e.stream);
    e.device = e.host.to(e.where, /*non_blocking=*/true);
    e.back.emplace(c10::DeviceType::CUDA);
    e.back->record(*e.stream);
    return;
  }
  e.device = e.host.to(e.where, e.host.scalar_type(), false, /*copy=*/true);
}

at::Tensor ActivationOffload::bring_back(int64_t index) {
  TORCH_CHECK(index >= 0 && index < int64_t(entries_.size()) && !entries_[size_t(index)]->taken,
              "ActivationOffload: input ", index, " is not held (brought back twice, or after another forward)");
  auto& e = *entries_[size_t(index)];
  fetch(index);
  if (e.stream) {
    const auto compute = current_stream(e.where);
    e.back->block(compute);
    e.device.record_stream(compute);
  }
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
