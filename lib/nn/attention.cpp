#include "wantrain/nn/attention.hpp"

#include <torch/torch.h>

#include <cmath>

#include "wantrain/nn/autocast.hpp"

namespace wt::nn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class ChunkedAttention : public torch::autograd::Function<ChunkedAttention> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            int64_t chunk) {
    const auto dtype = autocast_dtype(q) != at::kFloat ? autocast_dtype(q) : q.scalar_type();
    Fp32Scope explicit_dtypes;  // every cast below is spelled out
    const auto cq = q.to(dtype), ck = k.to(dtype), cv = v.to(dtype);
    const double scale = 1.0 / std::sqrt(double(q.size(-1)));
    const int64_t len = q.size(2);
    auto out = torch::empty({q.size(0), q.size(1), len, v.size(-1)}, cq.options());
    auto lse = torch::empty({q.size(0), q.size(1), len}, cq.options().dtype(torch::kFloat32));
    const auto kt = ck.transpose(-2, -1);
    for (int64_t at = 0; at < len; at += chunk) {
      const int64_t n = std::min(chunk, len - at);
      const auto scores = (torch::matmul(cq.narrow(2, at, n), kt) * scale).to(torch::kFloat32);  // [B, h, n, S]
      const auto row_lse = torch::logsumexp(scores, -1, /*keepdim=*/true);
      out.narrow(2, at, n).copy_(torch::matmul(torch::exp(scores - row_lse).to(dtype), cv));
      lse.narrow(2, at, n).copy_(row_lse.squeeze(-1));
    }
    ctx->save_for_backward({cq, ck, cv, out, lse});
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["q_dtype"] = int64_t(q.scalar_type());
    ctx->saved_data["k_dtype"] = int64_t(k.scalar_type());
    ctx->saved_data["v_dtype"] = int64_t(v.scalar_type());
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto &cq = saved[0], &ck = saved[1], &cv = saved[2], &out = saved[3], &lse = saved[4];
    const int64_t chunk = ctx->saved_data["chunk"].toInt();
    const double scale = ctx->saved_data["scale"].toDouble();
    const auto dtype = cq.scalar_type();
    Fp32Scope explicit_dtypes;
    const auto d_out = grad_outputs[0].to(dtype);
    auto dq = torch::empty(cq.sizes(), cq.options());
    auto dk = torch::zeros(ck.sizes(), ck.options().dtype(torch::kFloat32));
    auto dv = torch::zeros(cv.sizes(), cv.options().dtype(torch::kFloat32));
    const auto kt = ck.transpose(-2, -1), vt = cv.transpose(-2, -1);
    const int64_t len = cq.size(2);
    for (int64_t at = 0; at < len; at += chunk) {
      const int64_t n = std::min(chunk, len - at);
      const auto q_i = cq.narrow(2, at, n), d_out_i = d_out.narrow(2, at, n);
      const auto scores = (torch::matmul(q_i, kt) * scale).to(torch::kFloat32);
      const auto p = torch::exp(scores - lse.narrow(2, at, n).unsqueeze(-1));  // [B, h, n, S] fp32
      dv += torch::matmul(p.to(dtype).transpose(-2, -1), d_out_i).to(torch::kFloat32);
      // softmax backward: dS = P * (dP - rowsum(dO * O)), O being P V
      const auto dp = torch::matmul(d_out_i, vt).to(torch::kFloat32);
      const auto rows = (d_out_i.to(torch::kFloat32) * out.narrow(2, at, n).to(torch::kFloat32)).sum(-1, true);
      const auto ds = (p * (dp - rows) * scale).to(dtype);
      dq.narrow(2, at, n).copy_(torch::matmul(ds, ck));
      dk += torch::matmul(ds.transpose(-2, -1), q_i).to(torch::kFloat32);
    }
    auto as = [&](const at::Tensor& t, const char* key) {
      return t.to(static_cast<at::ScalarType>(ctx->saved_data[key].toInt()));
    };
    return {as(dq, "q_dtype"), as(dk, "k_dtype"), as(dv, "v_dtype"), at::Tensor()};
  }
};

}  // namespace

at::Tensor fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  TORCH_CHECK(q.dim() == 4 && q.size(-1) == k.size(-1) && k.size(-2) == v.size(-2),
              "fused_attention: q, k, v do not fit");
  // The products' dtype spelled out, as chunked_attention does, rather than
  // left to autocast's op lists (which differ by device and version).
  const auto dtype = autocast_dtype(q) != at::kFloat ? autocast_dtype(q) : q.scalar_type();
  Fp32Scope explicit_dtypes;
  return at::scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype));
}

int64_t fused_attention_backend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return at::_fused_sdp_choice(q, k, v);
}

at::Tensor chunked_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t chunk) {
  TORCH_CHECK(chunk >= 1, "chunked_attention: chunk must be at least 1, got ", chunk);
  TORCH_CHECK(q.size(-1) == k.size(-1) && k.size(-2) == v.size(-2), "chunked_attention: q, k, v do not fit");
  return ChunkedAttention::apply(q, k, v, chunk);
}

}  // namespace wt::nn
