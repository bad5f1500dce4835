// WanModel's pieces against their formulas evaluated directly, and the whole
// model's shapes, initial output and precision behaviour.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "wantrain/nn/autocast.hpp"
#include "wantrain/nn/gelu.hpp"
#include "wantrain/wan/model/patches.hpp"
#include "wantrain/wan/model/positional.hpp"
#include "wantrain/nn/rms_norm.hpp"
#include "wantrain/wan/model/lora.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/model/weights.hpp"
#include "wantrain/util/error.hpp"

namespace {

using wt::wan::WanConfig;

WanConfig tiny_config() {
  WanConfig c;
  c.dim = 64;
  c.ffn_dim = 128;
  c.num_heads = 4;
  c.num_layers = 2;
  c.freq_dim = 256;
  c.text_dim = 32;
  c.text_len = 8;
  c.patch_size = {1, 2, 2};
  c.in_dim = 4;
  c.out_dim = 4;
  return c;
}

}  // namespace

TEST(Positional, SinusoidalEmbeddingIsCosHalfThenSinHalf) {
  const std::vector<double> ts = {0.0, 1.0, 250.5, 999.0};
  const int64_t dim = 8, half = dim / 2;
  const auto emb = wt::wan::sinusoidal_embedding(torch::tensor(ts, torch::kFloat32), dim);
  ASSERT_EQ(emb.sizes().vec(), (std::vector<int64_t>{4, dim}));
  for (size_t b = 0; b < ts.size(); ++b)
    for (int64_t i = 0; i < half; ++i) {
      const double angle = ts[b] * std::pow(10000.0, -double(i) / double(half));
      EXPECT_NEAR(emb[b][i].item<double>(), std::cos(angle), 1e-6);
      EXPECT_NEAR(emb[b][half + i].item<double>(), std::sin(angle), 1e-6);
    }
}

TEST(Positional, RopeAxisSplitFollowsWan) {
  EXPECT_EQ(wt::wan::rope_axis_channels(128), (std::array<int64_t, 3>{44, 42, 42}));
  EXPECT_EQ(wt::wan::rope_axis_channels(16), (std::array<int64_t, 3>{8, 4, 4}));
  EXPECT_EQ(wt::wan::rope_axis_channels(2), (std::array<int64_t, 3>{2, 0, 0}));
}

// RoPE applied to random q against its definition evaluated element by element.
TEST(Positional, RopeMatchesItsFormula) {
  for (int64_t head_dim : {12, 16, 2}) {
    SCOPED_TRACE(head_dim);
    const std::array<int64_t, 3> grid{2, 3, 4};
    const int64_t tokens = 24, heads = 2;
    torch::manual_seed(1);
    const auto x = torch::randn({1, tokens, heads, head_dim}, torch::kFloat64);
    const auto out =
        wt::wan::apply_rope(x.to(torch::kFloat32), wt::wan::rope_table(grid, head_dim)).to(torch::kFloat64);
    const auto parts = wt::wan::rope_axis_channels(head_dim);
    auto xa = x.accessor<double, 4>();
    auto oa = out.accessor<double, 4>();
    for (int64_t f = 0; f < grid[0]; ++f)
      for (int64_t h = 0; h < grid[1]; ++h)
        for (int64_t w = 0; w < grid[2]; ++w) {
          const int64_t token = (f * grid[1] + h) * grid[2] + w;
          const int64_t position[3] = {f, h, w};
          int64_t pair = 0;
          for (int axis = 0; axis < 3; ++axis)
            for (int64_t j = 0; j < parts[axis] / 2; ++j, ++pair) {
              const double angle = double(position[axis]) * std::pow(10000.0, -2.0 * double(j) / double(parts[axis]));
              for (int64_t n = 0; n < heads; ++n) {
                const double re = xa[0][token][n][2 * pair], im = xa[0][token][n][2 * pair + 1];
                EXPECT_NEAR(oa[0][token][n][2 * pair], re * std::cos(angle) - im * std::sin(angle), 1e-5);
                EXPECT_NEAR(oa[0][token][n][2 * pair + 1], re * std::sin(angle) + im * std::cos(angle), 1e-5);
              }
            }
        }
  }
}

// The scale folded into the rotation (attention's 1/sqrt(head_dim) on q) is
// the unscaled rotation times the scale.
TEST(Positional, RopeScaleMultipliesTheRotation) {
  torch::manual_seed(3);
  const auto x = torch::randn({2, 6, 2, 12});
  const auto table = wt::wan::rope_table({1, 2, 3}, 12);
  EXPECT_TRUE(torch::allclose(wt::wan::apply_rope(x, table, 0.25), wt::wan::apply_rope(x, table) * 0.25, 1e-6, 1e-7));
}

