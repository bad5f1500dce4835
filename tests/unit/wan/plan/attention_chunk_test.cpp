// The attention chunk chosen from the shapes (nn/attention_chunk.hpp):
// the resolver against its budget formula, a model asked for auto running
// full attention bit for bit where the scores fit and chunks within float
// rounding of it where they do not, and the memory plan saying which.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "../../../common/build_paths.hpp"
#include "../../../common/small_models.hpp"
#include "wantrain/app/attention_chunk_option.hpp"
#include "wantrain/nn/attention_chunk.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/wan/plan/memory_plan.hpp"
#include "wantrain/wan/plan/activation_memory.hpp"
#include "wantrain/wan/model/model_config.hpp"

namespace {

using wt::nn::kAttentionChunkQuantum;
using wt::nn::kAttentionScoreBudget;
using wt::nn::kAttentionScoreBytes;
using wt::nn::kAutoAttentionChunk;
using wt::nn::resolve_attention_chunk;

// Bytes of a [batch, heads, queries, keys] block of fp32 scores, in double (no overflow).
double score_bytes(int64_t batch, int64_t heads, int64_t queries, int64_t keys) {
  return double(batch) * double(heads) * double(queries) * double(keys) * double(kAttentionScoreBytes);
}

int64_t heads_of(const char* config) {
  return wt::wan::load_model_config(std::string(WANTRAIN_SOURCE_DIR) + "/data/configs/" + config).num_heads;
}

TEST(AttentionChunk, AGivenChunkIsKeptAndAutoIsTheWholeMatrixWhileItFits) {
  EXPECT_EQ(resolve_attention_chunk(0, 1, 40, 32760, 32760), 0);
  EXPECT_EQ(resolve_attention_chunk(256, 1, 40, 32760, 32760), 256);
  EXPECT_EQ(resolve_attention_chunk(5, 2, 2, 16, 16), 5);
  // Small token counts: the whole matrix, as before auto.
  EXPECT_EQ(resolve_attention_chunk(kAutoAttentionChunk, 2, 2, 1280, 1280), 0);
  EXPECT_EQ(resolve_attention_chunk(kAutoAttentionChunk, 1, heads_of("wan2.1-t2v-1.3b.json"), 1560, 1560), 0);
  // The budget is inclusive: wan-small's 4 heads at 8,192 tokens are exactly 1 GiB of fp32 scores.
  ASSERT_EQ(score_bytes(1, 4, 8192, 8192), double(kAttentionScoreBudget));
  EXPECT_EQ(resolve_attention_chunk(kAutoAttentionChunk, 1, 4, 8192, 8192), 0);
  EXPECT_EQ(resolve_attention_chunk(kAutoAttentionChunk, 1, 4, 8193, 8193), 8128);
  EXPECT_EQ(resolve_attention_chunk(wt::nn::kFusedAttention, 1, 40, 32760, 32760), wt::nn::kFusedAttention);
  EXPECT_THROW(resolve_attention_chunk(-3, 1, 4, 16, 16), wt::Error);
  EXPECT_THROW(resolve_attention_chunk(kAutoAttentionChunk, 0, 4, 16, 16), wt::Error);
}

// Wan2.1 at 480p x 81 frames (32,760 tokens): the largest multiple of 64
// queries whose scores fit the budget, derived here from the formula.
TEST(AttentionChunk, AutoChunksFitTheBudgetAtVideoTokenCounts) {
  const int64_t tokens = 32760;
  for (const char* config : {"wan2.1-t2v-1.3b.json", "wan2.1-t2v-14b.json", "wan2.2-ti2v-5b.json"})
    for (const int64_t batch : {1, 2, 4}) {
      SCOPED_TRACE(std::string(config) + ", batch " + std::to_string(batch));
      const int64_t heads = heads_of(config);
      ASSERT_GT(score_bytes(batch, heads, tokens, tokens), double(kAttentionScoreBudget));
      const int64_t chunk = resolve_attention_chunk(kAutoAttentionChunk, batch, heads, tokens, tokens);
      EXPECT_EQ(chunk % kAttentionChunkQuantum, 0);
      EXPECT_GE(chunk, kAttentionChunkQuantum);
      EXPECT_GT(score_bytes(batch, heads, chunk + kAttentionChunkQuantum, tokens), double(kAttentionScoreBudget));
      const int64_t derived = int64_t(double(kAttentionScoreBudget) / score_bytes(batch, heads, 1, tokens)) /
                              kAttentionChunkQuantum * kAttentionChunkQuantum;
      if (derived >= kAttentionChunkQuantum) {  // else 64 all the same (the next test)
        EXPECT_EQ(chunk, derived);
        EXPECT_LE(score_bytes(batch, heads, chunk, tokens), double(kAttentionScoreBudget));
      } else {
        EXPECT_EQ(chunk, kAttentionChunkQuantum);
      }
    }
  // The figures docs/training.md quotes, batch 1.
  EXPECT_EQ(resolve_attention_chunk(kAutoAttentionChunk, 1, heads_of("wan2.1-t2v-1.3b.json"), tokens, tokens), 640);
  EXPECT_EQ(resolve_attention_chunk(kAutoAttentionChunk, 1, heads_of("wan2.1-t2v-14b.json"), tokens, tokens), 192);
}

TEST(AttentionChunk, AutoNeverGoesBelowTheQuantum) {
  // 14B at batch 8: 40 heads of 32,760 keys leave room for 25 queries; 64 all the same.
  ASSERT_LT(double(kAttentionScoreBudget) / score_bytes(8, 40, 1, 32760), double(kAttentionChunkQuantum));
  EXPECT_EQ(resolve_attention_chunk(kAutoAttentionChunk, 8, 40, 32760, 32760), kAttentionChunkQuantum);
  EXPECT_EQ(resolve_attention_chunk(kAutoAttentionChunk, 1, 2, 100, 100, kAttentionScoreBytes, 1), 64);
}

// A forward and backward of the small model: its output and every gradient.
struct Step {
  at::Tensor out;
  std::vector<at::Tensor> grads;
};

Step forward_backward(int64_t chunk, int64_t budget = kAttentionScoreBudget,
                      std::vector<int64_t> latents = {3, 6, 10}) {
  auto model = wt::testing::seeded_small_model(wt::testing::small_wan_config());
  model->set_attention_chunk(chunk, budget);
  torch::manual_seed(3);
  const auto x = torch::randn({2, 4, latents[0], latents[1], latents[2]}), context = torch::randn({2, 5, 16});
  Step step;
  step.out = model->forward(x, torch::tensor({100.0f, 700.0f}), context);
  step.out.square().mean().backward();
  for (const auto& parameter : model->parameters()) step.grads.push_back(parameter.grad());
  return step;
}

TEST(AttentionChunk, AutoIsTheWholeScoreMatrixBitForBitOnASmallModel) {
  auto model = wt::testing::seeded_small_model(wt::testing::small_wan_config());
  model->set_attention_chunk(kAutoAttentionChunk);
  EXPECT_EQ(model->attention_chunk(), kAutoAttentionChunk);
  EXPECT_EQ(model->attention_chunk_for(2, 45), 0);
  const auto full = forward_backward(0), automatic = forward_backward(kAutoAttentionChunk);
  EXPECT_TRUE(torch::equal(automatic.out, full.out));
  ASSERT_EQ(automatic.grads.size(), full.grads.size());
  for (size_t i = 0; i < full.grads.size(); ++i) EXPECT_TRUE(torch::equal(automatic.grads[i], full.grads[i])) << i;
}

TEST(AttentionChunk, AutoChunksWhenTheScoresPassTheBudgetAndComputesAsTheWholeMatrix) {
  // 2 samples of 3 x 8 x 8 = 192 tokens, 2 heads: a budget one byte short
  // of the whole matrix leaves room for 191 queries, so chunks of 128 (and
  // the 64 left over).
  const std::vector<int64_t> latents{3, 16, 16};
  const int64_t tokens = 192, budget = int64_t(score_bytes(2, 2, tokens, tokens)) - 1;
  auto model = wt::testing::seeded_small_model(wt::testing::small_wan_config());
  model->set_attention_chunk(kAutoAttentionChunk, budget);
  ASSERT_EQ(model->attention_chunk_for(2, tokens), 128);
  const auto full = forward_backward(0, kAttentionScoreBudget, latents);
  const auto automatic = forward_backward(kAutoAttentionChunk, budget, latents);
  const auto given = forward_backward(128, kAttentionScoreBudget, latents);
  // What a given chunk of 128 computes, bit for bit; the whole matrix's within float rounding.
  EXPECT_TRUE(torch::equal(automatic.out, given.out));
  EXPECT_TRUE(torch::allclose(automatic.out, full.out, 1e-5, 1e-6));
  for (size_t i = 0; i < full.grads.size(); ++i) {
    EXPECT_TRUE(torch::equal(automatic.grads[i], given.grads[i])) << i;
    EXPECT_TRUE(torch::allclose(automatic.grads[i], full.grads[i], 1e-4, 1e-6)) << i;
  }
  // Each forward resolves for its own tokens: 45 tokens fit the same budget whole.
  EXPECT_EQ(model->attention_chunk_for(2, 45), 0);
}

TEST(AttentionChunk, TheMemoryPlanResolvesAutoAndSaysSo) {
  const auto config =
      wt::wan::load_model_config(std::string(WANTRAIN_SOURCE_DIR) + "/data/configs/wan2.1-t2v-14b.json");
  wt::wan::MemoryPlanSettings s;
  s.model = config;
  s.step.latents = {21, 60, 104};  // 480p x 81 frames: 32,760 tokens
  s.step.compute_dtype = at::kBFloat16;
  s.step.grad_checkpoint_every = 1;
  s.step.attention_chunk = kAutoAttentionChunk;
  const auto plan = wt::wan::plan_memory(s);
  EXPECT_EQ(plan.activations.attention_chunk, 192);
  auto activations = [](const wt::wan::MemoryPlan& p) {
    for (const auto& item : p.items)
      if (item.name == "activations") return item;
    return wt::wan::MemoryItem{};
  };
  EXPECT_EQ(activations(plan).detail, "batch 1 x 32760 tokens, attention chunk 192 (auto), checkpointing every block");
  // The same as asking for 192.
  auto given = s;
  given.step.attention_chunk = 192;
  EXPECT_EQ(activations(wt::wan::plan_memory(given)).bytes, activations(plan).bytes);
  EXPECT_EQ(activations(wt::wan::plan_memory(given)).detail,
            "batch 1 x 32760 tokens, attention chunk 192, checkpointing every block");
  // The default, fused: what chunks keep, without any chunk's scores (here
  // the feed-forward's working set is the largest either way: the same total).
  auto fused = s;
  fused.step.attention_chunk = wt::nn::kFusedAttention;
  EXPECT_EQ(activations(wt::wan::plan_memory(fused)).detail,
            "batch 1 x 32760 tokens, fused attention, checkpointing every block");
  EXPECT_LE(activations(wt::wan::plan_memory(fused)).bytes, activations(plan).bytes);
  // Without checkpointing a block keeps what chunks keep, less the copies
  // of self- and cross-attention's output for o (the kernel's output is laid
  // out as o reads it): two [L, dim] tensors in bf16, per sample.
  fused.step.grad_checkpoint_every = given.step.grad_checkpoint_every = 0;
  EXPECT_DOUBLE_EQ(
      wt::wan::plan_memory(given).activations.block_saved - wt::wan::plan_memory(fused).activations.block_saved,
      2.0 * 32760 * config.dim * 2);
  // A still: the whole matrix.
  s.step.latents = {1, 60, 104};
  EXPECT_EQ(activations(wt::wan::plan_memory(s)).detail,
            "batch 1 x 1560 tokens, full attention (auto), checkpointing every block");
  // Sampling resolves it as well.
  s.step.latents = {21, 60, 104};
  const auto sampling = wt::wan::plan_sampling(config, s.step, 1, false);
  EXPECT_EQ(sampling.attention_chunk, 192);
  auto sampled_given = s.step;
  sampled_given.attention_chunk = 192;
  EXPECT_EQ(sampling.forward_bytes, wt::wan::inference_memory(config, sampled_given));
}

// A distillation teacher runs whole sequences on every rank: under
// sequence parallelism its auto chunk is still chosen for all its heads.
TEST(AttentionChunk, TheTeachersForwardIsPlannedForAllItsHeads) {
  const auto config =
      wt::wan::load_model_config(std::string(WANTRAIN_SOURCE_DIR) + "/data/configs/wan2.1-t2v-14b.json");
  wt::wan::MemoryPlanSettings s;
  s.model = config;
  s.teacher = config;
  s.step.latents = {21, 60, 104};
  s.step.attention_chunk = kAutoAttentionChunk;
  s.step.sequence_parallel = 2;
  EXPECT_EQ(wt::wan::plan_memory(s).activations.attention_chunk, 384);  // 20 heads a rank
  auto whole = s.step;
  whole.sequence_parallel = 1;
  ASSERT_EQ(wt::wan::planned_attention_chunk(config, whole), 192);
  EXPECT_EQ(wt::wan::plan_memory(s).teacher_forward, wt::wan::inference_memory(config, whole));
}

TEST(AttentionChunk, TheOptionReadsFusedAutoZeroOrQueriesAndNamesItselfOtherwise) {
  using wt::app::parse_attention_chunk;
  EXPECT_EQ(parse_attention_chunk("fused"), wt::nn::kFusedAttention);
  EXPECT_EQ(parse_attention_chunk("auto"), kAutoAttentionChunk);
  for (const std::string text : {"fused", "auto", "0", "512"})
    EXPECT_EQ(wt::app::attention_chunk_text(parse_attention_chunk(text)), text);
  EXPECT_EQ(parse_attention_chunk("0"), 0);
  EXPECT_EQ(parse_attention_chunk("512"), 512);
  for (const std::string bad : {"-1", "-2", "", "Auto", "Fused", "12x", " 64", "1e3", "9999999999"}) {
    try {
      parse_attention_chunk(bad);
      ADD_FAILURE() << "'" << bad << "' accepted";
    } catch (const wt::UsageError& e) {
      EXPECT_EQ(std::string(e.what()),
                "option --attention-chunk: expected fused, auto, 0 (the whole score matrix) or a number of queries, "
                "got '" +
                    bad + "'");
    }
  }
}

}  // namespace
