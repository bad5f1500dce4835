// LoRA on WanModel: adding adapters changes nothing until they are trained;
// only the adapters train; an adapter is base + alpha/rank * B A exactly as
// its merged weight says; bad options are named.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "../../../common/small_models.hpp"
#include "wantrain/nn/autocast.hpp"
#include "wantrain/nn/linear.hpp"
#include "wantrain/wan/model/lora.hpp"
#include "wantrain/wan/model/lora_file.hpp"
#include "wantrain/io/safetensors.hpp"
#include "wantrain/wan/model/weight_names.hpp"
#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/model/weights.hpp"
#include "wantrain/wan/objective/flow_matching_objective.hpp"
#include "wantrain/util/error.hpp"

namespace {

using wt::wan::LoraOptions;
using wt::wan::WanConfig;
using wt::wan::WanModel;

WanConfig tiny() { return wt::testing::small_wan_config(); }

struct Inputs {
  at::Tensor x, t, context;
};
Inputs inputs() {
  torch::manual_seed(3);
  return {torch::randn({2, 4, 2, 4, 4}), torch::tensor({100.0f, 700.0f}), torch::randn({2, 8, 16})};
}
at::Tensor run(WanModel& model, const Inputs& in) { return model->forward(in.x, in.t, in.context); }

WanModel seeded_model(const LoraOptions& lora, at::ScalarType base_dtype = at::kFloat) {
  return wt::testing::seeded_small_model(tiny(), lora, base_dtype);
}

}  // namespace

TEST(Lora, AddingAdaptersLeavesTheOutputUnchanged) {
  const auto in = inputs();
  auto base = seeded_model({});
  auto adapted = seeded_model({4, 8, 0, {}});
  EXPECT_TRUE(torch::equal(run(base, in), run(adapted, in)));
}

bool is_block_linear(const std::string& name) {
  if (name.rfind("blocks.", 0) != 0) return false;
  for (const char* part : {"_attn.q.", "_attn.k.", "_attn.v.", "_attn.o.", ".ffn."})
    if (name.find(part) != std::string::npos) return true;
  return false;
}

// A bf16 base is built in bf16: its block Linears are the fp32 model's
// values rounded, from the same draws; everything else is the fp32 model's.
TEST(Lora, ABf16BaseHoldsTheFp32ModelRounded) {
  auto fp32 = seeded_model({});
  auto bf16 = seeded_model({}, at::kBFloat16);
  const auto reference = fp32->named_parameters();
  int64_t block_linears = 0;
  for (const auto& item : bf16->named_parameters()) {
    const auto& expected = reference[item.key()];
    if (is_block_linear(item.key())) {
      ++block_linears;
      EXPECT_EQ(item.value().scalar_type(), at::kBFloat16) << item.key();
      EXPECT_TRUE(torch::equal(item.value(), expected.to(at::kBFloat16))) << item.key();
    } else {
      EXPECT_EQ(item.value().scalar_type(), at::kFloat) << item.key();
      EXPECT_TRUE(torch::equal(item.value(), expected)) << item.key();
    }
  }
  EXPECT_EQ(block_linears, tiny().num_layers * 10 * 2);  // 10 Linears a block, weight and bias
}

// Under bf16 autocast an fp32 model computes its Linears on the bf16-rounded
// weights, which is what a bf16 base holds: the outputs are the same bits.
// Without autocast the bf16 base computes its Linears in bf16 and the rest
// in fp32, so it stays within bf16 precision of the fp32 model.
TEST(Lora, ABf16BaseComputesAsTheFp32ModelUnderBf16Autocast) {
  const auto in = inputs();
  auto fp32 = seeded_model({});
  auto bf16 = seeded_model({}, at::kBFloat16);
  {
    wt::nn::AutocastScope autocast(at::kBFloat16, at::kCPU);
    EXPECT_TRUE(torch::equal(run(fp32, in), run(bf16, in)));
  }
  const auto expected = run(fp32, in);
  const auto got = run(bf16, in);
  EXPECT_EQ(got.scalar_type(), at::kFloat);
  EXPECT_LT((got - expected).abs().max().item<double>(), 0.02 * expected.abs().max().item<double>());
}

