#include "wantrain/train/validation.hpp"

#include <torch/torch.h>

#include <algorithm>

#include "wantrain/distributed/comm.hpp"
#include "wantrain/nn/autocast.hpp"
#include "wantrain/train/objective.hpp"

namespace wt::train {

Validator::Validator(std::unique_ptr<SampleSource> samples, int batch_size)
    : samples_(std::move(samples)), batch_size_(batch_size) {}

Validator::~Validator() = default;

double Validator::evaluate(Objective& objective, distributed::Comm& comm, at::ScalarType compute_dtype) {
  torch::NoGradGuard no_grad;
  const auto device = comm.device();
  const int64_t n = samples_->size();

  std::vector<int64_t> mine;
  for (int64_t i = comm.rank(); i < n; i += comm.size()) mine.push_back(i);

  double sum = 0;
  for (size_t first = 0; first < mine.size(); first += size_t(batch_size_)) {
    const std::vector<int64_t> indices(mine.begin() + first,
                                       mine.begin() + std::min(mine.size(), first + size_t(batch_size_)));
    const Batch batch = samples_->read(indices).slice(0, int64_t(indices.size()), device);
    nn::AutocastScope autocast(compute_dtype, device.type());
    sum += objective.validation_losses(batch).sum().item<double>();
  }

  auto total = torch::tensor({sum}, torch::dtype(torch::kFloat64)).to(device);
  comm.all_reduce(total, {distributed::ReduceOp::Sum});
  return total.item<double>() / double(n);
}

}  // namespace wt::train
