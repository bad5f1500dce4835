// Inputs made ahead: flow matching's noise drawn on the loader's thread
// (Objective::make_inputs_ahead through ShardBatches) gives the step the
// same loss and gradients, bit for bit, as noise drawn inside the step;
// noise made for another step is refused.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "../../common/shards.hpp"
#include "../../common/small_models.hpp"
#include "wantrain/wan/objective/flow_matching_objective.hpp"
#include "wantrain/train/shard_source.hpp"
#include "wantrain/util/error.hpp"

using namespace wt;

namespace {

// Shards whose samples fit small_wan_config(): 4 channels, 2 frames of 4x4,
// text [8, 16].
data::Dataset small_model_dataset(const std::string& name) {
  data::SampleShape s = wt::testing::small_shape(data::Stored::Float16, data::Stored::Float32);
  s.height = 4;
  s.width = 4;
  s.text_len = 8;
  s.text_dim = 16;
  const auto dir = wt::testing::fresh_directory(name);
  wt::testing::write_shard(dir + "/a.h5", s, 9, 11);
  wt::testing::write_shard(dir + "/b.h5", s, 7, 12);
  return data::Dataset::open(dir);
}

struct LossAndGradients {
  at::Tensor loss;
  std::vector<at::Tensor> gradients;
};

LossAndGradients loss_of(train::Objective& objective, const train::Batch& micro, int64_t step) {
  for (auto& [name, p] : objective.trainable()) p.mutable_grad() = at::Tensor();
  const auto out = objective.loss(micro, {step});
  out.loss.backward();
  LossAndGradients result{out.loss.detach(), {}};
  for (auto& [name, p] : objective.trainable()) result.gradients.push_back(p.grad().clone());
  return result;
}

// The batch as a source without inputs made ahead hands it over.
train::Batch without_inputs_ahead(const train::Batch& batch) {
  train::Batch plain;
  plain.indices = batch.indices;
  plain.tensors.emplace("latents", batch.at("latents"));
  plain.tensors.emplace("text_emb", batch.at("text_emb"));
  return plain;
}

}  // namespace

TEST(InputsAhead, NoiseFromTheLoaderGivesTheStepTheSameLossAndGradients) {
  auto model = wt::testing::seeded_small_model(wt::testing::small_wan_config());
  wan::FlowMatchingObjectiveOptions options;
  options.seed = 17;
  options.text_drop = 0.5;  // the caption drops travel with the batch too
  wan::FlowMatchingObjective objective(*model, options);
  const int64_t first_step = 5, B = 2, K = 2;
  train::ShardBatchesOptions source_options;
  source_options.objective = &objective;
  source_options.first_step = first_step;
  train::ShardBatches source(
      small_model_dataset("inputs-ahead"),
      data::DistributedSampler(data::DataLayout(std::vector<int64_t>{9, 7}), {1, 0, B * K, 3, true, false}),
      source_options);
  for (int64_t n = 0; n < 4; ++n) {
    int64_t epoch = 0;
    const train::Batch batch = source.next(epoch);
    const int64_t step = first_step + n;
    ASSERT_EQ(batch.ahead_step, step);
    ASSERT_EQ(batch.tensors.count("noise.eps"), 1u);
    ASSERT_EQ(batch.tensors.count("caption.keep"), 1u);
    const train::Batch plain = without_inputs_ahead(batch);
    for (int64_t m = 0; m < K; ++m) {  // micro-batches, as the Engine slices them
      const auto ahead = loss_of(objective, batch.slice(m * B, B, at::kCPU), step);
      const auto in_step = loss_of(objective, plain.slice(m * B, B, at::kCPU), step);
      EXPECT_TRUE(torch::equal(ahead.loss, in_step.loss)) << "step " << step << ", micro-batch " << m;
      for (size_t i = 0; i < ahead.gradients.size(); ++i)
        EXPECT_TRUE(torch::equal(ahead.gradients[i], in_step.gradients[i])) << objective.trainable()[i].first;
    }
  }
}

TEST(InputsAhead, NoiseMadeForAnotherStepIsRefused) {
  auto model = wt::testing::seeded_small_model(wt::testing::small_wan_config());
  wan::FlowMatchingObjective objective(*model, {});
  train::Batch batch;
  batch.indices = {3, 1};
  batch.tensors.emplace("latents", torch::randn({2, 4, 2, 4, 4}));
  batch.tensors.emplace("text_emb", torch::randn({2, 8, 16}));
  objective.make_inputs_ahead(batch, 4,
                              [](at::IntArrayRef sizes, at::ScalarType dtype) { return torch::empty(sizes, dtype); });
  EXPECT_EQ(batch.ahead_step, 4);
  EXPECT_NO_THROW(objective.loss(batch, {4}));
  try {
    objective.loss(batch, {5});
    FAIL() << "noise of step 4 was used at step 5";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("made for step 4 but is used at step 5"), std::string::npos) << e.what();
  }
}
