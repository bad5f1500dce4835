#include "wantrain/nn/fp8_weights.hpp"

#include <torch/torch.h>

#include <algorithm>

namespace wt::nn {

std::vector<int64_t> fp8_scale_shape(int64_t out, int64_t in) { return {out, (in + kFp8Block - 1) / kFp8Block}; }

void quantize_fp8(const at::Tensor& weight, const at::Tensor& values, const at::Tensor& scales) {
  TORCH_CHECK(weight.dim() == 2 && values.sizes() == weight.sizes() && values.scalar_type() == at::kFloat8_e4m3fn,
              "quantize_fp8: values must be float8_e4m3fn of the weight's shape");
  const int64_t out = weight.size(0), in = weight.size(1);
  TORCH_CHECK(scales.sizes() == at::IntArrayRef(fp8_scale_shape(out, in)) && scales.scalar_type() == at::kFloat,
              "quantize_fp8: scales must be fp32 [out, ceil(in / 64)]");
  torch::NoGradGuard no_grad;
  const int64_t blocks = scales.size(1), padded = blocks * kFp8Block;
  // About 1 MiB of fp32 rows at a time.
  const int64_t rows = std::max<int64_t>(1, (int64_t(1) << 18) / padded);
  for (int64_t first = 0; first < out; first += rows) {
    const int64_t n = std::min(rows, out - first);
    auto w = weight.narrow(0, first, n).to(values.device(), torch::kFloat32);
    if (padded != in) w = torch::constant_pad_nd(w, {0, padded - in});  // zeros change no block's maximum
    const auto blocked = w.view({n, blocks, kFp8Block});
    const auto amax = blocked.abs().amax(-1);
    const auto scale = torch::where(amax > 0, amax / kFp8Max, torch::ones_like(amax));
    // w / scale is at most 448 but for the division's rounding: clamp, as
    // e4m3fn has no infinity and would turn 448.00003 into NaN.
    const auto scaled = (blocked / scale.unsqueeze(-1)).clamp(-kFp8Max, kFp8Max).view({n, padded});
    values.narrow(0, first, n).copy_(scaled.narrow(1, 0, in).to(at::kFloat8_e4m3fn));
    scales.narrow(0, first, n).copy_(scale);
  }
}

at::Tensor dequantize_fp8(const at::Tensor& values, const at::Tensor& scales, at::ScalarType dtype) {
  torch::NoGradGuard no_grad;
  const int64_t out = values.size(0), in = values.size(1);
  auto w = values.to(torch::kFloat32);
  if (in % kFp8Block == 0)
    w.view({out, scales.size(1), kFp8Block}).mul_(scales.unsqueeze(-1));
  else
    w.mul_(scales.repeat_interleave(kFp8Block, 1).narrow(1, 0, in));
  return w.to(dtype);
}

namespace {

class Fp8Linear : public torch::autograd::Function<Fp8Linear> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& values,
                            const at::Tensor& scales, const at::Tensor& bias, int64_t dtype) {
    ctx->save_for_backward({values, scales});
    ctx->saved_data["dtype"] = dtype;
    const auto w = dequantize_fp8(values, scales, at::ScalarType(dtype));
    return torch::nn::functional::linear(x, w, bias);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto w = dequantize_fp8(saved[0], saved[1], at::ScalarType(ctx->saved_data["dtype"].toInt()));
    return {grads[0].matmul(w), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor fp8_linear(const at::Tensor& x, const at::Tensor& values, const at::Tensor& scales, const at::Tensor& bias,
                      at::ScalarType dtype) {
  return Fp8Linear::apply(x, values, scales, bias, int64_t(dtype));
}

}  // namespace wt::nn
