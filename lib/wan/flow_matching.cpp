#include "wantrain/wan/flow_matching.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>
#include <cmath>

#include "wantrain/data/sampler.hpp"
#include "wantrain/util/error.hpp"

namespace wt::wan {

uint64_t sample_key(uint64_t seed, int64_t step, int64_t index) {
  data::PortableRandom r(seed);
  uint64_t key = r.next();
  key = data::PortableRandom(key ^ static_cast<uint64_t>(step)).next();
  return data::PortableRandom(key ^ static_cast<uint64_t>(index)).next();
}

namespace {

double uniform01(data::PortableRandom& r) { return double(r.next() >> 11) * 0x1.0p-53; }  // [0, 1)

}  // namespace

double shift_sigma(double sigma, double shift) { return shift * sigma / (1.0 + (shift - 1.0) * sigma); }

double training_sigma(double sigma, const FlowMatchingOptions& options) {
  return options.sigma_min + (options.sigma_max - options.sigma_min) * shift_sigma(sigma, options.shift);
}

Noise noise_at(at::IntArrayRef x0_sizes, const std::vector<double>& sigmas, const std::vector<uint64_t>& noise_keys,
               Noise into) {
  const int64_t b = x0_sizes[0];
  TORCH_CHECK(int64_t(sigmas.size()) == b && int64_t(noise_keys.size()) == b, "one sigma and noise key per row");
  auto place = [](at::Tensor& t, at::IntArrayRef sizes) {
    if (!t.defined()) t = torch::empty(sizes, torch::kFloat32);
    TORCH_CHECK(t.sizes() == sizes && t.scalar_type() == torch::kFloat32 && t.is_cpu() && t.is_contiguous(),
                "noise goes into CPU fp32 tensors of its shape");
  };
  Noise noise = std::move(into);
  place(noise.eps, x0_sizes);  // [B, C, F, H, W]
  place(noise.sigmas, {b});    // [B]
  for (int64_t i = 0; i < b; ++i) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(noise_keys[i]);
    noise.eps[i].normal_(0.0, 1.0, generator);
  }
  auto* sigma = noise.sigmas.data_ptr<float>();
  for (int64_t i = 0; i < b; ++i) sigma[i] = static_cast<float>(sigmas[size_t(i)]);
  return noise;
}

Noise training_noise(at::IntArrayRef x0_sizes, const std::vector<int64_t>& sample_indices, uint64_t seed, int64_t step,
                     const FlowMatchingOptions& options, Noise into) {
  const int64_t b = x0_sizes[0];
  TORCH_CHECK(int64_t(sample_indices.size()) == b, "one sample index per batch row");
  std::vector<double> sigmas(b);
  std::vector<uint64_t> keys(b);
  for (int64_t i = 0; i < b; ++i) {
    data::PortableRandom r(sample_key(seed, step, sample_indices[i]));
    double sigma;
    if (options.sampling == TimestepSampling::Uniform) {
      sigma = uniform01(r);
    } else {  // Box-Muller: a portable standard normal
      const double u1 = 1.0 - uniform01(r), u2 = uniform01(r);
      const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
      sigma = 1.0 / (1.0 + std::exp(-(options.logit_mean + options.logit_std * z)));
    }
    sigmas[i] = training_sigma(sigma, options);
    keys[i] = r.next();
  }
  return noise_at(x0_sizes, sigmas, keys, std::move(into));
}

NoisyBatch apply_noise(const at::Tensor& x0, const Noise& noise) {
  const int64_t b = x0.size(0);
  TORCH_CHECK(noise.eps.sizes() == x0.sizes() && noise.sigmas.numel() == b, "noise of another batch shape");
  const auto sigma = noise.sigmas.to(x0.device());  // [B]
  const auto eps = noise.eps.to(x0.device());
  const auto s = sigma.view({b, 1, 1, 1, 1});
  const auto x0f = x0.to(torch::kFloat32);
  NoisyBatch batch;
  batch.x_t = ((1 - s) * x0f + s * eps).to(x0.scalar_type());
  batch.sigmas = sigma;
  batch.timesteps = sigma * 1000.0f;
  batch.target = eps - x0f;
  return batch;
}

NoisyBatch noisy_batch_at(const at::Tensor& x0, const std::vector<double>& sigmas,
                          const std::vector<uint64_t>& noise_keys) {
  return apply_noise(x0, noise_at(x0.sizes(), sigmas, noise_keys));
}

NoisyBatch make_noisy_batch(const at::Tensor& x0, const std::vector<int64_t>& sample_indices, uint64_t seed,
                            int64_t step, const FlowMatchingOptions& options) {
  return apply_noise(x0, training_noise(x0.sizes(), sample_indices, seed, step, options));
}

at::Tensor flow_matching_loss(const at::Tensor& prediction, const at::Tensor& target) {
  return torch::mse_loss(prediction.to(torch::kFloat32), target.to(torch::kFloat32));
}

at::Tensor per_sample_loss(const at::Tensor& prediction, const at::Tensor& target) {
  return (prediction.to(torch::kFloat32) - target.to(torch::kFloat32)).square().flatten(1).mean(1);
}

}  // namespace wt::wan
