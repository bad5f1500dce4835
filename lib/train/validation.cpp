#include "wantrain/train/validation.hpp"

#include <torch/torch.h>

#include <algorithm>

#include "wantrain/data/shard.hpp"
#include "wantrain/distributed/comm.hpp"
#include "wantrain/model/autocast.hpp"
#include "wantrain/train/objective.hpp"

namespace wt::train {

Validator::Validator(const std::string& directory, int batch_size)
    : dataset_(data::Dataset::open(directory)), batch_size_(batch_size) {}

Validator::~Validator() = default;

double Validator::evaluate(Objective& objective, distributed::Comm& comm, at::ScalarType compute_dtype) {
  torch::NoGradGuard no_grad;
  const auto device = comm.device();
  const auto& shape = dataset_.shape();
  data::SampleReader reader(dataset_);

  std::vector<int64_t> mine;
  for (int64_t i = comm.rank(); i < dataset_.size(); i += comm.size()) mine.push_back(i);

  double sum = 0;
  for (size_t first = 0; first < mine.size(); first += size_t(batch_size_)) {
    Batch batch;
    batch.indices.assign(mine.begin() + first, mine.begin() + std::min(mine.size(), first + size_t(batch_size_)));
    const int64_t b = batch.size();
    auto latents = torch::empty({b, shape.channels, shape.frames, shape.height, shape.width},
                                data::scalar_type(shape.latents));                                 // [B, C, F, H, W]
    auto text = torch::empty({b, shape.text_len, shape.text_dim}, data::scalar_type(shape.text));  // [B, L, D]
    for (int64_t i = 0; i < b; ++i) {
      int32_t text_len = 0;
      reader.read(batch.indices[i], latents[i], text[i], text_len);
    }
    batch.tensors.emplace("latents", latents.to(device));
    batch.tensors.emplace("text_emb", text.to(device));
    model::AutocastScope autocast(compute_dtype);
    sum += objective.validation_losses(batch).sum().item<double>();
  }

  auto total = torch::tensor({sum}, torch::dtype(torch::kFloat64)).to(device);
  comm.all_reduce(total, {distributed::ReduceOp::Sum});
  return total.item<double>() / double(dataset_.size());
}

}  // namespace wt::train
