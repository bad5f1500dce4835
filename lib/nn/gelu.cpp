#include "wantrain/nn/gelu.hpp"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <cstdint>
#include <cstring>

#include "wantrain/util/avx2_clones.hpp"

namespace wt::nn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr float kSqrt2OverPi = 0.7978845608028654f, kCubic = 0.044715f;

// exp(x) for x in [-87, 87] (clamped there: tanh is +-1 in fp32 long before),
// to about 2 ulp: x = n ln2 + r with |r| <= ln2/2, exp(r) by its Taylor
// polynomial to r^7, times 2^n built in the exponent bits. No calls and no
// branches, so that the loops below vectorise (without -ffast-math).
inline float exp_clamped(float x) {
  x = x < -87.0f ? -87.0f : (x > 87.0f ? 87.0f : x);
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = (x * 1.44269504088896341f + kRound) - kRound;
  const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-06f;  // ln2 in two parts
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (int32_t(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// tanh(u) = 1 - 2 / (exp(2u) + 1); NaN stays NaN. Near -1 the sum 1 + tanh
// below cancels as LibTorch's own formula does (the sigmoid form avoids that
// but measured twice as slow here).
inline float tanh_of(float u) { return u != u ? u : 1.0f - 2.0f / (exp_clamped(2.0f * u) + 1.0f); }

WANTRAIN_AVX2_CLONES void gelu_forward(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float t = tanh_of(kSqrt2OverPi * (v + kCubic * v * v * v));
    y[i] = 0.5f * v * (1.0f + t);
  }
}

// d gelu / dx = (1 + t)/2 + x/2 (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
WANTRAIN_AVX2_CLONES void gelu_backward(const float* x, const float* g, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float t = tanh_of(kSqrt2OverPi * (v + kCubic * v * v * v));
    const float slope = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kCubic * v * v);
    dx[i] = g[i] * slope;
  }
}

class FusedGelu : public torch::autograd::Function<FusedGelu> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x) {
    auto y = torch::empty_like(x);
    const float* px = x.data_ptr<float>();
    float* py = y.data_ptr<float>();
    at::parallel_for(0, x.numel(), at::internal::GRAIN_SIZE,
                     [&](int64_t begin, int64_t end) { gelu_forward(px + begin, py + begin, end - begin); });
    ctx->save_for_backward({x});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto x = ctx->get_saved_variables()[0];
    const auto g = grad_outputs[0].contiguous();
    auto dx = torch::empty_like(x);
    const float *px = x.data_ptr<float>(), *pg = g.data_ptr<float>();
    float* pdx = dx.data_ptr<float>();
    at::parallel_for(0, x.numel(), at::internal::GRAIN_SIZE, [&](int64_t begin, int64_t end) {
      gelu_backward(px + begin, pg + begin, pdx + begin, end - begin);
    });
    return {dx};
  }
};

}  // namespace

at::Tensor gelu_tanh(const at::Tensor& x) {
  RECORD_FUNCTION("wt::gelu_tanh", std::vector<c10::IValue>({x}));  // a named op in profiles
  if (x.device().is_cpu() && x.scalar_type() == at::kFloat && x.is_contiguous() && x.numel() > 0)
    return FusedGelu::apply(x);
  return torch::gelu(x, "tanh");
}

}  // namespace wt::nn
