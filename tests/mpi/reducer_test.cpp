// Reducer on toy models, 2 ranks: parameters agree after construction,
// bucket boundaries and order, averaged gradients as views into the buckets,
// no communication while accumulating, and the errors that name a parameter.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>

#include "wantrain/distributed/reducer.hpp"
#include "wantrain/nn/parameter_units.hpp"
#include "mpi_test_env.hpp"
#include "wantrain/util/error.hpp"

namespace {

// `layers` Linear(width, width) in a row.
torch::nn::Sequential toy_model(int64_t width, int layers = 3) {
  torch::nn::Sequential model;
  for (int i = 0; i < layers; ++i) model->push_back(torch::nn::Linear(width, width));
  return model;
}

wt::distributed::Reducer::NamedTensors named(torch::nn::Module& m) {
  wt::distributed::Reducer::NamedTensors out;
  for (const auto& item : m.named_parameters()) out.emplace_back(item.key(), item.value());
  return out;
}

// Inputs that differ by rank, derivable by every rank.
torch::Tensor input_of(int rank, int64_t batch, int64_t width) {
  return torch::arange(batch * width, torch::kFloat).view({batch, width}).sin().mul(rank + 1);
}

}  // namespace

TEST(Reducer, ParametersAreRankZerosAfterConstruction) {
  torch::manual_seed(100 + comm().rank());  // different initial weights on each rank
  auto model = toy_model(8);
  wt::distributed::Reducer reducer(comm(), named(*model), {});
  for (const auto& p : model->parameters()) {
    auto high = p.detach().clone(), low = -p.detach().clone();
    comm().all_reduce(high, {wt::distributed::ReduceOp::Max});
    comm().all_reduce(low, {wt::distributed::ReduceOp::Max});
    EXPECT_TRUE(torch::equal(high, -low));
  }
}

TEST(Reducer, BucketsTakeParametersInReverseOrderUpToTheirCaps) {
  auto model = toy_model(10);  // weights 400 B, biases 40 B
  wt::distributed::ReducerOptions options;
  options.first_bucket_bytes = 420;  // closes after 2.bias (40) + 2.weight (400)
  options.bucket_bytes = 800;
  wt::distributed::Reducer reducer(comm(), named(*model), {}, options);
  const std::vector<std::vector<std::string>> expected = {
      {"2.bias", "2.weight"}, {"1.bias", "1.weight", "0.bias", "0.weight"}};  // 840 >= 800 closes with 0.weight
  EXPECT_EQ(reducer.bucket_parameter_names(), expected);
  // Every gradient is a view into its bucket's buffer.
  const auto buffers = reducer.bucket_buffers();
  EXPECT_TRUE(model[2]->as<torch::nn::Linear>()->weight.grad().is_alias_of(buffers[0]));
  EXPECT_TRUE(model[0]->as<torch::nn::Linear>()->bias.grad().is_alias_of(buffers[1]));
}

// ZeRO-3's buckets are the model's units, whatever their size: the head
// first, the blocks from the last, and the input side (unit "": the
// embeddings, an I2V model's image embedding registered after the head)
// last, since its gradients arrive last and buckets launch in order.
TEST(Reducer, UnitBucketsPutTheInputSideLast) {
  wt::distributed::Reducer::NamedTensors parameters;
  for (const char* name : {"patch_embedding.weight", "blocks.0.q.weight", "blocks.0.q.bias", "blocks.1.q.weight",
                           "head.head.weight", "img_emb.proj.weight"})
    parameters.emplace_back(name, torch::ones({3}).requires_grad_());
  wt::distributed::ReducerOptions options;
  options.first_bucket_bytes = 1;  // caps do not apply
  options.bucket_bytes = 1;
  options.shard = true;
  options.transient_buckets = true;
  options.unit_of = wt::nn::parameter_unit;
  wt::distributed::Reducer reducer(comm(), parameters, {}, options);
  const std::vector<std::vector<std::string>> expected = {{"head.head.weight"},
                                                          {"blocks.1.q.weight"},
                                                          {"blocks.0.q.bias", "blocks.0.q.weight"},
                                                          {"img_emb.proj.weight", "patch_embedding.weight"}};
  EXPECT_EQ(reducer.bucket_parameter_names(), expected);
}