// The fused CPU RMSNorm (fp32, contiguous) against its formula evaluated with
// tensor ops in fp64: output and both gradients. Rows not a multiple of the
// backward's 64-row blocks, a dim not a multiple of the 16 lanes.
TEST(RmsNorm, FusedPassesMatchTheFormulaAndItsGradients) {
  torch::manual_seed(4);
  for (const int64_t dim : {40, 256}) {
    SCOPED_TRACE(dim);
    const auto x = torch::randn({3, 47, dim}) * 3;
    const auto weight = torch::rand({dim}) + 0.5;
    const auto grad = torch::randn({3, 47, dim});
    auto run = [&](at::ScalarType dtype) {
      auto xi = x.to(dtype).clone().requires_grad_(true);
      auto wi = weight.to(dtype).clone().requires_grad_(true);
      const auto y = wt::nn::rms_norm(xi, wi, 1e-6);
      y.backward(grad.to(dtype));
      return std::vector<at::Tensor>{y.detach().to(torch::kFloat64), xi.grad().to(torch::kFloat64),
                                     wi.grad().to(torch::kFloat64)};
    };
    const auto fused = run(torch::kFloat32), reference = run(torch::kFloat64);
    // A frozen weight (LoRA's base norms): the same gradient for x, none for the weight.
    auto xi = x.clone().requires_grad_(true);
    wt::nn::rms_norm(xi, weight, 1e-6).backward(grad);
    EXPECT_TRUE(torch::equal(xi.grad(), fused[1].to(torch::kFloat32)));
    const char* names[] = {"output", "grad x", "grad weight"};
    for (int i = 0; i < 3; ++i) {
      const double scale = reference[i].abs().max().item<double>();
      EXPECT_LT((fused[i] - reference[i]).abs().max().item<double>(), 1e-5 * scale) << names[i];
    }
  }
}

// Rows are split over threads, but each row and each block of the weight's
// gradient is summed in one fixed order: the same bits at 1 and 2 threads.
TEST(RmsNorm, FusedPassesGiveTheSameBitsAtAnyThreadCount) {
  torch::manual_seed(5);
  const auto x = torch::randn({4, 300, 64});
  const auto weight = torch::rand({64});
  const auto grad = torch::randn({4, 300, 64});
  const int threads = torch::get_num_threads();
  auto run = [&](int n) {
    torch::set_num_threads(n);
    auto xi = x.clone().requires_grad_(true);
    auto wi = weight.clone().requires_grad_(true);
    const auto y = wt::nn::rms_norm(xi, wi, 1e-6);
    y.backward(grad);
    return std::vector<at::Tensor>{y.detach(), xi.grad(), wi.grad()};
  };
  const auto one = run(1), two = run(2);
  torch::set_num_threads(threads);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(torch::equal(one[i], two[i])) << i;
}

// The fused CPU GELU against its formula in fp64 (LibTorch's gelu in
// double precision): values from -12 to 12, both ways, at least as close as
// LibTorch's own fp32 GELU is, within a few fp32 ulp; and the edges (NaN
// stays NaN, +inf stays inf, large negatives give 0).
TEST(Gelu, FusedPassesMatchTheTanhFormulaAndItsGradient) {
  torch::manual_seed(6);
  const auto x = torch::cat({torch::linspace(-12, 12, 4001), torch::randn({5000}) * 3});
  const auto grad = torch::randn(x.sizes());
  auto run = [&](at::ScalarType dtype, bool fused) {
    auto xi = x.to(dtype).clone().requires_grad_(true);
    const auto y = fused ? wt::nn::gelu_tanh(xi) : torch::gelu(xi, "tanh");
    y.backward(grad.to(dtype));
    return std::pair{y.detach().to(torch::kFloat64), xi.grad().to(torch::kFloat64)};
  };
  const auto [y, dx] = run(torch::kFloat32, true);
  const auto [y_torch, dx_torch] = run(torch::kFloat32, false);
  const auto [y64, dx64] = run(torch::kFloat64, false);
  // Errors relative to the larger of the value's size and 1 (near zero the
  // formula's terms, not the result, set the rounding).
  auto error = [](const at::Tensor& a, const at::Tensor& exact, const at::Tensor& size) {
    return ((a - exact).abs() / size.abs().clamp_min(1)).max().item<double>();
  };
  const auto g64 = grad.to(torch::kFloat64);
  const double ulp = std::ldexp(1.0, -23);
  EXPECT_LE(error(y, y64, y64), std::max(error(y_torch, y64, y64), 8 * ulp));
  EXPECT_LE(error(dx, dx64, g64), std::max(error(dx_torch, dx64, g64), 32 * ulp));
  const auto edges = wt::nn::gelu_tanh(torch::tensor({std::nanf(""), INFINITY, -100.0f, 100.0f}));
  EXPECT_TRUE(std::isnan(edges[0].item<float>()));
  EXPECT_EQ(edges[1].item<float>(), INFINITY);
  EXPECT_EQ(edges[2].item<float>(), 0.0f);
  EXPECT_EQ(edges[3].item<float>(), 100.0f);
}

TEST(Patches, UnpatchifyInvertsPatchify) {
  torch::manual_seed(2);
  const auto x = torch::randn({2, 3, 4, 6, 8});
  for (wt::wan::Patch patch : {wt::wan::Patch{1, 2, 2}, wt::wan::Patch{2, 3, 4}, wt::wan::Patch{1, 1, 1}}) {
    const auto tokens = wt::wan::patchify(x, patch);
    const auto grid = wt::wan::token_grid(x.sizes(), patch);
    EXPECT_EQ(tokens.size(1), grid[0] * grid[1] * grid[2]);
    EXPECT_TRUE(torch::equal(wt::wan::unpatchify(tokens, grid, patch, 3), x));
  }
}