TEST(Lora, AdaptersOnABf16BaseTrainInFp32AndStartAtTheBase) {
  const auto in = inputs();
  auto base = seeded_model({}, at::kBFloat16);
  auto adapted = seeded_model({4, 8, 0, {}}, at::kBFloat16);
  EXPECT_TRUE(torch::equal(run(base, in), run(adapted, in)));
  run(adapted, in).square().mean().backward();
  for (const auto& item : adapted->named_parameters()) {
    if (item.key().find(".lora_") == std::string::npos) {
      EXPECT_FALSE(item.value().grad().defined()) << item.key();
      continue;
    }
    EXPECT_EQ(item.value().scalar_type(), at::kFloat) << item.key();
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    EXPECT_EQ(item.value().grad().scalar_type(), at::kFloat) << item.key();
  }
}

// --init into a bf16 base: a bf16 file's tensors are copied in as they are.
TEST(Lora, WeightsLoadIntoABf16BaseInBf16) {
  auto source = seeded_model({});
  const std::string path = ::testing::TempDir() + "/lora-bf16-base.safetensors";
  wt::wan::save_weights(*source, path, at::kBFloat16);
  torch::manual_seed(99);
  WanModel base(tiny(), at::kBFloat16);
  wt::wan::load_weights(*base, path);
  const auto expected = source->named_parameters();
  for (const auto& item : base->named_parameters()) {
    EXPECT_EQ(item.value().scalar_type(), is_block_linear(item.key()) ? at::kBFloat16 : at::kFloat) << item.key();
    EXPECT_TRUE(torch::equal(item.value().to(at::kFloat), expected[item.key()].to(at::kBFloat16).to(at::kFloat)))
        << item.key();
  }
}

TEST(Lora, OnlyTheAdaptersOfTheChosenTargetsTrain) {
  LoraOptions lora{4, 0, 0, {"self_attn.q", "ffn.2"}};
  auto model = seeded_model({});
  const int64_t added = wt::wan::add_lora(*model, lora);
  const auto c = tiny();
  // Per block: q [4, 32] + [32, 4], ffn.2 [4, 64] + [32, 4].
  EXPECT_EQ(added, c.num_layers * (4 * 32 + 32 * 4 + 4 * 64 + 32 * 4));
  int64_t trainable = 0;
  for (const auto& item : model->named_parameters()) {
    const bool adapter = item.key().find(".lora_") != std::string::npos;
    EXPECT_EQ(item.value().requires_grad(), adapter) << item.key();
    if (item.value().requires_grad()) trainable += item.value().numel();
  }
  EXPECT_EQ(trainable, added);
  const auto names = model->named_parameters();
  EXPECT_NE(names.find("blocks.1.self_attn.q.lora_A"), nullptr);
  EXPECT_NE(names.find("blocks.0.ffn.2.lora_B"), nullptr);
  EXPECT_EQ(names.find("blocks.0.self_attn.k.lora_A"), nullptr);

  // A backward pass reaches the adapters only; B starts at zero, so only
  // B has a gradient at first (A's is B^T times the output gradient).
  const auto in = inputs();
  run(model, in).square().mean().backward();
  for (const auto& item : model->named_parameters()) {
    if (!item.value().requires_grad()) {
      EXPECT_FALSE(item.value().grad().defined()) << item.key();
      continue;
    }
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    if (item.key().find("lora_B") != std::string::npos) {
      EXPECT_GT(item.value().grad().abs().max().item<float>(), 0.0f) << item.key();
    }
  }
}