// A unit whose parameters are registered in two places (a VACE block, in
// the unit of the base block it follows, registered after the head) is one
// bucket, where that base block's is: in the order backward reaches them.
TEST(Reducer, AUnitRegisteredInTwoPlacesIsOneBucketWhereItsFirstPartIs) {
  wt::distributed::Reducer::NamedTensors parameters;
  for (const char* name : {"patch_embedding.weight", "blocks.0.q.weight", "blocks.1.q.weight", "blocks.2.q.weight",
                           "head.head.weight", "vace_blocks.0.before_proj.weight", "vace_blocks.0.q.weight",
                           "vace_blocks.1.q.weight", "vace_patch_embedding.weight"})
    parameters.emplace_back(name, torch::ones({3}).requires_grad_());
  wt::distributed::ReducerOptions options;
  options.shard = true;
  options.transient_buckets = true;
  options.unit_of = [](const std::string& name) {  // VACE blocks after blocks 0 and 2
    if (name.rfind("vace_blocks.0.", 0) == 0) return std::string("blocks.0");
    if (name.rfind("vace_blocks.1.", 0) == 0) return std::string("blocks.2");
    return wt::nn::parameter_unit(name);
  };
  wt::distributed::Reducer reducer(comm(), parameters, {}, options);
  const std::vector<std::vector<std::string>> expected = {
      {"head.head.weight"},
      {"vace_blocks.1.q.weight", "blocks.2.q.weight"},
      {"blocks.1.q.weight"},
      {"vace_blocks.0.q.weight", "vace_blocks.0.before_proj.weight", "blocks.0.q.weight"},
      {"vace_patch_embedding.weight", "patch_embedding.weight"}};
  EXPECT_EQ(reducer.bucket_parameter_names(), expected);
}

TEST(Reducer, GradientsAreTheAverageOfEveryRanksGradient) {
  torch::manual_seed(7);
  auto model = toy_model(6);
  auto reference = toy_model(6);
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < model->parameters().size(); ++i) reference->parameters()[i].copy_(model->parameters()[i]);
  }
  wt::distributed::ReducerOptions options;
  options.first_bucket_bytes = 64;  // several buckets
  options.bucket_bytes = 128;
  wt::distributed::Reducer reducer(comm(), named(*model), {}, options);
  ASSERT_GT(reducer.bucket_parameter_names().size(), 2u);

  reducer.zero_grad();
  reducer.prepare_for_backward(true);
  model->forward(input_of(comm().rank(), 4, 6)).pow(2).mean().backward();
  // The hooks started every bucket's all-reduce during backward, not finalize.
  EXPECT_EQ(reducer.collectives_issued(), int64_t(reducer.bucket_parameter_names().size()));
  reducer.finalize_backward();

  // Expected: the mean over ranks of each rank's local gradient, computed here.
  for (int r = 0; r < comm().size(); ++r) reference->forward(input_of(r, 4, 6)).pow(2).mean().backward();
  for (size_t i = 0; i < model->parameters().size(); ++i)
    EXPECT_TRUE(
        torch::allclose(model->parameters()[i].grad(), reference->parameters()[i].grad() / comm().size(), 1e-6, 1e-7))
        << model->named_parameters()[i].key();
  EXPECT_EQ(reducer.collectives_issued(), int64_t(reducer.bucket_parameter_names().size()));
}

// --grad-comm-dtype bf16|fp16: each rank's gradients travel in 16 bits and
// are summed there, so on 2 ranks a gradient is exactly LibTorch's 16-bit
// a + b of the two ranks' rounded gradients, widened to fp32 and averaged;
// with shard (ZeRO-1) each rank's slice is its part of that.
TEST(Reducer, SixteenBitCommSumsTheRanksRoundedGradients) {
  if (comm().size() != 2) GTEST_SKIP() << "the exact 16-bit sum is derived for 2 ranks";
  for (const auto dtype : {at::kBFloat16, at::kHalf})
    for (const bool shard : {false, true}) {
      torch::manual_seed(7);
      auto model = toy_model(6);
      auto local = toy_model(6);  // each rank's own gradient, by rank
      {
        torch::NoGradGuard no_grad;
        for (size_t i = 0; i < model->parameters().size(); ++i) local->parameters()[i].copy_(model->parameters()[i]);
      }
      wt::distributed::ReducerOptions options;
      options.first_bucket_bytes = 64;
      options.bucket_bytes = 128;
      options.comm_dtype = dtype;
      options.shard = shard;
      wt::distributed::Reducer reducer(comm(), named(*model), {}, options);
      reducer.zero_grad();
      reducer.prepare_for_backward(true);
      model->forward(input_of(comm().rank(), 4, 6)).pow(2).mean().backward();
      reducer.finalize_backward();

      std::vector<std::vector<at::Tensor>> grads(2);  // [rank][parameter]
      for (int r = 0; r < 2; ++r) {
        for (auto& p : local->parameters()) p.mutable_grad() = at::Tensor();
        local->forward(input_of(r, 4, 6)).pow(2).mean().backward();
        for (auto& p : local->parameters()) grads[size_t(r)].push_back(p.grad().clone());
      }
      std::vector<at::Tensor> expected;  // in the buckets' order and padding, as the reduced gradient
      for (size_t i = 0; i < grads[0].size(); ++i)
        expected.push_back((grads[0][i].to(dtype) + grads[1][i].to(dtype)).to(at::kFloat) / 2);
      if (!shard) {
        for (size_t i = 0; i < expected.size(); ++i)
          EXPECT_TRUE(torch::equal(model->parameters()[i].grad(), expected[i]))
              << c10::toString(dtype) << " " << model->named_parameters()[i].key();
        continue;
      }
      // Shard mode: this rank's slice of each bucket, laid out as bucket_layouts() says.
      const auto layouts = reducer.bucket_layouts();
      const auto shards = reducer.gradient_shards();
      std::map<std::string, size_t> index;
      for (size_t i = 0; i < model->named_parameters().size(); ++i) index[model->named_parameters()[i].key()] = i;
      for (size_t b = 0; b < layouts.size(); ++b) {
        auto whole = torch::zeros({shards[b].numel() * 2});
        for (const auto& e : layouts[b].entries)
          whole.narrow(0, e.offset, expected[index[e.name]].numel()).copy_(expected[index[e.name]].flatten());
        EXPECT_TRUE(torch::equal(shards[b], whole.narrow(0, comm().rank() * shards[b].numel(), shards[b].numel())))
            << c10::toString(dtype) << " shard of bucket " << b;
      }
    }
}