TEST(Patches, PatchEmbeddingIsALinearMapOfEachPatch) {
  auto config = tiny_config();
  wt::wan::WanModel model(config);
  torch::manual_seed(3);
  const auto x = torch::randn({2, config.in_dim, 3, 4, 6});
  const auto conv = model->patch_embedding(x).flatten(2).transpose(1, 2);  // [B, L, dim]
  // Conv3d weight [dim, C, pf, ph, pw] as a matrix over (pf, ph, pw, C) patch layout.
  const auto w = model->patch_embedding->weight.permute({0, 2, 3, 4, 1}).reshape({config.dim, -1});
  const auto linear = torch::matmul(wt::wan::patchify(x, config.patch_size), w.t()) + model->patch_embedding->bias;
  EXPECT_TRUE(torch::allclose(conv, linear, 1e-5, 1e-5));
}

TEST(Patches, SizeNotAMultipleOfThePatchIsNamed) {
  try {
    wt::wan::token_grid(torch::IntArrayRef{1, 4, 3, 5, 4}, {1, 2, 2});
    FAIL();
  } catch (const wt::UsageError& e) {
    EXPECT_STREQ(e.what(), "latent height 5 is not a positive multiple of the model's patch size 2");
  }
}

// One block with one token and one context position, weights set so that each
// sub-layer is a known function: self-attention over a single token is o(v(.)),
// with identity o and v it returns its input; cross-attention over a single
// context position returns that (embedded) context; the FFN with identity
// matrices is GELU(tanh). What is left is Wan's modulation and gating, which
// the expected value below writes out by hand.
TEST(WanBlock, ModulationAndGatingMatchAHandComputation) {
  WanConfig c = tiny_config();
  c.dim = 4;
  c.num_heads = 1;
  c.ffn_dim = 4;
  c.num_layers = 1;
  c.eps = 1e-6;
  wt::wan::WanBlock block(c);
  torch::NoGradGuard no_grad;
  for (auto& p : block->parameters()) p.zero_();
  const auto eye = torch::eye(4);
  for (auto* attn : {&block->self_attn, &block->cross_attn}) {
    (*attn)->v->weight.copy_(eye);
    (*attn)->o->weight.copy_(eye);
    (*attn)->norm_q->weight.fill_(1);
    (*attn)->norm_k->weight.fill_(1);
  }
  block->ffn[0]->as<wt::nn::Linear>()->weight.copy_(eye);
  block->ffn[2]->as<wt::nn::Linear>()->weight.copy_(eye);
  block->norm3->weight.fill_(1);
  // modulation + e0 = rows (shift_sa, scale_sa, gate_sa, shift_ff, scale_ff, gate_ff)
  const double mod[6][4] = {{0.1, -0.2, 0.3, 0.0}, {0.5, 0.0, -0.5, 1.0}, {1.0, 2.0, 0.5, -1.0},
                            {-0.3, 0.2, 0.0, 0.1}, {0.0, 1.0, 0.5, -0.5}, {0.5, -1.0, 2.0, 1.0}};
  auto m = torch::empty({1, 6, 4});
  for (int r = 0; r < 6; ++r)
    for (int k = 0; k < 4; ++k) m[0][r][k] = mod[r][k];
  block->modulation.copy_(m * 0.5);
  const auto e0 = m * 0.5;  // modulation + e0 = m
  const double x_in[4] = {1.0, -2.0, 0.5, 3.0};
  const double ctx_in[4] = {0.25, 0.0, -1.0, 2.0};
  const auto x = torch::tensor(std::vector<double>(x_in, x_in + 4), torch::kFloat32).view({1, 1, 4});
  const auto ctx = torch::tensor(std::vector<double>(ctx_in, ctx_in + 4), torch::kFloat32).view({1, 1, 4});
  const auto rope = wt::wan::rope_table({1, 1, 1}, 4);
  const auto out = block->forward(x, e0, ctx, rope);

  auto layer_norm = [](std::array<double, 4> v) {
    double mean = 0, var = 0;
    for (double a : v) mean += a / 4;
    for (double a : v) var += (a - mean) * (a - mean) / 4;
    for (double& a : v) a = (a - mean) / std::sqrt(var + 1e-6);
    return v;
  };
  auto gelu_tanh = [](double a) { return 0.5 * a * (1 + std::tanh(std::sqrt(2 / M_PI) * (a + 0.044715 * a * a * a))); };
  std::array<double, 4> h{x_in[0], x_in[1], x_in[2], x_in[3]};
  auto n1 = layer_norm(h);
  for (int k = 0; k < 4; ++k) h[k] += (n1[k] * (1 + mod[1][k]) + mod[0][k]) * mod[2][k];  // self-attention = identity
  for (int k = 0; k < 4; ++k) h[k] += ctx_in[k];                                          // cross-attention = context
  auto n2 = layer_norm(h);
  for (int k = 0; k < 4; ++k) h[k] += gelu_tanh(n2[k] * (1 + mod[4][k]) + mod[3][k]) * mod[5][k];
  for (int k = 0; k < 4; ++k) EXPECT_NEAR(out[0][0][k].item<double>(), h[k], 1e-5) << "channel " << k;
}