TEST(Lora, AnAdapterIsItsMergedWeight) {
  const auto in = inputs();
  LoraOptions lora{3, 6, 0, {}};  // scale 2
  auto model = seeded_model(lora);
  {
    torch::NoGradGuard no_grad;
    torch::manual_seed(5);
    for (const auto& item : model->named_parameters())
      if (item.key().find("lora_B") != std::string::npos) item.value().normal_(0, 0.05);
  }
  auto* q = model->blocks[0]->as<wt::wan::WanBlockImpl>()->self_attn->q.get();
  const auto expected_q = q->weight.detach() + 2.0 * torch::matmul(q->lora_B.detach(), q->lora_A.detach());
  const auto adapted = run(model, in).detach();
  wt::wan::merge_lora(*model);
  EXPECT_FALSE(q->has_lora());
  EXPECT_EQ(model->named_parameters().size(), WanModel(tiny())->named_parameters().size());
  EXPECT_TRUE(torch::allclose(q->weight, expected_q, 1e-6, 1e-6));
  const auto merged = run(model, in);
  auto base = seeded_model({});
  EXPECT_FALSE(torch::equal(adapted, run(base, in)));  // the adapters did change the output
  EXPECT_TRUE(torch::allclose(merged, adapted, 1e-4, 1e-5)) << (merged - adapted).abs().max().item<float>();
}

TEST(Lora, BadOptionsNameTheSetting) {
  auto error = [](const LoraOptions& options) -> std::string {
    try {
      wt::wan::check_lora_options(options);
    } catch (const wt::SettingError& e) {
      return e.setting() + ": " + e.message();
    }
    return "(no error)";
  };
  EXPECT_EQ(error({4, 0, 0, {}}), "(no error)");
  EXPECT_EQ(error({0, 0, 0, {}}), "lora_rank: must be at least 1, got 0");
  EXPECT_EQ(error({4, -1, 0, {}}), "lora_alpha: must be 0 or more, got -1");
  EXPECT_EQ(error({4, 0, 1, {}}), "lora_dropout: must be in [0, 1), got 1");
  EXPECT_EQ(error({4, 0, 0, {"ffn.0", "ffn.0"}}), "lora_targets: 'ffn.0' is named twice");
  EXPECT_EQ(error({4, 0, 0, {"self_attn.q", "attn1.to_q"}}),
            "lora_targets: 'attn1.to_q' is not a Linear layer of a Wan block, a VACE block or the image embedding "
            "(valid: self_attn.q, self_attn.k, self_attn.v, self_attn.o, cross_attn.q, cross_attn.k, cross_attn.v, "
            "cross_attn.o, ffn.0, ffn.2, cross_attn.k_img, cross_attn.v_img, before_proj, after_proj, img_emb.proj.1, "
            "img_emb.proj.3)");
}

// Without adapters the block Linear is torch::nn::Linear: the same draws
// from the generator and the same output.
TEST(Lora, TheBlockLinearIsTorchsLinearWithoutAnAdapter) {
  torch::manual_seed(11);
  torch::nn::Linear reference(6, 5);
  const auto after_reference = torch::rand({1});
  torch::manual_seed(11);
  wt::nn::Linear ours(6, 5);
  const auto after_ours = torch::rand({1});
  EXPECT_TRUE(torch::equal(ours->weight, reference->weight));
  EXPECT_TRUE(torch::equal(ours->bias, reference->bias));
  EXPECT_TRUE(torch::equal(after_ours, after_reference));
  const auto x = torch::randn({3, 6});
  EXPECT_TRUE(torch::equal(ours->forward(x), reference->forward(x)));
}

