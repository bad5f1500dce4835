#include "wantrain/wan/sample/sharded_blocks.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>

#include "wantrain/util/error.hpp"

namespace wt::wan {

ShardedBlocks::ShardedBlocks(distributed::Comm& comm, WanModelImpl& model, const TensorSource& source,
                             const c10::Device& device)
    : comm_(comm) {
  torch::NoGradGuard no_grad;
  const int64_t ranks = comm.size(), rank = comm.rank();
  // Each block's parameters by dtype, in the model's order; their memory
  // (drawn empty, never written) goes before anything is read.
  std::vector<std::pair<std::string, at::Tensor>> root;
  blocks_.resize(model.blocks->size());
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    const std::string& name = item.key();
    const std::string unit = zero_unit(model.config(), name);  // a VACE block's: its base block's
    if (nn::root_unit(unit)) {
      root.emplace_back(name, item.value());
      continue;
    }
    const int64_t block = std::stoll(unit.substr(unit.find('.') + 1));
    auto& groups = blocks_.at(size_t(block));
    auto parameter = item.value();
    auto group = std::find_if(groups.begin(), groups.end(), [&](const Group& g) {
      return g.parameters.front().scalar_type() == parameter.scalar_type();
    });
    if (group == groups.end()) group = groups.insert(groups.end(), Group{});
    group->names.push_back(name);
    group->parameters.push_back(parameter);
    group->shapes.push_back(parameter.sizes().vec());
    parameter.set_data(torch::empty({0}, parameter.options()));
  }
  model.to(device);  // the root; the blocks' parameters are empty
  for (auto& [name, parameter] : root) {
    parameter.copy_(source.read(name));
    held_bytes_ += parameter.numel() * int64_t(parameter.element_size());
  }
  // Block by block, each tensor read once: this rank's range of each
  // group's flat layout copied out of it, the rest dropped.
  for (size_t block = 0; block < blocks_.size(); ++block) {
    for (auto& group : blocks_[block]) {
      int64_t total = 0;
      for (const auto& shape : group.shapes) total += c10::multiply_integers(shape);
      const int64_t slice_numel = (total + ranks - 1) / ranks, begin = rank * slice_numel, end = begin + slice_numel;
      auto slice = torch::zeros({slice_numel}, at::TensorOptions().dtype(group.parameters.front().scalar_type()));
      int64_t offset = 0;
      for (size_t k = 0; k < group.parameters.size(); ++k) {
        const int64_t numel = c10::multiply_integers(group.shapes[k]);
        const int64_t from = std::max(begin, offset), to = std::min(end, offset + numel);
        if (from < to) {
          const auto tensor = source.read(group.names[k]).flatten().to(slice.scalar_type());
          slice.narrow(0, from - begin, to - from).copy_(tensor.narrow(0, from - offset, to - from));
        }
        offset += numel;
      }
      group.slice = slice.to(device);
      held_bytes_ += slice_numel * int64_t(slice.element_size());
    }
  }
  model.set_parameter_units(this);
}

void ShardedBlocks::start_gather(int64_t block) {
  for (auto& group : blocks_.at(size_t(block))) {
    if (group.whole.defined()) continue;
    group.whole = torch::empty({group.slice.numel() * comm_.size()}, group.slice.options());
    group.gathering = comm_.all_gather_async(group.whole, group.slice);
  }
}

void ShardedBlocks::before_block(int64_t block) {
  start_gather(block);
  for (auto& group : blocks_[size_t(block)]) {
    group.gathering->wait();
    int64_t offset = 0;
    for (size_t k = 0; k < group.parameters.size(); ++k) {
      const int64_t numel = c10::multiply_integers(group.shapes[k]);
      group.parameters[k].set_data(group.whole.narrow(0, offset, numel).view(group.shapes[k]));
      offset += numel;
    }
  }
  if (block + 1 < int64_t(blocks_.size())) start_gather(block + 1);  // while this block computes
}

at::Tensor ShardedBlocks::after_block(int64_t block, const at::Tensor& output) {
  for (auto& group : blocks_[size_t(block)]) {
    for (auto& parameter : group.parameters) parameter.set_data(torch::empty({0}, group.slice.options()));
    group.whole = at::Tensor();
    group.gathering.reset();
  }
  return output;
}

}  // namespace wt::wan
