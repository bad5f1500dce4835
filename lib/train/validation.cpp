#include "wantrain/train/validation.hpp"

#include <torch/torch.h>

#include <algorithm>

#include "wantrain/distributed/comm.hpp"
#include "wantrain/nn/autocast.hpp"
#include "wantrain/train/objective.hpp"

namespace wt::train {

Validator::Validator(std::unique_ptr<SampleSource> samples, int batch_size)
    : samples_(std::move(samples)), groups_(samples_->groups()), batch_size_(batch_size) {}

Validator::~Validator() = default;

ValidationResult Validator::evaluate(Objective& objective, distributed::Comm& comm, at::ScalarType compute_dtype,
                                     int sequence_parallel) {
  torch::NoGradGuard no_grad;
  const auto device = comm.device();
  const int sp = std::max(1, sequence_parallel);
  const size_t group = size_t(comm.rank() / sp), groups = size_t(comm.size() / sp);
  const bool counts = comm.rank() % sp == 0;

  // Each group's sum of per-sample metrics, in a fixed summation order
  // within a rank; the all-reduce adds the ranks' sums.
  std::vector<double> sums(groups_.size(), 0.0);
  for (size_t g = 0; g < groups_.size(); ++g) {
    const auto& all = groups_[g].indices;
    std::vector<int64_t> mine;
    for (size_t i = group; i < all.size(); i += groups) mine.push_back(all[i]);
    for (size_t first = 0; first < mine.size(); first += size_t(batch_size_)) {
      const std::vector<int64_t> indices(mine.begin() + first,
                                         mine.begin() + std::min(mine.size(), first + size_t(batch_size_)));
      const Batch batch = samples_->read(indices).slice(0, int64_t(indices.size()), device);
      nn::AutocastScope autocast(compute_dtype, device.type());
      const double batch_sum = objective.validation_losses(batch).sum().item<double>();
      if (counts) sums[g] += batch_sum;
    }
  }

  auto total = torch::tensor(sums, torch::dtype(torch::kFloat64)).to(device);
  comm.all_reduce(total, {distributed::ReduceOp::Sum});
  total = total.cpu();
  ValidationResult result;
  double sum = 0;
  int64_t n = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const auto samples = int64_t(groups_[g].indices.size());
    const double group_sum = total[int64_t(g)].item<double>();
    sum += group_sum;
    n += samples;
    if (groups_.size() > 1)
      result.groups.push_back({groups_[g].name, samples, group_sum / double(std::max<int64_t>(samples, 1))});
  }
  result.loss = sum / double(n);
  return result;
}

}  // namespace wt::train