TEST(WanModel, OutputHasTheLatentShapeAndStartsAtZero) {
  const auto config = tiny_config();
  torch::manual_seed(4);
  wt::wan::WanModel model(config);
  const auto x = torch::randn({2, config.in_dim, 3, 8, 6});
  const auto t = torch::tensor({10.0f, 900.0f});
  const auto ctx = torch::randn({2, 5, config.text_dim});  // shorter than text_len: zero-padded
  const auto out = model->forward(x, t, ctx);
  EXPECT_EQ(out.sizes(), x.sizes());
  // Wan initialises head.head to zero, so an untrained model predicts zero velocity.
  EXPECT_EQ(out.abs().max().item<float>(), 0.0f);
}

TEST(WanModel, ContextIsZeroPaddedToTextLen) {
  const auto config = tiny_config();
  torch::manual_seed(5);
  wt::wan::WanModel model(config);
  torch::NoGradGuard no_grad;
  model->head->head->weight.normal_(0, 0.1);
  const auto x = torch::randn({1, config.in_dim, 1, 4, 4});
  const auto t = torch::tensor({500.0f});
  const auto ctx = torch::randn({1, 3, config.text_dim});
  const auto padded = torch::cat({ctx, torch::zeros({1, config.text_len - 3, config.text_dim})}, 1);
  EXPECT_TRUE(torch::allclose(model->forward(x, t, ctx), model->forward(x, t, padded), 1e-6, 1e-6));
  EXPECT_THROW(model->forward(x, t, torch::randn({1, config.text_len + 1, config.text_dim})), wt::UsageError);
  EXPECT_THROW(model->forward(torch::randn({1, config.in_dim + 1, 1, 4, 4}), t, ctx), wt::UsageError);
}

TEST(WanModel, Bf16AutocastStaysCloseToFp32AndKeepsFp32Parts) {
  const auto config = tiny_config();
  torch::manual_seed(6);
  wt::wan::WanModel model(config);
  torch::NoGradGuard no_grad;
  model->head->head->weight.normal_(0, 0.1);
  const auto x = torch::randn({2, config.in_dim, 2, 4, 4});
  const auto t = torch::tensor({100.0f, 700.0f});
  const auto ctx = torch::randn({2, config.text_len, config.text_dim});
  const auto reference = model->forward(x, t, ctx);
  at::Tensor low;
  {
    wt::nn::AutocastScope bf16(torch::kBFloat16, torch::kCPU);
    low = model->forward(x, t, ctx);
  }
  EXPECT_EQ(low.scalar_type(), torch::kFloat32);  // the head runs in fp32
  const double relative = ((low - reference).norm() / reference.norm()).item<double>();
  EXPECT_LT(relative, 0.05);
  EXPECT_GT(relative, 0.0);  // bf16 did run
}

TEST(WanModel, SameSeedSameWeights) {
  torch::manual_seed(7);
  wt::wan::WanModel a(tiny_config());
  torch::manual_seed(7);
  wt::wan::WanModel b(tiny_config());
  const auto pa = a->parameters(), pb = b->parameters();
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i], pb[i]));
}

// parameter_shapes names what a built model holds, in its order, for every
// kind of model (ModelConfig.ModelParametersAreExactlyTheDerivedShapes
// covers the norm settings of text to video); a file's header is checked
// against it before a model is built, with the error strict loading gives.
TEST(WanModel, EveryKindOfModelHoldsItsDerivedShapesAndHeadersAreCheckedAgainstThem) {
  std::vector<WanConfig> configs;
  for (auto type :
       {wt::wan::ModelType::T2V, wt::wan::ModelType::I2V, wt::wan::ModelType::FLF2V, wt::wan::ModelType::TI2V})
    for (bool norms : {true, false}) {
      auto c = tiny_config();
      c.model_type = type;
      c.qk_norm = c.cross_attn_norm = norms;
      if (c.image_conditioned()) {
        c.in_dim = 2 * c.out_dim + 4;
        c.image_dim = 48;
        c.image_tokens = 5;
      }
      configs.push_back(c);
    }
  auto no_clip = configs[2];  // Wan2.2's I2V: no CLIP branch
  no_clip.image_dim = 0;
  no_clip.image_tokens = 257;  // the default, which a model without the branch keeps
  configs.push_back(no_clip);
  for (const auto& config : configs) {
    wt::wan::WanModel model(config, at::kFloat, wt::wan::WanInit::Empty);
    std::vector<wt::wan::ParameterShape> built;
    for (const auto& item : model->named_parameters(true)) built.emplace_back(item.key(), item.value().sizes().vec());
    EXPECT_EQ(wt::wan::parameter_shapes(config), built) << wt::wan::to_json(config);
  }

  // A header that fits passes; one of another width or depth is the
  // UsageError that strict loading gives, naming the file.
  const auto config = tiny_config();
  wt::wan::WanModel model(config);
  wt::io::NamedTensors tensors;
  for (const auto& item : model->named_parameters(true)) tensors.emplace_back(item.key(), item.value());
  const auto source = wt::wan::tensors_source(tensors, "tiny.safetensors");
  EXPECT_NO_THROW(wt::wan::check_weights_fit(source, config));
  auto wider = config;
  wider.dim = 128;
  auto deeper = config;
  deeper.num_layers = 3;
  for (const auto& other : {wider, deeper}) {
    try {
      wt::wan::check_weights_fit(source, other);
      ADD_FAILURE() << "no error for " << wt::wan::to_json(other);
    } catch (const wt::UsageError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("weights tiny.safetensors: do not match the model: "), std::string::npos) << what;
      wt::wan::WanModel built(other, at::kFloat, wt::wan::WanInit::Empty);
      try {
        wt::wan::load_weights(*built, source);
        ADD_FAILURE() << "loading passed";
      } catch (const wt::UsageError& loading) {
        EXPECT_EQ(what, std::string(loading.what()));  // the same line as loading would give
      }
    }
  }
}

