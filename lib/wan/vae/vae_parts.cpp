#include "wantrain/wan/vae/vae_parts.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace wt::wan::vae_parts {

at::Tensor conv3d(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, at::IntArrayRef stride,
                  at::IntArrayRef padding) {
  if (x.is_cpu() && x.scalar_type() == at::kFloat && at::hasMKLDNN() && at::globalContext().userEnabledMkldnn())
    return at::mkldnn_convolution(x.contiguous(), weight.contiguous(), bias, padding, stride, {1, 1, 1}, 1);
  return at::conv3d(x, weight, bias, stride, padding);
}

at::Tensor upsample_conv(const at::Tensor& x, int64_t n, const Conv& conv) {
  const int64_t b = x.size(0), c = x.size(1) / n, t = x.size(2), h = x.size(3), w = x.size(4);
  const int64_t o = conv.weight.size(0);
  const auto taps = torch::tensor({1.f, 0.f, 0.f, 0.f, 1.f, 1.f, 1.f, 1.f, 0.f, 0.f, 0.f, 1.f}, conv.weight.device())
                        .view({2, 2, 3});  // [parity, tap, kernel row]
  const auto kernels = at::einsum("pai,qbj,ocij->pqocab", {taps, taps, conv.weight.to(torch::kFloat)})
                           .reshape({4 * o, c, 1, 2, 2})
                           .to(conv.weight.scalar_type());  // [(py, px, O), C, 1, 2, 2]
  const auto y = conv3d(x.reshape({b * n, c, t, h, w}), kernels, conv.bias.repeat({4}), {1, 1, 1},
                        {0, 1, 1});  // [B n, 4 O, T, H + 1, W + 1]
  const auto parts = y.view({b, n, 2, 2, o, t, h + 1, w + 1});
  auto out = at::empty({b, o, t, n, h, 2, w, 2}, y.options());
  for (int64_t py = 0; py < 2; ++py)
    for (int64_t px = 0; px < 2; ++px)
      out.select(7, px).select(5, py).copy_(
          parts.select(3, px).select(2, py).narrow(4, py, h).narrow(5, px, w).permute({0, 2, 3, 1, 4, 5}));
  return out.view({b, o, t * n, 2 * h, 2 * w});
}

at::Tensor per_channel(const std::vector<double>& values, const at::Device& device) {
  return torch::tensor(values, torch::TensorOptions().dtype(torch::kDouble))
      .to(device, torch::kFloat)
      .view({1, -1, 1, 1, 1});
}

std::string shape_text(const at::Tensor& t) { return fmt::format("[{}]", fmt::join(t.sizes(), ", ")); }

}  // namespace wt::wan::vae_parts
