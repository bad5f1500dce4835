#include "wantrain/nn/linear.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "wantrain/nn/autocast.hpp"
#include "wantrain/nn/fp8_weights.hpp"
#include "wantrain/util/error.hpp"

namespace wt::nn {

void fill_uniform_drawn_in_fp32(const at::Tensor& target, double from, double to) {
  torch::NoGradGuard no_grad;
  if (target.scalar_type() == at::kFloat) {
    target.uniform_(from, to);
    return;
  }
  // LibTorch's CPU uniform_ draws element after element from the generator,
  // so chunks of an fp32 buffer give the numbers one fp32 tensor would. A
  // buffer of fixed size, reused: no fp32 copy of a layer, and no heap holes
  // of its size left behind (those added 1.5 GB to a 1.3B bf16 base).
  constexpr int64_t kChunk = int64_t(1) << 18;  // 1 MiB of fp32
  auto flat = target.view({-1});
  auto buffer = torch::empty({std::min(kChunk, flat.numel())}, torch::kFloat32);
  for (int64_t at = 0; at < flat.numel(); at += kChunk) {
    auto part = buffer.narrow(0, 0, std::min(kChunk, flat.numel() - at));
    part.uniform_(from, to);
    flat.narrow(0, at, part.numel()).copy_(part);
  }
}

namespace {
thread_local bool skip_weight_init = false;
}  // namespace

SkipWeightInit::SkipWeightInit() : was_(skip_weight_init) { skip_weight_init = true; }
SkipWeightInit::~SkipWeightInit() { skip_weight_init = was_; }

LinearImpl::LinearImpl(int64_t in, int64_t out, at::ScalarType dtype) : in_features(in), out_features(out) {
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kFloat8_e4m3fn,
              "Linear: weights are held in fp32, bf16 or fp8 (e4m3fn)");
  // An fp8 layer's bias, a few bytes, stays in bf16, the dtype its product runs in.
  const auto bias_dtype = dtype == at::kFloat8_e4m3fn ? at::kBFloat16 : dtype;
  if (dtype == at::kFloat8_e4m3fn)
    weight_scale =
        register_buffer("weight_scale", torch::ones(fp8_scale_shape(out, in), torch::dtype(torch::kFloat32)));
  if (skip_weight_init) {
    weight = register_parameter("weight", torch::empty({out, in}, torch::dtype(dtype)));
    bias = register_parameter("bias", torch::empty({out}, torch::dtype(bias_dtype)));
    return;
  }
  if (dtype == at::kFloat) {
    // torch::nn::Linear's own initialisation, so that a model draws the same
    // numbers from the generator whichever of the two its layers are.
    torch::nn::LinearImpl reference(in, out);
    weight = register_parameter("weight", reference.weight.detach().clone());
    bias = register_parameter("bias", reference.bias.detach().clone());
    return;
  }
  // The same draws, rounded: torch::nn::Linear's reset_parameters is
  // kaiming_uniform_(weight, a = sqrt(5)) and bias ~ U(+-1 / sqrt(in)),
  // with the bounds computed as LibTorch computes them.
  const double gain = std::sqrt(2.0 / (1 + std::pow(std::sqrt(5.0), 2)));
  const double weight_bound = std::sqrt(3.0) * (gain / std::sqrt(double(in)));
  const double bias_bound = 1 / std::sqrt(double(in));
  weight = register_parameter("weight", torch::empty({out, in}, torch::dtype(dtype)));
  bias = register_parameter("bias", torch::empty({out}, torch::dtype(bias_dtype)));
  fill_weight_uniform(-weight_bound, weight_bound);
  fill_uniform_drawn_in_fp32(bias, -bias_bound, bias_bound);
}

void LinearImpl::fill_weight_uniform(double from, double to) {
  if (weight.scalar_type() != at::kFloat8_e4m3fn) {
    fill_uniform_drawn_in_fp32(weight, from, to);
    return;
  }
  // Rows drawn in fp32 a few at a time (the generator's sequence, as for
  // one fp32 tensor) and quantised with their scales.
  torch::NoGradGuard no_grad;
  const int64_t rows = std::max<int64_t>(1, (int64_t(1) << 18) / in_features);
  auto buffer = torch::empty({std::min(rows, out_features), in_features}, torch::kFloat32);
  for (int64_t first = 0; first < out_features; first += rows) {
    const int64_t n = std::min(rows, out_features - first);
    auto part = buffer.narrow(0, 0, n);
    part.uniform_(from, to);
    quantize_fp8(part, weight.narrow(0, first, n), weight_scale.narrow(0, first, n));
  }
}