// The model keeps RoPE's table of the last token grid; a new grid must not reuse it.
TEST(WanModel, AnotherLatentSizeGetsItsOwnRopeTable) {
  const auto config = tiny_config();
  torch::manual_seed(8);
  wt::wan::WanModel model(config);
  torch::NoGradGuard no_grad;
  model->head->head->weight.normal_(0, 0.1);
  const auto ctx = torch::randn({1, config.text_len, config.text_dim});
  const auto t = torch::tensor({300.0f});
  const auto small = torch::randn({1, config.in_dim, 2, 4, 4}), large = torch::randn({1, config.in_dim, 3, 6, 8});
  const auto small_first = model->forward(small, t, ctx);
  const auto large_after_small = model->forward(large, t, ctx);
  EXPECT_TRUE(torch::equal(model->forward(small, t, ctx), small_first));
  torch::manual_seed(8);
  wt::wan::WanModel fresh(config);
  fresh->head->head->weight.copy_(model->head->head->weight);
  EXPECT_TRUE(torch::equal(fresh->forward(large, t, ctx), large_after_small));
}

namespace {

WanConfig image_config(wt::wan::ModelType type, int64_t image_dim) {
  auto c = tiny_config();
  c.model_type = type;
  c.image_dim = image_dim;
  c.image_tokens = image_dim > 0 ? 3 : 257;
  c.in_dim = 2 * c.out_dim + 4;
  return c;
}

// A model with every weight drawn (Wan zero-initialises the head and emb_pos).
// The UsageError the model's forward gives for `condition`, or "(no error)".
std::string forward_error(wt::wan::WanModelImpl& model, const at::Tensor& x, const at::Tensor& t,
                          const at::Tensor& context, const wt::wan::ModelCondition& condition) {
  try {
    model.forward(x, t, context, condition);
  } catch (const wt::UsageError& e) {
    return std::string(e.what());
  }
  return "(no error)";
}

wt::wan::WanModel drawn_model(const WanConfig& config, uint64_t seed) {
  torch::manual_seed(seed);
  wt::wan::WanModel model(config);
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) p.copy_(torch::randn_like(p) * 0.2);
  return model;
}

// The model's output for `condition` and every parameter's gradient of its squared sum.
std::pair<at::Tensor, std::vector<at::Tensor>> output_and_gradients(wt::wan::WanModelImpl& model, const at::Tensor& x,
                                                                    const at::Tensor& t, const at::Tensor& ctx,
                                                                    const wt::wan::ModelCondition& condition) {
  model.zero_grad();
  const auto out = model.forward(x, t, ctx, condition);
  out.square().sum().backward();
  std::vector<at::Tensor> grads;
  for (const auto& p : model.parameters()) grads.push_back(p.grad().clone());
  return {out.detach(), grads};
}

// |a - b| against |b|, in the Frobenius norm.
double relative(const at::Tensor& a, const at::Tensor& b) {
  return ((a - b).norm() / b.norm().clamp_min(1e-30)).item<double>();
}

wt::wan::ModelCondition condition_for(const WanConfig& c, int64_t b, int64_t f, int64_t h, int64_t w) {
  wt::wan::ModelCondition image{torch::randn({b, c.condition_channels(), f, h, w}), {}};
  if (c.image_branch()) image.clip_fea = torch::randn({b, c.condition_images() * c.image_tokens, c.image_dim});
  return image;
}

}  // namespace

TEST(WanModel, ImageModelsHaveTheOfficialParametersInOrder) {
  for (auto [type, image_dim] : {std::pair{wt::wan::ModelType::I2V, int64_t(12)},
                                 {wt::wan::ModelType::FLF2V, 12},
                                 {wt::wan::ModelType::I2V, 0}}) {
    const auto config = image_config(type, image_dim);
    torch::manual_seed(1);
    wt::wan::WanModel model(config);
    const auto shapes = wt::wan::parameter_shapes(config);
    const auto params = model->named_parameters();
    ASSERT_EQ(params.size(), shapes.size());
    for (size_t i = 0; i < shapes.size(); ++i) {
      EXPECT_EQ(params[i].key(), shapes[i].first);
      EXPECT_EQ(params[i].value().sizes().vec(), shapes[i].second) << shapes[i].first;
    }
    EXPECT_EQ(bool(model->img_emb), image_dim > 0);
  }
}