// Under bf16 autocast an adapted Linear rounds its fp32 input to bf16 once
// for the base's product and the adapter's (as peft's LoRA computes on a
// bf16 input), so its input gradient is one bf16 value. Output and gradient
// stay within bf16's roundings of the fp64 products: each path rounds at
// most 6 times by u = 2^-8 (the input, each product, the scale, the sum),
// so 8u of the sum of the terms' magnitudes bounds the error.
TEST(Lora, UnderBf16AutocastAnAdapterRoundsItsInputOnceAndStaysWithinBf16OfFp64) {
  for (const double alpha : {16.0, 24.0}) {  // scale 1 and 1.5
    SCOPED_TRACE(alpha);
    torch::manual_seed(21);
    wt::nn::Linear layer(64, 48, at::kBFloat16);
    layer->add_lora(16, alpha, 0);
    {
      torch::NoGradGuard no_grad;
      layer->lora_B.normal_(0, 0.5);  // an adapter as large as the base
    }
    const auto x = torch::randn({2, 10, 64}).requires_grad_(true);
    const auto grad_out = torch::randn({2, 10, 48});
    at::Tensor y;
    {
      wt::nn::AutocastScope autocast(at::kBFloat16, at::kCPU);
      y = layer->forward(x);
    }
    ASSERT_EQ(y.scalar_type(), at::kBFloat16);
    y.backward(grad_out.to(at::kBFloat16));
    const auto gx = x.grad();
    ASSERT_EQ(gx.scalar_type(), at::kFloat);
    EXPECT_TRUE(torch::equal(gx, gx.to(at::kBFloat16).to(at::kFloat)));  // one bf16 value, widened

    const auto d = [](const at::Tensor& t) { return t.detach().to(at::kDouble); };
    const double s = alpha / 16;
    const auto w = d(layer->weight), b = d(layer->bias);
    const auto a = d(layer->lora_A).to(at::kBFloat16).to(at::kDouble);  // autocast's rounded copies
    const auto bb = d(layer->lora_B).to(at::kBFloat16).to(at::kDouble);
    const auto x64 = d(x), g64 = d(grad_out);
    const auto y64 = torch::matmul(x64, w.t()) + b + s * torch::matmul(torch::matmul(x64, a.t()), bb.t());
    const auto y_scale = torch::matmul(x64.abs(), w.abs().t()) + b.abs() +
                         s * torch::matmul(torch::matmul(x64.abs(), a.abs().t()), bb.abs().t());
    const auto gx64 = torch::matmul(g64, w) + s * torch::matmul(torch::matmul(g64, bb), a);
    const auto gx_scale =
        torch::matmul(g64.abs(), w.abs()) + s * torch::matmul(torch::matmul(g64.abs(), bb.abs()), a.abs());
    const double u = std::ldexp(1.0, -8);
    EXPECT_TRUE(((d(y) - y64).abs() <= 8 * u * y_scale).all().item<bool>())
        << ((d(y) - y64).abs() / y_scale).max().item<double>() / u << " u";
    EXPECT_TRUE(((d(gx) - gx64).abs() <= 8 * u * gx_scale).all().item<bool>())
        << ((d(gx) - gx64).abs() / gx_scale).max().item<double>() / u << " u";
    // not vacuous: the adapter's share is far above the bound
    const auto adapter = s * torch::matmul(torch::matmul(x64, a.t()), bb.t());
    EXPECT_GT((adapter.abs() - 8 * u * y_scale).max().item<double>(), 0);
  }
}

// The training seam: an objective over a LoRA model declares the adapters,
// and nothing else, as what the Engine reduces, steps, averages and saves.
TEST(Lora, TheObjectiveTrainsExactlyTheAdapters) {
  auto model = seeded_model({2, 0, 0, {"cross_attn.v"}});
  wt::wan::FlowMatchingObjective objective(*model, {});
  const auto& trainable = objective.trainable();
  ASSERT_EQ(trainable.size(), size_t(2 * tiny().num_layers));
  EXPECT_EQ(trainable[0].first, "blocks.0.cross_attn.v.lora_A");
  EXPECT_EQ(trainable[1].first, "blocks.0.cross_attn.v.lora_B");
  EXPECT_EQ(trainable[3].first, "blocks.1.cross_attn.v.lora_B");
  auto full = seeded_model({});
  EXPECT_EQ(wt::wan::FlowMatchingObjective(*full, {}).trainable().size(), full->named_parameters().size());
}

