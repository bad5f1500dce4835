#include "wantrain/nn/block_swap.hpp"

#include <torch/torch.h>

#include <chrono>
#include <optional>
#include <string>

#include "wantrain/nn/device_streams.hpp"
#include "wantrain/util/seconds.hpp"

#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>

namespace wt::nn {

struct BlockSwap::Block {
  std::vector<std::string> names;      // the model's names of
  std::vector<at::Tensor> parameters;  // the model's, empty while the block is not on the device
  std::vector<at::Tensor> host;        // their values, in host memory
  std::vector<at::Tensor> copies;      // the device copies queued, until waited for
  bool present = false, queued = false;
  // GPU only (never executed here: no CI machine has a GPU). Made at the
  // first copy: a CUDA event cannot be made where CUDA is not loaded.
  std::optional<c10::Event> copied;
};

BlockSwap::BlockSwap(torch::nn::Module& model, int64_t count, const c10::Device& device, int64_t side_count)
    : device_(device) {
  torch::NoGradGuard no_grad;
  for (int64_t i = 0; i < count; ++i) blocks_.push_back(std::make_unique<Block>());
  for (int64_t i = 0; i < side_count; ++i) sides_.push_back(std::make_unique<Block>());
  // The frozen parameters, and the buffers beside them (an fp8 weight's scales).
  auto tensors = model.named_parameters(/*recurse=*/true);
  for (const auto& item : model.named_buffers(/*recurse=*/true)) tensors.insert(item.key(), item.value());
  const std::string side_prefix = "vace_blocks.";
  for (const auto& item : tensors) {
    const std::string& name = item.key();
    Block* into = nullptr;
    if (name.compare(0, side_prefix.size(), side_prefix) == 0) {
      const int64_t side = std::stoll(name.substr(side_prefix.size()));
      if (side < side_count) into = sides_[size_t(side)].get();
    } else {
      const std::string unit = parameter_unit(name);
      if (root_unit(unit)) continue;
      const int64_t block = std::stoll(unit.substr(unit.find('.') + 1));
      total_blocks_ = std::max(total_blocks_, block + 1);
      if (block < count) into = blocks_[size_t(block)].get();
    }
    auto parameter = item.value();
    if (!into || parameter.requires_grad() || parameter.numel() == 0) continue;
    // A copy (on the CPU, to() would hand back the parameter itself).
    auto host = parameter.detach().to(torch::kCPU, parameter.scalar_type(), false, /*copy=*/true);
    if (device.is_cuda()) host = host.pin_memory();  // an asynchronous copy needs page-locked memory
    host_bytes_ += double(host.nbytes());
    into->names.push_back(name);
    into->parameters.push_back(parameter);
    into->host.push_back(host);
    parameter.set_data(torch::empty({0}, parameter.options()));
  }
}

BlockSwap::~BlockSwap() = default;

std::vector<std::pair<std::string, at::Tensor>> BlockSwap::host_tensors() const {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto* list : {&blocks_, &sides_})
    for (const auto& block : *list)
      for (size_t i = 0; i < block->names.size(); ++i) tensors.emplace_back(block->names[i], block->host[i]);
  return tensors;
}

double BlockSwap::take_wait_seconds() {
  const double seconds = wait_seconds_;
  wait_seconds_ = 0;
  return seconds;
}

BlockSwap::Block* BlockSwap::block_at(int64_t block) const {
  return block < 0 || block >= count() ? nullptr : blocks_[size_t(block)].get();
}

void BlockSwap::fetch(int64_t block) {
  if (Block* b = block_at(block)) fetch(*b);
}
void BlockSwap::wait(int64_t block) {
  if (Block* b = block_at(block)) wait(*b);
}
void BlockSwap::drop(int64_t block) {
  if (Block* b = block_at(block)) drop(*b);
}

