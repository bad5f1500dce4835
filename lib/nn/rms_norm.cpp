#include "wantrain/nn/rms_norm.hpp"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <cmath>

#include "wantrain/nn/autocast.hpp"

namespace wt::nn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int kLanes = 16;  // partial sums per row: the loop vectorises, and the order is fixed

// sum(a[i] * b[i]) in kLanes partial sums, added in a fixed order.
float dot(const float* a, const float* b, int64_t n) {
  float lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) lanes[l] += a[i + l] * b[i + l];
  for (; i < n; ++i) lanes[i % kLanes] += a[i] * b[i];
  float sum = 0;
  for (float lane : lanes) sum += lane;
  return sum;
}

// Rows are independent: split over LibTorch's intra-op threads, each row
// touched by one thread only, so the result does not depend on the count.
constexpr int64_t kGrainRows = 16;

class FusedRmsNorm : public torch::autograd::Function<FusedRmsNorm> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, double eps) {
    const int64_t dim = x.size(-1), rows = x.numel() / dim;
    auto y = torch::empty_like(x);
    auto rstd = torch::empty({rows}, x.options());
    const float *px = x.data_ptr<float>(), *pw = weight.data_ptr<float>();
    float *py = y.data_ptr<float>(), *pr = rstd.data_ptr<float>();
    at::parallel_for(0, rows, kGrainRows, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float* row = px + r * dim;
        const float s = 1.0f / std::sqrt(dot(row, row, dim) / float(dim) + float(eps));
        pr[r] = s;
        float* out = py + r * dim;
        for (int64_t i = 0; i < dim; ++i) out[i] = (row[i] * s) * pw[i];
      }
    });
    ctx->save_for_backward({x, weight, rstd});
    return y;
  }

  // With n = x * s and g' = g * weight:
  //   dx = s * (g' - n * mean(g' * n)),   dweight = sum over rows of g * n.
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &weight = saved[1], &rstd = saved[2];
    const auto g = grad_outputs[0].contiguous();
    const int64_t dim = x.size(-1), rows = x.numel() / dim;
    auto dx = torch::empty_like(x);
    const float *px = x.data_ptr<float>(), *pw = weight.data_ptr<float>(), *pr = rstd.data_ptr<float>(),
                *pg = g.data_ptr<float>();
    float* pdx = dx.data_ptr<float>();
    // dweight: one partial row sum per block of rows, added in block order
    // afterwards: the same sum whatever the thread count. Not made for a
    // frozen weight (LoRA's base).
    const bool weight_grad = ctx->needs_input_grad(1);
    constexpr int64_t kBlock = 64;
    const int64_t blocks = (rows + kBlock - 1) / kBlock;
    auto partial = weight_grad ? torch::zeros({blocks, dim}, x.options()) : at::Tensor();
    float* pp = weight_grad ? partial.data_ptr<float>() : nullptr;
    at::parallel_for(0, blocks, 1, [&](int64_t first, int64_t last) {
      std::vector<float> gw(size_t(dim), 0.0f), n(size_t(dim), 0.0f);
      for (int64_t b = first; b < last; ++b) {
        float* acc = weight_grad ? pp + b * dim : nullptr;
        for (int64_t r = b * kBlock; r < std::min(rows, (b + 1) * kBlock); ++r) {
          const float s = pr[r];
          const float *row = px + r * dim, *grad = pg + r * dim;
          for (int64_t i = 0; i < dim; ++i) {
            n[i] = row[i] * s;
            gw[i] = grad[i] * pw[i];
            if (acc) acc[i] += grad[i] * n[i];
          }
          const float mean = dot(gw.data(), n.data(), dim) / float(dim);
          float* out = pdx + r * dim;
          for (int64_t i = 0; i < dim; ++i) out[i] = s * (gw[i] - n[i] * mean);
        }
      }
    });
    if (!weight_grad) return {dx, at::Tensor(), at::Tensor()};
    auto dweight = torch::zeros({dim}, x.options());
    float* pd = dweight.data_ptr<float>();
    for (int64_t b = 0; b < blocks; ++b)
      for (int64_t i = 0; i < dim; ++i) pd[i] += pp[b * dim + i];
    return {dx, dweight, at::Tensor()};
  }
};

}  // namespace

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  RECORD_FUNCTION("wt::rms_norm", std::vector<c10::IValue>({x}));  // a named op in profiles
  TORCH_CHECK(weight.dim() == 1 && weight.numel() == x.size(-1) && weight.device() == x.device(),
              "rms_norm: weight must be [", x.size(-1), "] on x's device, got ", weight.sizes());
  if (x.device().is_cpu() && x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat && x.is_contiguous() &&
      weight.is_contiguous() && x.numel() > 0)
    return FusedRmsNorm::apply(x, weight, eps);
  Fp32Scope fp32;
  const auto xf = x.to(torch::kFloat32);
  return (xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps)).to(x.scalar_type()) * weight;
}

}  // namespace wt::nn