TEST(Reducer, AccumulationMicroStepsDoNotCommunicate) {
  torch::manual_seed(8);
  auto model = toy_model(5);
  wt::distributed::Reducer reducer(comm(), named(*model), {});
  const int steps = 3;
  reducer.zero_grad();
  for (int micro = 0; micro < steps; ++micro) {
    reducer.prepare_for_backward(micro == steps - 1);
    model->forward(input_of(comm().rank(), 2, 5) + micro).sum().backward();
    reducer.finalize_backward();
    EXPECT_EQ(reducer.collectives_issued(), micro == steps - 1 ? int64_t(reducer.bucket_parameter_names().size()) : 0);
  }
  // The accumulated gradient is the sum over micro-steps, averaged over ranks.
  auto reference = toy_model(5);
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < model->parameters().size(); ++i) reference->parameters()[i].copy_(model->parameters()[i]);
  }
  for (int r = 0; r < comm().size(); ++r)
    for (int micro = 0; micro < steps; ++micro) reference->forward(input_of(r, 2, 5) + micro).sum().backward();
  for (size_t i = 0; i < model->parameters().size(); ++i)
    EXPECT_TRUE(
        torch::allclose(model->parameters()[i].grad(), reference->parameters()[i].grad() / comm().size(), 1e-5, 1e-6));
}

TEST(Reducer, AParameterWithoutGradientIsNamedOnEveryRank) {
  auto model = toy_model(4);
  auto unused = torch::nn::Linear(4, 4);
  model->push_back(unused);  // registered, never called below
  wt::distributed::Reducer reducer(comm(), named(*model), {});
  reducer.zero_grad();
  reducer.prepare_for_backward(true);
  auto x = input_of(comm().rank(), 2, 4);
  for (size_t i = 0; i < 3; ++i) x = model[i]->as<torch::nn::Linear>()->forward(x);
  x.sum().backward();
  try {
    reducer.finalize_backward();
    FAIL() << "no error for parameters without gradient";
  } catch (const wt::UsageError& e) {
    EXPECT_STREQ(e.what(),
                 "Reducer: 2 parameters got no gradient in this step: 3.weight, 3.bias "
                 "(use the allow_unused setting to reduce zeros for them)");
  }
}

TEST(Reducer, AllowUnusedReducesZeros) {
  auto model = toy_model(4);
  model->push_back(torch::nn::Linear(4, 4));
  wt::distributed::ReducerOptions options;
  options.allow_unused = true;
  wt::distributed::Reducer reducer(comm(), named(*model), {}, options);
  reducer.zero_grad();
  reducer.prepare_for_backward(true);
  auto x = input_of(comm().rank(), 2, 4);
  for (size_t i = 0; i < 3; ++i) x = model[i]->as<torch::nn::Linear>()->forward(x);
  x.sum().backward();
  reducer.finalize_backward();
  EXPECT_EQ(model[3]->as<torch::nn::Linear>()->weight.grad().abs().sum().item<float>(), 0.0f);
  EXPECT_GT(model[0]->as<torch::nn::Linear>()->weight.grad().abs().sum().item<float>(), 0.0f);
}

