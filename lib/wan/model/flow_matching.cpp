#include "wantrain/wan/model/flow_matching.hpp"

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

at::Tensor first_frame_timesteps(const at::Tensor& t, at::IntArrayRef latent_sizes,
                                 const std::array<int64_t, 3>& patch) {
  TORCH_CHECK(latent_sizes.size() == 5 && patch[0] == 1,
              "first-frame timesteps: latents [B, C, F, H, W], patch 1 in time");
  const int64_t b = latent_sizes[0], frame_tokens = (latent_sizes[3] / patch[1]) * (latent_sizes[4] / patch[2]);
  auto per_token = t.to(torch::kFloat32).view({b, 1}).repeat({1, latent_sizes[2] * frame_tokens});  // [B, L]
  per_token.slice(1, 0, frame_tokens).zero_();
  return per_token;
}

FirstFrameBatch keep_first_frame(const NoisyBatch& noisy, const at::Tensor& x0, const std::vector<bool>& kept,
                                 const std::array<int64_t, 3>& patch) {
  const int64_t b = x0.size(0);
  TORCH_CHECK(int64_t(kept.size()) == b && patch[0] == 1, "first frame: one draw per row, patch 1 in time");
  std::vector<uint8_t> flags(kept.begin(), kept.end());
  FirstFrameBatch out;
  out.kept = torch::tensor(flags).to(x0.device(), torch::kBool);  // [B]
  const auto row = out.kept.view({b, 1, 1, 1, 1});
  // frame 0: x0 where kept, x_t elsewhere; later frames x_t
  out.x_t = noisy.x_t.clone();
  out.x_t.slice(2, 0, 1).copy_(
      torch::where(row, x0.slice(2, 0, 1).to(noisy.x_t.scalar_type()), noisy.x_t.slice(2, 0, 1)));
  // the kept rows' timesteps from first_frame_timesteps, the others' t on every token
  const auto with_first = first_frame_timesteps(noisy.timesteps, x0.sizes(), patch);  // [B, L]
  out.timesteps = torch::where(out.kept.view({b, 1}), with_first,
                               noisy.timesteps.to(torch::kFloat32).view({b, 1}).expand_as(with_first));
  return out;
}

at::Tensor first_frame_losses(const at::Tensor& prediction, const at::Tensor& target, const at::Tensor& kept) {
  const int64_t b = prediction.size(0), frames = prediction.size(2);
  const auto squared = (prediction.to(torch::kFloat32) - target.to(torch::kFloat32)).square();  // [B, C, F, H, W]
  // weight of each (row, frame): 0 for a kept row's frame 0
  auto weight = torch::ones({b, frames}, squared.options());
  weight.slice(1, 0, 1).masked_fill_(kept.view({b, 1}), 0.0);
  const auto per_frame = squared.mean({1, 3, 4});      // [B, F]: every frame has C*H*W elements
  return (per_frame * weight).sum(1) / weight.sum(1);  // [B]
}

at::Tensor first_frame_loss(const at::Tensor& prediction, const at::Tensor& target, const at::Tensor& kept) {
  return first_frame_losses(prediction, target, kept).mean();
}

at::Tensor flow_matching_loss(const at::Tensor& prediction, const at::Tensor& target) {
  return torch::mse_loss(prediction.to(torch::kFloat32), target.to(torch::kFloat32));
}

at::Tensor per_sample_loss(const at::Tensor& prediction, const at::Tensor& target) {
  return (prediction.to(torch::kFloat32) - target.to(torch::kFloat32)).square().flatten(1).mean(1);
}

}  // namespace wt::wan
