// Chunked and fused attention: the same values and gradients as the full
// score matrix, for any chunk (dividing L or not, larger than L), for self-
// and cross-attention (text_len != L), in fp32 and under bf16 autocast; and
// the model's shapes stay on LibTorch's fused (flash) kernel.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "../../common/small_models.hpp"
#include "wantrain/nn/attention.hpp"
#include "wantrain/nn/attention_chunk.hpp"
#include "wantrain/nn/autocast.hpp"

namespace {

double relative_max(const at::Tensor& got, const at::Tensor& expected) {
  return (got.to(torch::kFloat64) - expected.to(torch::kFloat64)).abs().max().item<double>() /
         expected.to(torch::kFloat64).abs().max().item<double>();
}

// softmax(q kᵀ / sqrt(d)) v with every score at once, through autograd.
at::Tensor full_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(q.size(-1)));
  return torch::matmul(torch::softmax(scores, -1), v);
}

TEST(ChunkedAttention, EqualsTheFullScoreMatrixInValueAndGradient) {
  torch::manual_seed(1);
  for (const int64_t chunk : {1, 4, 13, 100}) {
    SCOPED_TRACE(chunk);
    auto q = torch::randn({2, 3, 13, 8}, torch::requires_grad());  // L = 13: no chunk but 1 and 13 divides it
    auto k = torch::randn({2, 3, 9, 8}, torch::requires_grad());   // S = 9 != L, as cross-attention
    auto v = torch::randn({2, 3, 9, 8}, torch::requires_grad());
    const auto d_out = torch::randn({2, 3, 13, 8});
    const auto expected = full_attention(q, k, v);
    const auto expected_grads = torch::autograd::grad({expected}, {q, k, v}, {d_out});
    const auto got = wt::nn::chunked_attention(q, k, v, chunk);
    const auto got_grads = torch::autograd::grad({got}, {q, k, v}, {d_out});
    EXPECT_LT(relative_max(got, expected), 1e-6);
    for (size_t i = 0; i < 3; ++i) EXPECT_LT(relative_max(got_grads[i], expected_grads[i]), 1e-5) << "input " << i;
  }
}

TEST(FusedAttention, EqualsTheFullScoreMatrixInValueAndGradient) {
  torch::manual_seed(2);
  for (const int64_t len : {1, 13, 200}) {  // below, at and above the kernel's query and key blocks
    SCOPED_TRACE(len);
    auto q = torch::randn({2, 3, len, 8}, torch::requires_grad());
    auto k = torch::randn({2, 3, 9, 8}, torch::requires_grad());
    auto v = torch::randn({2, 3, 9, 8}, torch::requires_grad());
    const auto d_out = torch::randn({2, 3, len, 8});
    const auto expected = full_attention(q, k, v);
    const auto expected_grads = torch::autograd::grad({expected}, {q, k, v}, {d_out});
    const auto got = wt::nn::fused_attention(q, k, v);
    const auto got_grads = torch::autograd::grad({got}, {q, k, v}, {d_out});
    EXPECT_LT(relative_max(got, expected), 1e-6);
    for (size_t i = 0; i < 3; ++i) EXPECT_LT(relative_max(got_grads[i], expected_grads[i]), 1e-5) << "input " << i;
  }
}

// What keeps the kernel fused: no mask (Wan attends over its padded text as
// it is), any lengths, and q, k, v as the model passes them (transposed
// views of [B, L, heads, d]). The math fallback would form the whole
// [B, heads, L, S] matrix again.
TEST(FusedAttention, TheModelsShapesRunOnTheFlashKernel) {
  constexpr int64_t kFlash = 1;  // sdp::SDPBackend::flash_attention
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    for (const auto& [len, keys] : {std::pair<int64_t, int64_t>{1560, 1560}, {1560, 512}, {45, 257}, {7, 1}}) {
      SCOPED_TRACE(::testing::Message() << len << " queries, " << keys << " keys, " << c10::toString(dtype));
      const auto q = torch::randn({1, len, 12, 128}, dtype).transpose(1, 2);
      const auto k = torch::randn({1, keys, 12, 128}, dtype).transpose(1, 2);
      EXPECT_EQ(wt::nn::fused_attention_backend(q, k, k), kFlash);
    }
  }
}

// The whole model, chunked or fused against the whole score matrix: 45
// tokens (a 3 x 3 x 5 grid) in chunks of 7, cross-attention over text_len 8.
void expect_model_matches(at::ScalarType autocast, double tolerance, int64_t attention = 7) {
  auto forward_backward = [&](int64_t chunk) {
    auto model = wt::testing::seeded_small_model(wt::testing::small_wan_config());
    model->set_attention_chunk(chunk);
    torch::manual_seed(3);
    const auto x = torch::randn({2, 4, 3, 6, 10}), context = torch::randn({2, 5, 16});
    at::Tensor out;
    {
      wt::nn::AutocastScope scope(autocast, torch::kCPU);
      out = model->forward(x, torch::tensor({100.0f, 700.0f}), context).to(torch::kFloat32);
    }
    out.square().mean().backward();
    std::vector<std::pair<std::string, at::Tensor>> grads;
    for (const auto& item : model->named_parameters()) grads.emplace_back(item.key(), item.value().grad());
    return std::pair{out, grads};
  };
  const auto [expected, expected_grads] = forward_backward(0);
  const auto [got, got_grads] = forward_backward(attention);
  EXPECT_LT(relative_max(got, expected), tolerance);
  for (size_t i = 0; i < got_grads.size(); ++i)
    EXPECT_LT(relative_max(got_grads[i].second, expected_grads[i].second), tolerance) << got_grads[i].first;
}

TEST(ChunkedAttention, TheModelComputesAsWithTheFullScoresInFp32) { expect_model_matches(at::kFloat, 1e-5); }

// bf16 products round the same values at other places (exp(s - lse)
// against softmax's own normalisation): within a few bf16 ulps.
TEST(ChunkedAttention, TheModelComputesAsWithTheFullScoresUnderBf16) { expect_model_matches(at::kBFloat16, 1.0 / 32); }

TEST(FusedAttention, TheModelComputesAsWithTheFullScoresInFp32) {
  expect_model_matches(at::kFloat, 1e-5, wt::nn::kFusedAttention);
}

// The kernel keeps the probabilities in fp32 where the full path rounds
// them to bf16 for the product with v: within the same few bf16 ulps.
TEST(FusedAttention, TheModelComputesAsWithTheFullScoresUnderBf16) {
  expect_model_matches(at::kBFloat16, 1.0 / 32, wt::nn::kFusedAttention);
}

TEST(FusedAttention, IsTheModelsDefault) {
  auto model = wt::testing::seeded_small_model(wt::testing::small_wan_config());
  EXPECT_EQ(model->attention_chunk(), wt::nn::kFusedAttention);
}

}  // namespace
