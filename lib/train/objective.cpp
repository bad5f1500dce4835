#include "wantrain/train/objective.hpp"

#include <fmt/format.h>

#include "wantrain/util/error.hpp"

namespace wt::train {

const at::Tensor& Batch::at(const std::string& name) const {
  const auto it = tensors.find(name);
  if (it == tensors.end()) throw Error(fmt::format("batch: no tensor '{}'", name));
  return it->second;
}

NamedTensors checkpoint_tensors(const std::vector<ParameterGroup>& groups) {
  NamedTensors out;
  for (const auto& group : groups)
    for (const auto& [name, tensor] : group.parameters) out.emplace_back(group.checkpoint_prefix + name, tensor);
  return out;
}

NamedTensors averaged_tensors(const std::vector<ParameterGroup>& groups) {
  NamedTensors out;
  for (const auto& group : groups)
    if (group.ema)
      for (const auto& [name, tensor] : group.parameters) out.emplace_back(group.checkpoint_prefix + name, tensor);
  return out;
}

const NamedTensors& Objective::trainable() const {
  if (!checkpoint_named_) checkpoint_named_ = checkpoint_tensors(groups());
  return *checkpoint_named_;
}

void Objective::check_resume(const std::string& saved_kind, const std::map<std::string, std::string>& state,
                             const std::string& path) const {
  if (saved_kind != kind())
    throw UsageError(fmt::format("checkpoint {}: written by a {} run; this run trains {}", path, saved_kind, kind()));
  if (state != checkpoint_state())
    throw UsageError(fmt::format("checkpoint {}: its {} state differs from this run's", path, kind()));
}

Batch Batch::slice(int64_t first, int64_t count, const at::Device& device) const {
  Batch out;
  out.indices.assign(indices.begin() + first, indices.begin() + first + count);
  out.ahead_step = ahead_step;
  for (const auto& [name, tensor] : tensors)
    out.tensors.emplace(name, tensor.narrow(0, first, count).to(device, /*non_blocking=*/true));
  if (copied) copied->record(device);  // the host buffers may be refilled once these copies are done
  return out;
}

}  // namespace wt::train