namespace {

// A LoRA'd tiny model whose adapters have been "trained" (B random), and
// its adapters as the model names them.
WanModel trained_lora_model(const LoraOptions& lora) {
  auto model = seeded_model(lora);
  torch::NoGradGuard no_grad;
  torch::manual_seed(21);
  for (const auto& item : model->named_parameters())
    if (item.key().find("lora_B") != std::string::npos) item.value().normal_(0, 0.05);
  return model;
}
std::vector<std::pair<std::string, at::Tensor>> adapters_of(WanModel& model) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& item : model->named_parameters())
    if (item.key().find(".lora_") != std::string::npos) out.emplace_back(item.key(), item.value().detach());
  return out;
}
std::string temp(const std::string& name) { return ::testing::TempDir() + "lora-" + name; }

}  // namespace

// A LoRA file in each of the three layouts merges into the base as
// base + scale * alpha / r * B A, and the merged model computes what the
// adapted model computes.
TEST(LoraFile, EachLayoutMergesAsTheAdaptedModelComputes) {
  const LoraOptions lora{4, 8, 0, {"self_attn.q", "cross_attn.v", "ffn.0"}};
  auto adapted = trained_lora_model(lora);
  const auto adapters = adapters_of(adapted);
  const auto in = inputs();
  const auto expected = run(adapted, in).detach();

  // The same adapters under each layout's names.
  const std::string native = temp("native.safetensors");
  wt::wan::write_lora_file(native, adapters, lora, "crc32:00000000");
  auto rename = [&](const std::string& path, const std::function<std::string(const std::string&, bool)>& name_of) {
    wt::io::NamedTensors out;
    for (const auto& [name, tensor] : adapters) {
      const auto at = name.rfind(".lora_");
      const std::string layer = name.substr(0, at);
      const bool down = name.compare(at, std::string::npos, ".lora_A") == 0;
      out.emplace_back(name_of(layer, down), tensor);
      if (!down)
        out.emplace_back(name_of(layer, false).substr(0, name_of(layer, false).rfind(".lora")) + ".alpha",
                         torch::tensor(8.0f));
    }
    wt::io::write_safetensors(path, out, at::kFloat);
  };
  const std::string diffusers = temp("diffusers.safetensors"), kohya = temp("kohya.safetensors");
  rename(diffusers, [](const std::string& layer, bool down) {
    const std::string official = layer + ".weight";
    const std::string d = wt::wan::diffusers_name(official);
    return "transformer." + d.substr(0, d.size() - 7) + (down ? ".lora_A.weight" : ".lora_B.weight");
  });
  rename(kohya, [](std::string layer, bool down) {
    std::replace(layer.begin(), layer.end(), '.', '_');
    return "lora_unet_" + layer + (down ? ".lora_down.weight" : ".lora_up.weight");
  });
  for (const auto& file : {native, diffusers, kohya}) {
    SCOPED_TRACE(file);
    auto base = seeded_model({});
    EXPECT_EQ(wt::wan::merge_lora_file(*base, file, 1.0), 3 * tiny().num_layers);
    auto* q = base->blocks[1]->as<wt::wan::WanBlockImpl>()->self_attn->q.get();
    auto* adapted_q = adapted->blocks[1]->as<wt::wan::WanBlockImpl>()->self_attn->q.get();
    const auto want = adapted_q->weight.detach() +
                      (8.0 / 4.0) * torch::matmul(adapted_q->lora_B.detach(), adapted_q->lora_A.detach());
    EXPECT_TRUE(torch::allclose(q->weight, want, 1e-6, 1e-6));
    const auto merged = run(base, in);
    EXPECT_TRUE(torch::allclose(merged, expected, 1e-4, 1e-5)) << (merged - expected).abs().max().item<float>();
  }
  // A scale multiplies the change.
  auto half = seeded_model({});
  wt::wan::merge_lora_file(*half, native, 0.5);
  auto* q = half->blocks[0]->as<wt::wan::WanBlockImpl>()->self_attn->q.get();
  auto* adapted_q = adapted->blocks[0]->as<wt::wan::WanBlockImpl>()->self_attn->q.get();
  EXPECT_TRUE(torch::allclose(
      q->weight, adapted_q->weight.detach() + torch::matmul(adapted_q->lora_B.detach(), adapted_q->lora_A.detach()),
      1e-6, 1e-6));
}