void BlockSwap::fetch(Block& b) {
  if (b.present || b.queued) return;
  const auto start = std::chrono::steady_clock::now();
  torch::NoGradGuard no_grad;
  if (device_.is_cuda()) {
    const auto side = side_stream(device_);
    // The side stream first waits for the compute stream: the memory the
    // copies go into may have been freed by kernels queued there.
    c10::Event ready(c10::DeviceType::CUDA);
    ready.record(current_stream(device_));
    ready.block(side);
    c10::StreamGuard guard(side);
    for (const auto& host : b.host) b.copies.push_back(host.to(device_, /*non_blocking=*/true));
    if (!b.copied) b.copied.emplace(c10::DeviceType::CUDA);
    b.copied->record(side);
    b.queued = true;
    wait_seconds_ += seconds_since(start);
    return;
  }
  for (const auto& host : b.host) b.copies.push_back(host.to(device_, host.scalar_type(), false, /*copy=*/true));
  b.queued = true;
  wait_seconds_ += seconds_since(start);
}

void BlockSwap::wait(Block& b) {
  if (b.present) return;
  fetch(b);
  const auto start = std::chrono::steady_clock::now();
  if (device_.is_cuda()) {
    const auto compute = current_stream(device_);
    b.copied->block(compute);
    for (auto& copy : b.copies) copy.record_stream(compute);
  }
  for (size_t k = 0; k < b.parameters.size(); ++k) b.parameters[k].set_data(b.copies[k]);
  b.copies.clear();
  b.queued = false;
  b.present = true;
  wait_seconds_ += seconds_since(start);
}

void BlockSwap::drop(Block& b) {
  if (b.queued) wait(b);  // a queued copy's memory is freed only once it is done
  for (auto& parameter : b.parameters) parameter.set_data(torch::empty({0}, parameter.options()));
  b.present = false;
}

void BlockSwap::begin_forward() {
  // What the last backward left (the first block, and a side block whose
  // input had no gradient: nothing marks their end).
  for (int64_t i = 0; i < count(); ++i) drop(i);
  for (auto& side : sides_) drop(*side);
  fetch(0);
}

void BlockSwap::before_block(int64_t block) {
  wait(block);

  fetch(block + 1);  // while this block computes
}

at::Tensor BlockSwap::after_block(int64_t block, const at::Tensor& output) {
  const bool backward = at::GradMode::is_enabled() && output.requires_grad();
  if (backward) {
    // Runs when the block's output gradient is complete: the next block's
    // backward is done (its input is this output) and this block's comes,
    // its recomputation under checkpointing included.
    at::Tensor hooked = output;
    hooked.register_hook([this, block](const at::Tensor&) {
      drop(block + 1);
      wait(block);
      fetch(block - 1);
    });
  }
  // The last block's backward comes first: it stays.
  if (!(backward && block + 1 == total_blocks_)) drop(block);
  return output;
}

// A side block is fetched when it is needed (it runs between two blocks of
// the chain, whose prefetch goes on), and dropped after its forward; in
// backward its output's gradient brings it back, before its own backward
// (a checkpointed one's recomputation included), and its input's drops it.
at::Tensor BlockSwap::before_side(int64_t side, const at::Tensor& input) {
  if (side < 0 || side >= side_count()) return input;
  Block& b = *sides_[size_t(side)];
  wait(b);
  if (!at::GradMode::is_enabled() || !input.requires_grad()) return input;
  at::Tensor hooked = input;
  hooked.register_hook([this, &b](const at::Tensor&) { drop(b); });
  return hooked;
}

at::Tensor BlockSwap::after_side(int64_t side, const at::Tensor& output) {
  if (side < 0 || side >= side_count()) return output;
  Block& b = *sides_[size_t(side)];
  if (at::GradMode::is_enabled() && output.requires_grad()) {
    at::Tensor hooked = output;
    hooked.register_hook([this, &b](const at::Tensor&) { wait(b); });
  }
  drop(b);
  return output;
}

}  // namespace wt::nn