// Chunked attention and checkpointed blocks pass the image context as the
// plain forward does: the same output and the same gradients.
TEST(WanModel, ImageBranchUnderChunkedAttentionAndCheckpointingComputesTheSame) {
  const auto config = image_config(wt::wan::ModelType::FLF2V, 12);
  auto model = drawn_model(config, 9);
  const auto x = torch::randn({2, config.out_dim, 2, 4, 6});
  const auto t = torch::tensor({250.0f, 800.0f});
  const auto ctx = torch::randn({2, config.text_len, config.text_dim});
  const auto image = condition_for(config, 2, 2, 4, 6);
  auto run = [&] { return output_and_gradients(*model, x, t, ctx, image); };
  const auto [plain, plain_grads] = run();
  model->set_attention_chunk(5);
  model->set_grad_checkpoint(1);
  const auto [other, other_grads] = run();
  // Relative to each tensor's size: the chunks sum in another order (seen:
  // up to 3e-5 with these sharp, all-random weights); a lost image context
  // would change them by order 1.
  EXPECT_LT(relative(other, plain), 1e-4);
  for (size_t i = 0; i < plain_grads.size(); ++i) EXPECT_LT(relative(other_grads[i], plain_grads[i]), 1e-4) << i;
}

// The condition matters: another y or other CLIP features change the output.
TEST(WanModel, ImageModelsReadTheirCondition) {
  const auto config = image_config(wt::wan::ModelType::I2V, 12);
  auto model = drawn_model(config, 10);
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({1, config.out_dim, 2, 4, 4});
  const auto t = torch::tensor({400.0f});
  const auto ctx = torch::randn({1, config.text_len, config.text_dim});
  auto image = condition_for(config, 1, 2, 4, 4);
  const auto base = model->forward(x, t, ctx, image);
  auto other_y = image;
  other_y.y = torch::randn_like(image.y);
  auto other_clip = image;
  other_clip.clip_fea = torch::randn_like(image.clip_fea);
  EXPECT_GT((model->forward(x, t, ctx, other_y) - base).abs().max().item<double>(), 1e-3);
  EXPECT_GT((model->forward(x, t, ctx, other_clip) - base).abs().max().item<double>(), 1e-3);
}