TEST(LoraFile, AFileThatDoesNotFitTheModelNamesTheFirstMisfit) {
  auto error = [](const wt::io::NamedTensors& tensors) -> std::string {
    const std::string path = temp("misfit.safetensors");
    wt::io::write_safetensors(path, tensors, at::kFloat);
    auto base = seeded_model({});
    try {
      wt::wan::merge_lora_file(*base, path, 1.0);
    } catch (const wt::UsageError& e) {
      return std::string(e.what()).substr(path.size() + 7);  // after "LoRA <path>: "
    }
    return "(no error)";
  };
  EXPECT_EQ(error({{"diffusion_model.blocks.0.self_attn.x.lora_A.weight", torch::zeros({4, 32})},
                   {"diffusion_model.blocks.0.self_attn.x.lora_B.weight", torch::zeros({32, 4})}}),
            "'diffusion_model.blocks.0.self_attn.x.lora_A.weight' adapts no Linear layer of this model");
  EXPECT_EQ(error({{"diffusion_model.blocks.0.ffn.0.lora_A.weight", torch::zeros({4, 32})},
                   {"diffusion_model.blocks.0.ffn.0.lora_B.weight", torch::zeros({32, 4})}}),
            "layer blocks.0.ffn.0: adapters [4, 32] and [32, 4] do not fit its weight [64, 32] (expected [r, 32] and "
            "[64, r])");
  EXPECT_EQ(error({{"diffusion_model.blocks.0.ffn.0.lora_A.weight", torch::zeros({4, 32})}}),
            "layer blocks.0.ffn.0 has only one of its two LoRA matrices");
  EXPECT_EQ(error({{"blocks.0.ffn.0.weight", torch::zeros({64, 32})}}),
            "'blocks.0.ffn.0.weight' is not a LoRA tensor (.lora_A/.lora_B/.lora_down/.lora_up .weight, or .alpha)");
}

// The file's lora_targets names the layers adapted: "all" of a text-to-video
// model is the ten block Linears, as files have always said; of a model with
// the image branch, its four image layers too.
TEST(LoraFile, ItsTargetsAreTheLayersAdapted) {
  auto i2v_config = tiny();
  i2v_config.model_type = wt::wan::ModelType::I2V;
  i2v_config.image_dim = 8;
  i2v_config.image_tokens = 3;
  i2v_config.in_dim = 2 * i2v_config.out_dim + 4;
  const std::string ten =
      "self_attn.q,self_attn.k,self_attn.v,self_attn.o,cross_attn.q,cross_attn.k,cross_attn.v,cross_attn.o,ffn.0,ffn.2";
  for (const auto& [config, expected] :
       {std::pair{tiny(), ten},
        {i2v_config, ten + ",cross_attn.k_img,cross_attn.v_img,img_emb.proj.1,img_emb.proj.3"}}) {
    torch::manual_seed(2);
    wt::wan::WanModel model(config);
    const LoraOptions all{4, 0, 0, {}};
    wt::wan::add_lora(*model, all);
    wt::io::NamedTensors adapters;
    for (const auto& item : model->named_parameters())
      if (item.key().find(".lora_") != std::string::npos) adapters.emplace_back(item.key(), item.value());
    const std::string file = temp("targets.safetensors");
    wt::wan::write_lora_file(file, adapters, all, "crc32:00000000");
    EXPECT_EQ(wt::io::SafetensorsFile::open(file).metadata().at("lora_targets"), expected);
  }
  // An image target named for a text-to-video model is refused.
  torch::manual_seed(2);
  wt::wan::WanModel t2v(tiny());
  try {
    wt::wan::add_lora(*t2v, {4, 0, 0, {"cross_attn.k_img"}});
    FAIL() << "no error";
  } catch (const wt::SettingError& e) {
    EXPECT_EQ(e.setting() + ": " + e.message(),
              "lora_targets: 'cross_attn.k_img': this t2v model has no such layer (the image branch is Wan2.1 "
              "I2V/FLF2V's)");
  }
}
