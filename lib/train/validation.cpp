#include "train/validation.hpp"

#include <torch/torch.h>

#include "data/shard.hpp"
#include "dist/comm.hpp"
#include "model/autocast.hpp"
#include "model/wan_model.hpp"
#include "train/flow_matching.hpp"

namespace wt::train {
namespace {
// Noise of validation sample i at grid point j: independent of --seed, so
// runs with different seeds are scored on the same problem.
constexpr uint64_t kValidationSeed = 0x76616c6964617465;  // "validate"
}  // namespace

Validator::Validator(const std::string& directory, ValidationOptions options)
    : dataset_(data::Dataset::open(directory)), options_(options) {}

Validator::~Validator() = default;

double Validator::evaluate(model::WanModelImpl& model, Comm& comm, at::ScalarType compute_dtype) {
  torch::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  const auto device = comm.device();
  const auto& shape = dataset_.shape();
  data::SampleReader reader(dataset_);

  std::vector<int64_t> mine;
  for (int64_t i = comm.rank(); i < dataset_.size(); i += comm.size()) mine.push_back(i);

  double sum = 0;
  for (size_t first = 0; first < mine.size(); first += options_.batch_size) {
    const std::vector<int64_t> indices(mine.begin() + first,
                                       mine.begin() + std::min(mine.size(), first + options_.batch_size));
    const int64_t b = indices.size();
    auto latents = torch::empty({b, shape.channels, shape.frames, shape.height, shape.width},
                                data::scalar_type(shape.latents));
    auto text = torch::empty({b, shape.text_len, shape.text_dim}, data::scalar_type(shape.text));
    for (int64_t i = 0; i < b; ++i) {
      int32_t text_len = 0;
      reader.read(indices[i], latents[i], text[i], text_len);
    }
    const auto x0 = latents.to(device, torch::kFloat32);
    const auto context = text.to(device, torch::kFloat32);
    for (int j = 0; j < options_.grid; ++j) {
      const double sigma = shift_sigma((j + 0.5) / options_.grid, options_.shift);
      std::vector<uint64_t> keys(b);
      for (int64_t i = 0; i < b; ++i) keys[i] = sample_key(kValidationSeed, j, indices[i]);
      const auto noisy = noisy_batch_at(x0, std::vector<double>(b, sigma), keys);
      at::Tensor prediction;
      {
        model::AutocastScope autocast(compute_dtype);
        prediction = model.forward(noisy.x_t, noisy.timesteps, context);
      }
      sum += per_sample_loss(prediction, noisy.target).sum().item<double>();
    }
  }
  if (was_training) model.train();

  auto total = torch::tensor({sum}, torch::dtype(torch::kFloat64)).to(device);
  comm.all_reduce(total, {ReduceOp::Sum});
  return total.item<double>() / double(dataset_.size() * options_.grid);
}

}  // namespace wt::train
