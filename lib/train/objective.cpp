#include "wantrain/train/objective.hpp"

#include <fmt/format.h>

#include "wantrain/util/error.hpp"

namespace wt::train {

const at::Tensor& Batch::at(const std::string& name) const {
  const auto it = tensors.find(name);
  if (it == tensors.end()) throw Error(fmt::format("batch: no tensor '{}'", name));
  return it->second;
}

Batch Batch::slice(int64_t first, int64_t count, const at::Device& device) const {
  Batch out;
  out.indices.assign(indices.begin() + first, indices.begin() + first + count);
  for (const auto& [name, tensor] : tensors)
    out.tensors.emplace(name, tensor.narrow(0, first, count).to(device, /*non_blocking=*/true));
  return out;
}

}  // namespace wt::train