at::Tensor LinearImpl::forward(const at::Tensor& x) {
  const auto autocast = autocast_dtype(x);
  // With an adapter under autocast, an fp32 input is rounded to the product's
  // dtype once for both products, not once each (its gradient is then the
  // two products' gradients summed in that dtype, as peft's LoRA sums them).
  const auto input = lora_A.defined() && autocast != at::kFloat && x.scalar_type() == at::kFloat &&
                             weight.scalar_type() != at::kFloat8_e4m3fn
                         ? x.to(autocast)
                         : x;
  at::Tensor y;
  if (weight.scalar_type() == at::kFloat8_e4m3fn) {
    // Dequantised to bf16 (or autocast's dtype) for this product only; the
    // output is the input's dtype outside autocast, autocast's inside.
    const auto compute = autocast != at::kFloat ? autocast : at::kBFloat16;
    y = fp8_linear(input.to(compute), weight, weight_scale, bias.to(compute), compute);
    if (autocast == at::kFloat) y = y.to(x.scalar_type());
  } else {
    // A base held in another dtype than the input (bf16 weights, fp32
    // activations) computes in its own dtype and hands back the input's.
    y = input.scalar_type() == weight.scalar_type() || autocast != at::kFloat
            ? torch::nn::functional::linear(input, weight, bias)
            : torch::nn::functional::linear(input.to(weight.scalar_type()), weight, bias).to(x.scalar_type());
  }
  if (!lora_A.defined()) return y;
  const auto dropped = lora_dropout_ > 0 ? torch::dropout(input, lora_dropout_, is_training()) : input;
  const auto update = torch::nn::functional::linear(torch::nn::functional::linear(dropped, lora_A), lora_B);
  // alpha = rank (scale 1) is the common setting: no product by 1 and its backward
  return y + (lora_scale_ == 1 ? update : update * lora_scale_);
}

void LinearImpl::add_lora(int64_t rank, double alpha, double dropout) {
  if (has_lora()) throw Error("this Linear already has a LoRA adapter");
  const auto options = weight.options().dtype(torch::kFloat32);
  auto a = torch::empty({rank, in_features}, options);
  torch::nn::init::kaiming_uniform_(a, std::sqrt(5.0));
  lora_A = register_parameter("lora_A", a);
  lora_B = register_parameter("lora_B", torch::zeros({out_features, rank}, options));
  lora_scale_ = alpha / double(rank);
  lora_dropout_ = dropout;
}

void LinearImpl::merge_lora() {
  if (!has_lora()) return;
  torch::NoGradGuard no_grad;
  add_to_weight(torch::matmul(lora_B.to(torch::kFloat32), lora_A.to(torch::kFloat32)) * lora_scale_);
  // The registered parameters go too, so that names and counts are the base's again.
  parameters_.erase("lora_A");
  parameters_.erase("lora_B");
  lora_A = lora_B = at::Tensor();
  lora_scale_ = lora_dropout_ = 0;
}

void LinearImpl::add_to_weight(const at::Tensor& delta) {
  torch::NoGradGuard no_grad;
  const auto d = delta.to(weight.device(), torch::kFloat32);
  if (weight.scalar_type() == at::kFloat8_e4m3fn)
    quantize_fp8(nn::dequantize_fp8(weight, weight_scale, torch::kFloat32) + d, weight, weight_scale);
  else
    weight.copy_((weight.to(torch::kFloat32) + d).to(weight.scalar_type()));
}

void LinearImpl::dequantize_fp8(at::ScalarType dtype) {
  if (weight.scalar_type() != at::kFloat8_e4m3fn) return;
  torch::NoGradGuard no_grad;
  const bool trainable = weight.requires_grad();
  weight = parameters_["weight"] = nn::dequantize_fp8(weight, weight_scale, dtype).set_requires_grad(trainable);
  bias = parameters_["bias"] = bias.to(dtype).set_requires_grad(bias.requires_grad());
  weight_scale.set_();  // LibTorch cannot unregister a buffer: it stays, empty
  weight_scale = at::Tensor();
}

}  // namespace wt::nn