TEST(Reducer, ModelsThatDifferBetweenRanksAreNamed) {
  // The last rank's middle layer is wider.
  torch::nn::Sequential model;
  model->push_back(torch::nn::Linear(4, 4));
  const int64_t width = comm().rank() == comm().size() - 1 ? 6 : 4;
  model->push_back(torch::nn::Linear(4, width));
  try {
    wt::distributed::Reducer reducer(comm(), named(*model), {});
    FAIL() << "no error for models that differ";
  } catch (const wt::UsageError& e) {
    const std::string expected = "Reducer: the ranks' models differ at parameter 2 (this rank has '1.weight' [" +
                                 std::to_string(width) + ",4] Float)";
    EXPECT_EQ(std::string(e.what()), expected);
  }
}

// Transient buckets (ZeRO-2): every micro-step reduce-scatters, the slices
// add up to the averaged gradient summed over the micro-steps, and no whole
// gradient exists: during backward at most buckets_in_flight buckets are
// reducing beside the one filling, and afterwards only the slices are left.
TEST(Reducer, TransientBucketsKeepOnlySlicesAndAFewBucketsInFlight) {
  constexpr int64_t kWidth = 16, kLayers = 6;
  torch::manual_seed(7);
  auto model = toy_model(kWidth, kLayers);
  auto reference = toy_model(kWidth, kLayers);
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < model->parameters().size(); ++i) reference->parameters()[i].copy_(model->parameters()[i]);
  }
  wt::distributed::ReducerOptions options;
  options.first_bucket_bytes = options.bucket_bytes = 1;  // one parameter per bucket
  options.shard = options.transient_buckets = true;
  options.buckets_in_flight = 2;
  wt::distributed::Reducer reducer(comm(), named(*model), {}, options);
  const auto layouts = reducer.bucket_layouts();
  ASSERT_EQ(layouts.size(), size_t(2 * kLayers));
  int64_t slices = 0, largest = 0;  // bytes
  for (const auto& layout : layouts) {
    slices += 4 * layout.numel / comm().size();
    largest = std::max(largest, 4 * layout.numel);
  }
  // The most gradient memory backward may hold: the slices, and the bucket
  // filling plus those reducing, each with its received slice.
  const int64_t bound = slices + (options.buckets_in_flight + 1) * (largest + largest / comm().size());
  int64_t whole = 0;
  for (const auto& p : model->parameters()) whole += 4 * p.numel();
  ASSERT_LT(bound, slices + whole) << "the model must be large enough for the bound to mean something";

  int64_t peak = 0;
  for (auto& p : model->parameters())
    p.register_hook([&](const at::Tensor& g) {
      peak = std::max(peak, reducer.gradient_bytes());
      return g;
    });
  reducer.zero_grad();
  constexpr int kMicroSteps = 2;
  for (int m = 0; m < kMicroSteps; ++m) {
    reducer.prepare_for_backward(true);
    model->forward(input_of(comm().rank() + 2 * m, 4, kWidth)).pow(2).mean().backward();
    reducer.finalize_backward();
    EXPECT_EQ(reducer.gradient_bytes(), slices) << "micro-step " << m;
    for (const auto& p : model->parameters()) EXPECT_FALSE(p.grad().defined());
  }
  EXPECT_LE(peak, bound);
  EXPECT_GE(peak, slices + largest) << "a bucket was seen filling";
  EXPECT_EQ(reducer.collectives_issued(), int64_t(kMicroSteps * layouts.size()));

  // Expected: each rank's slice of the mean over ranks of the gradients summed over micro-steps.
  for (int m = 0; m < kMicroSteps; ++m)
    for (int r = 0; r < comm().size(); ++r) reference->forward(input_of(r + 2 * m, 4, kWidth)).pow(2).mean().backward();
  std::map<std::string, at::Tensor> expected;
  for (const auto& item : reference->named_parameters())
    expected.emplace(item.key(), item.value().grad().reshape({-1}) / comm().size());
  const auto shards = reducer.gradient_shards();
  for (size_t b = 0; b < layouts.size(); ++b) {
    auto whole_bucket = torch::zeros({layouts[b].numel});
    for (const auto& e : layouts[b].entries) whole_bucket.narrow(0, e.offset, e.numel).copy_(expected.at(e.name));
    const int64_t n = layouts[b].numel / comm().size();
    EXPECT_TRUE(torch::allclose(shards[b], whole_bucket.narrow(0, comm().rank() * n, n), 1e-5, 1e-7)) << "bucket " << b;
  }
  // Accumulating without reducing is not a thing transient buckets can do.
  EXPECT_THROW(reducer.prepare_for_backward(false), wt::Error);
}
