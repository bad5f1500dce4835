// fp8 base weights (nn/fp8_weights.hpp): the quantisation against torch's
// own float8_e4m3fn conversion in Python (tests/reference/fp8_reference.py),
// a Linear's output within the bound the rounding rule gives, and a Wan
// block held in fp8 as the block holding the dequantised weights in bf16.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "../../../common/build_paths.hpp"
#include "../../../common/small_models.hpp"
#include "wantrain/io/safetensors.hpp"
#include "wantrain/nn/fp8_weights.hpp"
#include "wantrain/nn/linear.hpp"
#include "wantrain/wan/model/weights.hpp"

namespace fs = std::filesystem;

namespace {

// Weights that reach every case of the rule: rows of very different
// magnitudes, a block of zeros, a block of values below e4m3's normal range
// relative to its largest, ties, and a row length that is not a multiple of 64.
torch::Tensor awkward_weights(int64_t out, int64_t in) {
  torch::manual_seed(5);
  auto w = torch::randn({out, in}) * torch::logspace(-6, 3, out).unsqueeze(1);
  w.index_put_({0, torch::indexing::Slice(0, std::min<int64_t>(in, 64))}, 0.0);
  if (in > 64) {
    w.index_put_({1, torch::indexing::Slice(64, std::min<int64_t>(in, 128))}, 1e-7);
    w.index_put_({1, 64}, 448.0f);  // the block's largest: its scale is exactly 1
  }
  w.index_put_({2, 1}, 448.0f);  // row 2's first block scales to 1; 1 + 1/16 lies between e4m3 values: a tie
  w.index_put_({2, 2}, 1.0f + 1.0f / 16);
  return w;
}

TEST(Fp8Weights, QuantisationIsTorchsE4m3OfTheBlockScaledWeights) {
  const auto dir = fs::temp_directory_path() / ("wantrain-fp8-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  wt::io::NamedTensors weights = {{"wide", awkward_weights(40, 200)}, {"narrow", awkward_weights(6, 24)}};
  wt::io::write_safetensors((dir / "in.safetensors").string(), weights, torch::kFloat32);
  const std::string command = std::string(WANTRAIN_PYTHON) + " " + WANTRAIN_SOURCE_DIR +
                              "/tests/reference/fp8_reference.py " + (dir / "in.safetensors").string() + " " +
                              (dir / "out.safetensors").string() + " 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  const auto reference = wt::io::SafetensorsFile::open((dir / "out.safetensors").string());
  for (const auto& [name, w] : weights) {
    const auto values = torch::empty(w.sizes(), torch::dtype(at::kFloat8_e4m3fn));
    const auto scales = torch::empty(wt::nn::fp8_scale_shape(w.size(0), w.size(1)), torch::kFloat32);
    wt::nn::quantize_fp8(w, values, scales);
    // Bit for bit: every e4m3 value is exact in fp32, and the scales are fp32 arithmetic.
    EXPECT_TRUE(torch::equal(values.to(torch::kFloat32), reference.read(*reference.find(name + ".values")))) << name;
    EXPECT_TRUE(torch::equal(scales, reference.read(*reference.find(name + ".scales")))) << name;
    // Dequantised in fp32: scale times value.
    const auto expanded = scales.repeat_interleave(wt::nn::kFp8Block, 1).narrow(1, 0, w.size(1));
    EXPECT_TRUE(
        torch::equal(wt::nn::dequantize_fp8(values, scales, torch::kFloat32), values.to(torch::kFloat32) * expanded))
        << name;
  }
  fs::remove_all(dir);
}

// y = x W^T + b through an fp8 Linear, against the exact product in double.
// Per output i, with s the scale of the block of input j:
//   |y_i - exact_i| <= sum_j |x_j| (|W_ij| 2^-4 + s 2^-10)     e4m3: 3 mantissa bits; below its normal range an
//   absolute step
//                    + sum_j |x_j| |W_ij| (3 * 2^-8)           x, the dequantised W and the fp32 sum rounded to bf16
//                    + (|b_i| + |exact_i|) 2^-8                the bias and the output in bf16
// (products of small rounding terms are within the factor 1.01 of margin).
TEST(Fp8Weights, ALinearsOutputIsWithinTheBoundOfItsRounding) {
  torch::manual_seed(3);
  const int64_t in = 192, out = 48;
  wt::nn::Linear fp8(in, out, at::kFloat8_e4m3fn);
  const auto w = awkward_weights(out, in) / 1000;
  wt::nn::quantize_fp8(w, fp8->weight, fp8->weight_scale);
  const auto b = torch::randn({out}) * 0.1;
  fp8->bias.detach().copy_(b);
  const auto x = torch::randn({5, in});
  const auto y = fp8->forward(x).to(torch::kFloat64);
  EXPECT_EQ(fp8->forward(x).scalar_type(), torch::kFloat32);

  const auto xd = x.to(torch::kFloat64), wd = w.to(torch::kFloat64), bd = b.to(torch::kBFloat16).to(torch::kFloat64);
  const auto exact = torch::matmul(xd, wd.t()) + bd;
  const auto s = fp8->weight_scale.repeat_interleave(wt::nn::kFp8Block, 1).narrow(1, 0, in).to(torch::kFloat64);
  const auto bound =
      (torch::matmul(xd.abs(), (wd.abs() * (std::pow(2.0, -4) + 3 * std::pow(2.0, -8))).t()) +
       torch::matmul(xd.abs(), (s * std::pow(2.0, -10)).t()) + (bd.abs() + exact.abs()) * std::pow(2.0, -8)) *
      1.01;
  const auto excess = ((y - exact).abs() - bound).max().item<double>();
  EXPECT_LE(excess, 0.0);
  // The bound is not vacuous: the rounding it covers is present, and a
  // product that ignored the scales would break it by far.
  EXPECT_GT((y - exact).abs().max().item<double>(), 0.0);
  const auto unscaled = torch::matmul(xd, fp8->weight.to(torch::kFloat64).t()) + bd;
  EXPECT_GT(((unscaled - exact).abs() - bound).max().item<double>(), 0.0);
}

// The gradient that reaches x is that of the dequantised weight; the weight
// stays frozen and keeps no bf16 copy for backward.
TEST(Fp8Weights, TheInputsGradientIsThatOfTheDequantisedWeight) {
  torch::manual_seed(4);
  wt::nn::Linear fp8(128, 32, at::kFloat8_e4m3fn);
  fp8->weight.set_requires_grad(false);
  fp8->bias.set_requires_grad(false);
  const auto x = torch::randn({3, 128}, torch::requires_grad());
  const auto g = torch::randn({3, 32});
  fp8->forward(x).backward(g);
  const auto w = wt::nn::dequantize_fp8(fp8->weight, fp8->weight_scale, torch::kBFloat16);
  const auto x2 = x.detach().clone().set_requires_grad(true);
  torch::nn::functional::linear(x2.to(torch::kBFloat16), w, fp8->bias).to(torch::kFloat32).backward(g);
  EXPECT_TRUE(torch::equal(x.grad(), x2.grad()));
}

// A small Wan model built with fp8 block Linears draws the fp32 model's
// numbers: its weights are the quantised fp32 weights. And a forward and
// its input gradient are those of the model holding the dequantised values
// in bf16: nothing but the storage differs.
TEST(Fp8Weights, AWanModelInFp8IsItsFp32TwinQuantisedAndComputesAsItsDequantisedBf16Twin) {
  const auto config = wt::testing::small_wan_config();
  torch::manual_seed(7);
  wt::wan::WanModel fp32(config);
  torch::manual_seed(7);
  wt::wan::WanModel fp8(config, at::kFloat8_e4m3fn);
  torch::manual_seed(7);
  wt::wan::WanModel bf16(config, at::kBFloat16);
  auto fp8_parameters = fp8->named_parameters();
  auto buffers = fp8->named_buffers();
  auto bf16_parameters = bf16->named_parameters();
  int quantised = 0;
  for (const auto& item : fp32->named_parameters()) {
    const auto& held = fp8_parameters[item.key()];
    if (held.scalar_type() != at::kFloat8_e4m3fn) continue;
    ++quantised;
    const auto values = torch::empty_like(held);
    const auto scales = torch::empty_like(buffers[item.key() + "_scale"]);
    wt::nn::quantize_fp8(item.value(), values, scales);
    ASSERT_TRUE(torch::equal(values.view(torch::kUInt8), held.view(torch::kUInt8))) << item.key();
    ASSERT_TRUE(torch::equal(scales, buffers[item.key() + "_scale"])) << item.key();
    torch::NoGradGuard no_grad;
    bf16_parameters[item.key()].copy_(wt::nn::dequantize_fp8(held, scales, torch::kBFloat16));
  }
  EXPECT_EQ(quantised, 2 * (4 + 4 + 2));  // per block: self q k v o, cross q k v o, ffn 0 and 2
  for (const auto& item : fp8_parameters)
    if (item.value().scalar_type() == at::kBFloat16) bf16_parameters[item.key()].detach().copy_(item.value());

  torch::manual_seed(8);
  const auto x = torch::randn({1, config.in_dim, 1, 4, 4}, torch::requires_grad());
  const auto t = torch::full({1}, 500.0);
  const auto context = torch::randn({1, 4, config.text_dim});
  const auto g = torch::randn({1, config.out_dim, 1, 4, 4});
  fp8->forward(x, t, context).backward(g);
  const auto x2 = x.detach().clone().set_requires_grad(true);
  const auto y2 = bf16->forward(x2, t, context);
  y2.backward(g);
  EXPECT_TRUE(torch::equal(fp8->forward(x, t, context), y2));
  EXPECT_TRUE(torch::equal(x.grad(), x2.grad()));
  // The checksum of the base as held is that of the dequantised values, in fp32.
  wt::io::NamedTensors dequantised;
  for (const auto& item : fp8_parameters)
    dequantised.emplace_back(item.key(),
                             item.value().scalar_type() == at::kFloat8_e4m3fn
                                 ? wt::nn::dequantize_fp8(item.value(), buffers[item.key() + "_scale"], torch::kFloat32)
                                 : item.value());
  EXPECT_EQ(wt::wan::held_weights_checksum(config, *fp8), wt::wan::weights_checksum(config, dequantised));
  EXPECT_NE(wt::wan::held_weights_checksum(config, *fp8), wt::wan::held_weights_checksum(config, *fp32));
}

}  // namespace