TEST(WanModel, AMissingOrMisshapenConditionIsNamed) {
  const auto config = image_config(wt::wan::ModelType::I2V, 12);
  auto model = drawn_model(config, 11);
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({1, config.out_dim, 2, 4, 4});
  const auto t = torch::tensor({400.0f});
  const auto ctx = torch::randn({1, config.text_len, config.text_dim});
  const auto image = condition_for(config, 1, 2, 4, 4);
  auto message = [&](const wt::wan::ModelCondition& c, const at::Tensor& input) {
    try {
      model->forward(input, t, ctx, c);
    } catch (const wt::UsageError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(message({{}, image.clip_fea}, x), "this i2v model needs the image condition y");
  EXPECT_EQ(message({image.y, {}}, x), "this i2v model needs the CLIP features of its picture");
  EXPECT_EQ(message({image.y.narrow(2, 0, 1), image.clip_fea}, x),
            "model condition y must be [1,8,2,4,4] (the latents' batch, F, H, W), got [1,8,1,4,4]");
  EXPECT_EQ(message({image.y, image.clip_fea.narrow(1, 0, 2)}, x),
            "model CLIP features must be [1,3,12], got [1,2,12]");
  EXPECT_EQ(message(image, torch::randn({1, config.in_dim, 2, 4, 4})),
            "model input must be latents [B, 4, F, H, W], got [1,12,2,4,4]");
  // A text-to-video model takes no condition.
  auto t2v = drawn_model(tiny_config(), 12);
  EXPECT_THROW(t2v->forward(torch::randn({1, 4, 2, 4, 4}), t, ctx, {torch::randn({1, 8, 2, 4, 4}), {}}),
               wt::UsageError);
}

namespace {

// A VACE model of 3 blocks, hints after blocks 0 and 2, a context of 6 channels.
WanConfig vace_config() {
  auto c = tiny_config();
  c.num_layers = 3;
  c.model_type = wt::wan::ModelType::VACE;
  c.vace_layers = {0, 2};
  c.vace_in_dim = 6;
  return c;
}

}  // namespace

// VaceWanModel's parameters, in order; a fresh VACE branch (before_proj and
// after_proj zero, as released) adds nothing, so a base model's weights
// with a new branch sample as the base model; with the projections drawn
// the context counts, in proportion to the scale (scale 0: the base model).
TEST(VaceModel, AFreshBranchAddsNothingAndTheContextCountsByItsScale) {
  const auto config = vace_config();
  torch::manual_seed(1);
  wt::wan::WanModel model(config);
  const auto shapes = wt::wan::parameter_shapes(config);
  const auto params = model->named_parameters();
  ASSERT_EQ(params.size(), shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    EXPECT_EQ(params[i].key(), shapes[i].first);
    EXPECT_EQ(params[i].value().sizes().vec(), shapes[i].second) << shapes[i].first;
  }
  EXPECT_TRUE(params.contains("vace_blocks.0.before_proj.weight"));
  EXPECT_FALSE(params.contains("vace_blocks.1.before_proj.weight"));
  EXPECT_EQ(params["vace_blocks.1.after_proj.weight"].abs().max().item<double>(), 0.0);

  auto base_config = config;
  base_config.model_type = wt::wan::ModelType::T2V;
  base_config.vace_layers.clear();
  base_config.vace_in_dim = 0;
  auto base = drawn_model(base_config, 2);
  torch::NoGradGuard no_grad;
  auto mine = model->named_parameters();
  for (const auto& item : base->named_parameters()) mine[item.key()].copy_(item.value());
  const auto x = torch::randn({1, config.out_dim, 2, 4, 4});
  const auto t = torch::tensor({400.0f});
  const auto ctx = torch::randn({1, config.text_len, config.text_dim});
  wt::wan::ModelCondition control;
  control.vace_context = torch::randn({1, config.vace_in_dim, 2, 4, 4});
  const auto expected = base->forward(x, t, ctx);
  EXPECT_TRUE(torch::equal(model->forward(x, t, ctx, control), expected));

  for (auto& item : model->named_parameters())
    if (item.key().find("_proj.") != std::string::npos) item.value().normal_(0, 0.2);
  const auto full = model->forward(x, t, ctx, control);
  EXPECT_GT((full - expected).abs().max().item<double>(), 1e-2);
  control.vace_scale = 0;
  EXPECT_TRUE(torch::equal(model->forward(x, t, ctx, control), expected));
  auto other = control;
  other.vace_scale = 1;
  other.vace_context = torch::randn_like(control.vace_context);
  EXPECT_GT((model->forward(x, t, ctx, other) - full).abs().max().item<double>(), 1e-3);
}

// LoRA on the VACE blocks alone (--trainable vace) adapts their Linears and
// projections, before_proj where the first block has it: the output stays
// the model's until trained, and with a fresh branch (projections zero) the
// projections' adapters are what makes the context reach the output, so a
// step of training moves it; named on a t2v model they are one line.
TEST(VaceModel, LoraOnTheVaceBlocksAdaptsTheirProjectionsSoAFreshBranchLearns) {
  const auto config = vace_config();
  auto model = drawn_model(config, 5);  // a trained base
  {
    torch::NoGradGuard no_grad;  // and a fresh branch: its projections zero
    for (auto& item : model->named_parameters())
      if (item.key().find("_proj.") != std::string::npos) item.value().zero_();
  }
  wt::wan::LoraOptions options;
  options.rank = 4;
  options.vace_only = true;
  const int64_t count = wt::wan::add_lora(*model, options);
  std::vector<std::string> adapted;
  int64_t expected = 0;
  for (const auto& item : model->named_parameters())
    if (item.value().requires_grad()) {
      adapted.push_back(item.key());
      expected += item.value().numel();
    }
  EXPECT_EQ(count, expected);
  for (const auto& name : adapted) EXPECT_EQ(name.rfind("vace_blocks.", 0), 0u) << name;
  auto has = [&](const std::string& name) { return std::count(adapted.begin(), adapted.end(), name) == 1; };
  EXPECT_TRUE(has("vace_blocks.0.before_proj.lora_A"));
  EXPECT_TRUE(has("vace_blocks.0.after_proj.lora_B"));
  EXPECT_TRUE(has("vace_blocks.1.after_proj.lora_A"));
  EXPECT_TRUE(has("vace_blocks.1.self_attn.q.lora_A"));
  EXPECT_EQ(adapted.size(), size_t(2 * (2 * 10 + 1) + 2 * 2)) << "ten Linears and after_proj each, before_proj once";

  const auto x = torch::randn({1, config.out_dim, 2, 4, 4});
  const auto t = torch::tensor({400.0f});
  const auto ctx = torch::randn({1, config.text_len, config.text_dim});
  wt::wan::ModelCondition control;
  control.vace_context = torch::randn({1, config.vace_in_dim, 2, 4, 4});
  const auto before = model->forward(x, t, ctx, control).detach();
  auto other = control;
  other.vace_context = torch::randn_like(control.vace_context);
  EXPECT_TRUE(torch::equal(model->forward(x, t, ctx, other), before)) << "a fresh branch reads no context";
  const auto target = torch::randn_like(before);
  torch::optim::SGD sgd(model->parameters(), 0.5);
  for (int step = 0; step < 3; ++step) {
    sgd.zero_grad();
    (model->forward(x, t, ctx, control) - target).square().mean().backward();
    sgd.step();
  }
  torch::NoGradGuard no_grad;
  const auto after = model->forward(x, t, ctx, control);
  EXPECT_GT((after - before).abs().max().item<double>(), 1e-4);
  EXPECT_GT((model->forward(x, t, ctx, other) - after).abs().max().item<double>(), 1e-6)
      << "after training, the context reaches the output";

  auto t2v = drawn_model(tiny_config(), 6);
  wt::wan::LoraOptions named;
  named.rank = 4;
  named.targets = {"after_proj"};
  try {
    wt::wan::add_lora(*t2v, named);
    ADD_FAILURE() << "no error";
  } catch (const wt::SettingError& e) {
    EXPECT_EQ(e.setting() + ": " + e.message(),
              "lora_targets: 'after_proj': this t2v model has no such layer (the VACE projections are a VACE "
              "model's)");
  }
}

// Checkpointed and chunked VACE blocks give the plain forward's output and
// gradients (offloaded too); a missing, misshapen or unexpected context is one line.
TEST(VaceModel, CheckpointedBlocksComputeTheSameAndTheContextIsChecked) {
  const auto config = vace_config();
  auto model = drawn_model(config, 3);
  const auto x = torch::randn({2, config.out_dim, 2, 4, 6});
  const auto t = torch::tensor({250.0f, 800.0f});
  const auto ctx = torch::randn({2, config.text_len, config.text_dim});
  wt::wan::ModelCondition control;
  control.vace_context = torch::randn({2, config.vace_in_dim, 2, 4, 6});
  control.vace_scale = 0.5;
  auto run = [&] { return output_and_gradients(*model, x, t, ctx, control); };
  const auto [plain, plain_grads] = run();
  model->set_attention_chunk(5);
  model->set_grad_checkpoint(1);
  const auto [other, other_grads] = run();
  EXPECT_LT(relative(other, plain), 1e-4);
  for (size_t i = 0; i < plain_grads.size(); ++i) EXPECT_LT(relative(other_grads[i], plain_grads[i]), 1e-4) << i;
  // Their inputs offloaded (in the queue between the base blocks'): the same bits.
  model->set_activation_offload(true);
  const auto [offloaded, offloaded_grads] = run();
  EXPECT_TRUE(torch::equal(offloaded, other));
  for (size_t i = 0; i < plain_grads.size(); ++i) EXPECT_TRUE(torch::equal(offloaded_grads[i], other_grads[i])) << i;
  const auto names = model->named_parameters();
  EXPECT_GT(names["vace_blocks.0.before_proj.weight"].grad().abs().max().item<double>(), 0.0);

  torch::NoGradGuard no_grad;
  auto message = [&](wt::wan::WanModelImpl& m, const wt::wan::ModelCondition& c) {
    return forward_error(m, x, t, ctx, c);
  };
  EXPECT_EQ(message(*model, {}), "this vace model needs its VACE context");
  auto short_context = control;
  short_context.vace_context = control.vace_context.narrow(2, 0, 1);
  EXPECT_EQ(message(*model, short_context),
            "model VACE context must be [2,6,2,4,6] (the latents' batch, F, H, W), got [2,6,1,4,6]");
  auto t2v = drawn_model(tiny_config(), 4);
  EXPECT_EQ(message(*t2v, control), "a t2v model has no VACE blocks: it takes no VACE context");
}

// A Fun-Control V1.1 model's reference tokens: without full_ref it reads
// zeros (the same bits as zeros given), a reference changes the output but
// not its shape, and a misshapen full_ref, or one given to a model without
// ref_conv, is one line.
TEST(FunControlModel, TheReferenceTokensAreZerosUnlessGivenAndChecked) {
  WanConfig config = tiny_config();
  config.model_type = wt::wan::ModelType::I2V;
  config.out_dim = 6;  // with 4, in_dim 3 x 4 = 2 x 4 + 4 would be an i2v model's
  config.in_dim = 18;
  config.ref_conv = true;
  ASSERT_TRUE(config.fun_control());
  auto model = drawn_model(config, 12);
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({2, 6, 2, 4, 6}), t = torch::tensor({300.0f, 800.0f});
  const auto ctx = torch::randn({2, 5, config.text_dim});
  wt::wan::ModelCondition condition;
  condition.y = torch::randn({2, 12, 2, 4, 6});
  const auto without = model->forward(x, t, ctx, condition);
  auto zeros = condition;
  zeros.full_ref = torch::zeros({2, 6, 4, 6});
  EXPECT_TRUE(torch::equal(model->forward(x, t, ctx, zeros), without));
  auto reference = condition;
  reference.full_ref = torch::randn({2, 6, 4, 6});
  const auto with = model->forward(x, t, ctx, reference);
  ASSERT_EQ(with.sizes(), without.sizes());
  EXPECT_GT((with - without).abs().max().item<double>(), 1e-3 * without.abs().max().item<double>());

  auto message = [&](wt::wan::WanModelImpl& m, const wt::wan::ModelCondition& c) {
    return forward_error(m, x, t, ctx, c);
  };
  auto misshapen = condition;
  misshapen.full_ref = torch::zeros({2, 6, 2, 6});
  EXPECT_EQ(message(*model, misshapen),
            "model reference latents full_ref must be [2,6,4,6] (the latents' batch, H, W), got [2,6,2,6]");
  config.ref_conv = false;
  auto v10 = drawn_model(config, 12);
  EXPECT_EQ(message(*v10, reference),
            "this model has no ref_conv (add_ref_conv): it takes no reference latents full_ref");
}
