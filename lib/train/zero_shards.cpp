#include "wantrain/train/zero_shards.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>

#include "wantrain/distributed/comm.hpp"
#include "wantrain/distributed/reducer.hpp"
#include "wantrain/util/error.hpp"

namespace wt::train {

ZeroShards::ZeroShards(distributed::Comm& comm, const distributed::Reducer& reducer, const NamedTensors& trainable)
    : comm_(comm), trainable_(trainable) {
  torch::NoGradGuard no_grad;
  const int ranks = comm.size(), rank = comm.rank();
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < trainable_.size(); ++i) index.emplace(trainable_[i].first, i);
  places_.resize(trainable_.size());
  const auto layouts = reducer.bucket_layouts();
  for (size_t b = 0; b < layouts.size(); ++b) {
    const auto& layout = layouts[b];
    const at::Tensor& first = trainable_[index.at(layout.entries.front().name)].second;
    auto flat = torch::zeros({layout.numel}, first.options().requires_grad(false));  // [numel]
    const int64_t shard = layout.numel / ranks, begin = rank * shard, end = begin + shard;
    for (const auto& e : layout.entries) {
      const size_t i = index.at(e.name);
      at::Tensor& parameter = trainable_[i].second;
      auto view = flat.narrow(0, e.offset, e.numel).view(parameter.sizes());
      view.copy_(parameter.detach());
      parameter.set_data(view);
      places_[i] = {b, e.offset};
      const int64_t from = std::max(begin, e.offset), to = std::min(end, e.offset + e.numel);
      if (from < to) pieces_.push_back({e.name, b, from - begin, from - e.offset, to - from, e.numel});
    }
    shards_.push_back(flat.narrow(0, begin, shard));
    flat_.push_back(std::move(flat));
  }
  for (size_t i = 0; i < trainable_.size(); ++i)
    if (!trainable_[i].second.requires_grad())
      throw Error(fmt::format("ZeroShards: trainable parameter {} does not require grad", trainable_[i].first));
}

void ZeroShards::all_gather_parameters() {
  torch::NoGradGuard no_grad;
  std::vector<distributed::WorkPtr> works;
  for (size_t b = 0; b < flat_.size(); ++b) works.push_back(comm_.all_gather_async(flat_[b], shards_[b]));
  for (auto& work : works) work->wait();
}

NamedTensors ZeroShards::gather(const std::vector<at::Tensor>& slices) const {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> whole;
  for (size_t b = 0; b < flat_.size(); ++b) {
    whole.push_back(torch::empty({flat_[b].numel()}, slices[b].options()));
    comm_.all_gather(whole.back(), slices[b].contiguous());
  }
  NamedTensors out;
  for (size_t i = 0; i < trainable_.size(); ++i) {
    const auto& [name, parameter] = trainable_[i];
    out.emplace_back(name,
                     whole[places_[i].bucket].narrow(0, places_[i].offset, parameter.numel()).view(parameter.sizes()));
  }
  return out;
}

}  // namespace wt::train
