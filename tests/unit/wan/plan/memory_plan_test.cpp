// The memory plan (wan/plan/memory_plan.hpp) against what a run allocates:
// parameter and adapter counts against a built model, activations against
// the bytes LibTorch's allocator hands out in a forward and backward, and
// the shape of the activation model (linear with chunked attention,
// quadratic without, checkpointing keeping block inputs only).
#include <gtest/gtest.h>

#include <algorithm>
#include <torch/torch.h>

#include "../../../common/build_paths.hpp"
#include "../../../common/small_models.hpp"
#include "wantrain/wan/plan/activation_memory.hpp"
#include "wantrain/nn/autocast.hpp"
#include "wantrain/nn/block_swap.hpp"
#include "wantrain/wan/model/lora.hpp"
#include "wantrain/nn/tensor_memory.hpp"
#include "wantrain/wan/model/flow_matching.hpp"
#include "wantrain/wan/plan/memory_plan.hpp"
#include "wantrain/wan/model/model_recipe.hpp"
#include "wantrain/train/shard_source.hpp"
#include "wantrain/util/error.hpp"

namespace {

using wt::testing::small_wan_config;
using wt::wan::activation_memory;
using wt::wan::ActivationSettings;

ActivationSettings step(int64_t frames, int64_t chunk = 0, int64_t checkpoint = 0, int64_t batch = 1) {
  ActivationSettings s;
  s.batch = batch;
  s.latents = {frames, 16, 16};
  s.attention_chunk = chunk;
  s.grad_checkpoint_every = checkpoint;
  return s;
}

// The model the plan is measured against: 4 blocks, wide enough that the
// blocks' activations outweigh the inputs.
wt::wan::WanConfig measured_config() {
  auto config = small_wan_config(/*layers=*/4);
  config.dim = 64;
  config.ffn_dim = 256;
  config.num_heads = 4;
  return config;
}

double tensor_bytes(const std::vector<at::Tensor>& tensors) {
  double bytes = 0;
  for (const auto& t : tensors) bytes += double(t.numel() * t.element_size());
  return bytes;
}

TEST(ActivationMemory, ChunkedAttentionIsLinearInTokensAndFullAttentionQuadratic) {
  const auto config = small_wan_config();
  // Tokens go 64, 128, 192 (frames 1, 2, 3 of 16x16 in 2x2 patches).
  auto saved = [&](int64_t frames, int64_t chunk) {
    return activation_memory(config, step(frames, chunk)).block_saved;
  };
  EXPECT_EQ(activation_memory(config, step(3)).tokens, 192);
  const double chunked_step = saved(2, 32) - saved(1, 32);
  EXPECT_NEAR(saved(3, 32) - saved(2, 32), chunked_step, 1e-9 * chunked_step);
  // Full attention adds softmax's fp32 [heads, L, L + text_len] per sample:
  // its second difference over L = 64, 128, 192 is 4 bytes x heads x 2 x 64^2.
  const double second = saved(3, 0) - 2 * saved(2, 0) + saved(1, 0);
  EXPECT_DOUBLE_EQ(second, 4.0 * config.num_heads * 2 * 64 * 64);
}

TEST(ActivationMemory, CheckpointingKeepsBlockInputsAndRecomputesOneBlock) {
  const auto config = small_wan_config(/*layers=*/5);
  const auto kept = activation_memory(config, step(2, 32));
  const auto every_block = activation_memory(config, step(2, 32, 1));
  const auto every_2 = activation_memory(config, step(2, 32, 2));
  EXPECT_EQ(kept.blocks_kept, 5);
  EXPECT_EQ(every_block.blocks_checkpointed, 5);
  EXPECT_EQ(every_2.blocks_checkpointed, 3);  // blocks 0, 2, 4
  EXPECT_EQ(every_2.blocks_kept, 2);
  // A checkpointed block keeps its fp32 input [B, L, dim] for the recomputation.
  EXPECT_DOUBLE_EQ(every_block.checkpointed_block_saved, 4.0 * 128 * config.dim);
  // Every block checkpointed: the inputs, and one block while backward
  // recomputes it (the last, when all inputs are still held).
  EXPECT_DOUBLE_EQ(every_block.blocks, 5 * every_block.checkpointed_block_saved + kept.block_saved);
  EXPECT_DOUBLE_EQ(kept.blocks, 5 * kept.block_saved);
  // Every 2nd: recomputing block 4 holds blocks 0-3 (two of them whole), its
  // input and its tensors; the end of forward holds less.
  EXPECT_DOUBLE_EQ(every_2.blocks, 2 * kept.block_saved + 3 * every_2.checkpointed_block_saved + kept.block_saved);
  EXPECT_LT(every_block.total(), kept.total());
}

// Sequence parallelism over N ranks: each holds its tokens' activations
// (per-token parts ÷ N) and attends with 1/N of the heads over every token
// (per-score parts ÷ N too), while the text context's keys and values, the
// latents and the output stay whole. So with N dividing the tokens, the
// growth of a block's saved tensors with the tokens (linear when chunked,
// quadratic in full) is 1/N of one rank's, and a checkpointed block keeps
// 1/N of its input.
TEST(ActivationMemory, SequenceParallelismSplitsTheBlocksOverTheGroup) {
  const auto config = small_wan_config();
  auto saved = [&](int64_t frames, int64_t chunk, int64_t sp) {
    auto s = step(frames, chunk, 1);
    s.sequence_parallel = sp;
    return activation_memory(config, s);
  };
  const double chunked_whole = saved(3, 32, 1).block_saved - saved(2, 32, 1).block_saved;
  const double chunked_split = saved(3, 32, 2).block_saved - saved(2, 32, 2).block_saved;
  EXPECT_DOUBLE_EQ(chunked_split, chunked_whole / 2);
  auto second = [&](int64_t sp) {
    return saved(3, 0, sp).block_saved - 2 * saved(2, 0, sp).block_saved + saved(1, 0, sp).block_saved;
  };
  EXPECT_DOUBLE_EQ(second(2), second(1) / 2);
  const auto split = saved(2, 32, 2), whole = saved(2, 32, 1);
  EXPECT_EQ(split.tokens, 128);
  EXPECT_EQ(split.rank_tokens, 64);
  EXPECT_DOUBLE_EQ(split.checkpointed_block_saved, whole.checkpointed_block_saved / 2);
  EXPECT_LT(split.total(), whole.total());
  EXPECT_GT(split.outside_blocks, whole.outside_blocks / 2);  // the whole latents on every rank
  // An uneven split pads the last part.
  auto uneven = step(1);
  uneven.latents = {1, 10, 10};  // 25 tokens
  uneven.sequence_parallel = 2;
  EXPECT_EQ(activation_memory(config, uneven).rank_tokens, 13);
}

TEST(ActivationMemory, LatentsThatDoNotFitThePatchAreAUsageError) {
  auto s = step(1);
  s.latents = {1, 15, 16};
  try {
    activation_memory(small_wan_config(), s);
    FAIL() << "no error";
  } catch (const wt::UsageError& e) {
    EXPECT_STREQ(e.what(), "latent height 15 is not a positive multiple of the model's patch size 2");
  }
}

TEST(MemoryPlan, ModelStateMatchesTheBuiltModel) {
  const auto config = small_wan_config();
  wt::wan::MemoryPlanSettings s;
  s.model = config;
  s.step = step(1);
  s.ema = true;
  s.checkpoint_snapshot = true;
  const auto plan = wt::wan::plan_memory(s);
  auto item = [&](const wt::wan::MemoryPlan& p, const std::string& name) {
    for (const auto& i : p.items)
      if (i.name == name) return i.bytes;
    ADD_FAILURE() << "no item " << name;
    return 0.0;
  };
  const auto model = wt::testing::seeded_small_model(config);
  const double weights = tensor_bytes(model->parameters());
  EXPECT_DOUBLE_EQ(item(plan, "parameters"), weights);
  EXPECT_DOUBLE_EQ(item(plan, "gradients"), weights);
  EXPECT_DOUBLE_EQ(item(plan, "optimizer"), 2 * weights);
  EXPECT_DOUBLE_EQ(item(plan, "EMA"), weights);
  EXPECT_DOUBLE_EQ(item(plan, "checkpoint copy"), 4 * weights);  // weights, two moments, EMA

  // ZeRO-1 over 4 ranks: a quarter of the moments and EMA on each, plus the
  // reduced gradient slice; rank 0 copies the weights and its share.
  s.zero_shards = 4;
  const auto sharded = wt::wan::plan_memory(s);
  EXPECT_DOUBLE_EQ(item(sharded, "parameters"), weights);
  EXPECT_DOUBLE_EQ(item(sharded, "gradients"), 1.25 * weights);
  EXPECT_DOUBLE_EQ(item(sharded, "optimizer"), 0.5 * weights);
  EXPECT_DOUBLE_EQ(item(sharded, "EMA"), 0.25 * weights);
  EXPECT_DOUBLE_EQ(item(sharded, "checkpoint copy"), 1.75 * weights);
  s.checkpoint_snapshot = false;
  EXPECT_DOUBLE_EQ(item(wt::wan::plan_memory(s), "checkpoint copy"), 0.75 * weights);
  // Gradients reduced in 16 bits: a 2-byte copy of each 4-byte gradient
  // (and of the slice under ZeRO-1).
  s.grad_comm_dtype = at::kBFloat16;
  EXPECT_DOUBLE_EQ(item(wt::wan::plan_memory(s), "gradients"), 1.25 * 1.5 * weights);
  // ZeRO-2 over 4 ranks: the gradient slice, and the three largest buckets
  // alive at once, each with its received slice. The buckets as the Reducer
  // forms them over a built model's parameters: in reverse order, the first
  // closed at 1 MiB, then (1-byte buckets) one per parameter. A model of a
  // few MB, so that there are buckets after the first.
  auto wider = config;
  wider.dim = 256;
  wider.ffn_dim = 1024;
  wider.num_heads = 4;
  const auto wide_model = wt::testing::seeded_small_model(wider);
  const double wide_weights = tensor_bytes(wide_model->parameters());
  auto zero2 = s;
  zero2.model = wider;
  zero2.zero_stage = 2;
  zero2.bucket_bytes = 1;
  zero2.grad_comm_dtype = at::kFloat;
  std::vector<double> buckets = {0};
  const auto parameters = wide_model->parameters();
  for (auto it = parameters.rbegin(); it != parameters.rend(); ++it) {
    if (buckets.back() >= (buckets.size() == 1 ? double(1 << 20) : zero2.bucket_bytes)) buckets.push_back(0);
    buckets.back() += double(it->nbytes());
  }
  std::sort(buckets.rbegin(), buckets.rend());
  ASSERT_GE(buckets.size(), 4u);
  const double three = buckets[0] + buckets[1] + buckets[2];
  EXPECT_DOUBLE_EQ(item(wt::wan::plan_memory(zero2), "gradients"), wide_weights / 4 + three * 1.25);
  zero2.grad_comm_dtype = at::kBFloat16;  // the buckets travel in 16 bits; the slice stays fp32
  EXPECT_DOUBLE_EQ(item(wt::wan::plan_memory(zero2), "gradients"), wide_weights / 4 + three * 0.5 * 1.25);
  zero2.bucket_bytes = 1e12;  // one bucket after the first: never more than the whole gradient
  zero2.grad_comm_dtype = at::kFloat;
  EXPECT_DOUBLE_EQ(item(wt::wan::plan_memory(zero2), "gradients"), wide_weights / 4 + wide_weights * 1.25);
  EXPECT_DOUBLE_EQ(item(wt::wan::plan_memory(zero2), "optimizer"), 0.5 * wide_weights);
  // ZeRO-3 over 4 ranks: a quarter of the weights, the root (every
  // parameter outside the blocks) in fp32 and 3 blocks gathered, in bf16
  // here; the buckets are the units, runs of one unit's parameters in
  // reverse order (the head, the blocks, the embeddings).
  auto zero3 = zero2;
  zero3.zero_stage = 3;
  zero3.gather_dtype = at::kBFloat16;
  double root = 0, block = 0;
  std::vector<double> units;
  std::string open_unit = "?";
  const auto named = wide_model->named_parameters();
  for (auto it = named.end(); it != named.begin();) {
    --it;
    const std::string name = it->key(), unit = name.rfind("blocks.", 0) == 0 ? name.substr(0, name.find('.', 7)) : "";
    if (unit.empty()) root += double(it->value().nbytes());
    if (unit == "blocks.0") block += double(it->value().nbytes());
    if (unit != open_unit) units.push_back(0);
    open_unit = unit;
    units.back() += double(it->value().nbytes());
  }
  std::sort(units.rbegin(), units.rend());
  ASSERT_EQ(units.size(), size_t(wider.num_layers + 2));
  EXPECT_DOUBLE_EQ(item(wt::wan::plan_memory(zero3), "parameters"), wide_weights / 4 + root + 3 * block / 2);
  EXPECT_DOUBLE_EQ(item(wt::wan::plan_memory(zero3), "gradients"),
                   wide_weights / 4 + (units[0] + units[1] + units[2]) * 1.25);
  zero3.gather_dtype = at::kFloat;
  EXPECT_DOUBLE_EQ(item(wt::wan::plan_memory(zero3), "parameters"), wide_weights / 4 + root + 3 * block);
  // Validation and the training sample gather the whole model (beyond the
  // units a step holds) for a forward on whole sequences.
  auto forward = zero3.step;
  forward.sequence_parallel = 1;
  const double evaluation = (wide_weights - root - 3 * block) + wt::wan::inference_memory(wider, forward);
  EXPECT_GE(item(wt::wan::plan_memory(zero3), "activations"), evaluation);
  s.zero_shards = 1;
  EXPECT_DOUBLE_EQ(item(wt::wan::plan_memory(s), "gradients"), 1.5 * weights);
  s.grad_comm_dtype = at::kFloat;
  s.checkpoint_snapshot = true;
  // The loader: prefetch + 1 batches as handed over, and one batch of the
  // parts it reads as stored before converting them.
  s.prefetch = 2;
  s.sample_bytes = 1000;
  s.staged_bytes = 300;
  EXPECT_DOUBLE_EQ(item(wt::wan::plan_memory(s), "data"), double(s.step.batch) * (3 * 1000 + 300));
  wt::data::SampleShape fp16_latents;  // fp16 latents, fp32 text
  fp16_latents.latents = wt::data::Stored::Float16;
  EXPECT_EQ(wt::train::staged_bytes_per_sample(fp16_latents, /*for_gpu=*/false), fp16_latents.latents_bytes());
  EXPECT_EQ(wt::train::staged_bytes_per_sample(fp16_latents, /*for_gpu=*/true), fp16_latents.latents_bytes());
  fp16_latents.text = wt::data::Stored::Float16;  // one dtype: the GPU gets it as stored
  EXPECT_EQ(wt::train::staged_bytes_per_sample(fp16_latents, /*for_gpu=*/true), 0);
  EXPECT_EQ(wt::train::staged_bytes_per_sample(fp16_latents, /*for_gpu=*/false),
            fp16_latents.latents_bytes() + fp16_latents.text_bytes());
  s.sample_bytes = s.staged_bytes = 0;

  // LoRA on a bf16 base: the adapters are what is trained; the base is the
  // model as built with bf16 block Linears.
  s.ema = false;
  s.lora.rank = 4;
  s.lora.targets = {"self_attn.q", "ffn.0"};
  s.base_dtype = at::kBFloat16;
  const auto lora_plan = wt::wan::plan_memory(s);
  const auto lora_model = wt::testing::seeded_small_model(config, s.lora, at::kBFloat16);
  std::vector<at::Tensor> adapters, base;
  for (const auto& parameter : lora_model->parameters())
    (parameter.requires_grad() ? adapters : base).push_back(parameter);
  EXPECT_DOUBLE_EQ(item(lora_plan, "parameters"), tensor_bytes(adapters));
  EXPECT_DOUBLE_EQ(item(lora_plan, "frozen base"), tensor_bytes(base));
  EXPECT_DOUBLE_EQ(item(lora_plan, "optimizer"), 2 * tensor_bytes(adapters));

  // On an fp8 base: a byte a block Linear weight, their scales (buffers)
  // and bf16 biases; the largest block Linear dequantised in fp32 then bf16.
  s.base_dtype = at::kFloat8_e4m3fn;
  const auto fp8_plan = wt::wan::plan_memory(s);
  auto fp8_model = wt::testing::seeded_small_model(config, s.lora, at::kFloat8_e4m3fn);
  std::vector<at::Tensor> frozen = fp8_model->buffers();
  double largest = 0;
  for (const auto& parameter : fp8_model->parameters()) {
    if (!parameter.requires_grad()) frozen.push_back(parameter);
    if (parameter.scalar_type() == at::kFloat8_e4m3fn) largest = std::max(largest, double(parameter.numel()));
  }
  EXPECT_DOUBLE_EQ(item(fp8_plan, "frozen base"), tensor_bytes(frozen));
  // Wan2.1 T2V-14B's base: at most 0.6 of its bytes in bf16 (block Linears are 99% of it).
  auto released = s;
  released.model = wt::wan::load_model_config(std::string(WANTRAIN_SOURCE_DIR) + "/data/configs/wan2.1-t2v-14b.json");
  const double fp8_base = item(wt::wan::plan_memory(released), "frozen base");
  released.base_dtype = at::kBFloat16;
  EXPECT_LT(fp8_base, 0.6 * item(wt::wan::plan_memory(released), "frozen base"));
  // Block swap: N of the 40 blocks in host memory, 2 of them on the device at once.
  const double resident = item(wt::wan::plan_memory(released), "frozen base");
  released.blocks_to_swap = 20;
  const auto swapping = wt::wan::plan_memory(released);
  const double per_block = item(swapping, "swapped blocks") / 20;
  EXPECT_GT(per_block, 0.0);
  EXPECT_NEAR(item(swapping, "frozen base"), resident - 18 * per_block, 1.0);
  EXPECT_LT(40 * per_block, resident);  // the root is not swapped
  EXPECT_DOUBLE_EQ(item(fp8_plan, "fp8 working copy"), 6 * largest);
  // The swapped blocks' bytes are what BlockSwap takes to host memory (weights, scales, norms, modulation).
  s.blocks_to_swap = 2;
  wt::nn::BlockSwap swap(*fp8_model, 2, torch::kCPU);
  EXPECT_DOUBLE_EQ(item(wt::wan::plan_memory(s), "swapped blocks"), swap.host_bytes());
  s.blocks_to_swap = 0;
  EXPECT_DOUBLE_EQ(item(fp8_plan, "parameters"), tensor_bytes(adapters));
}

// A VACE branch trained alone (--trainable vace without LoRA): what is
// trained, moved and averaged is the branch, as a model built so holds it;
// the rest is a frozen fp32 base, whose blocks may be swapped.
TEST(MemoryPlan, AVaceBranchTrainedAloneIsTheTrainedStateOverAFrozenBase) {
  auto config = small_wan_config();
  config.model_type = wt::wan::ModelType::VACE;
  config.vace_layers = {0};
  config.vace_in_dim = 8;
  wt::wan::MemoryPlanSettings s;
  s.model = config;
  s.step = step(1);
  s.ema = true;
  s.vace_branch_only = true;
  s.checkpoint_snapshot = true;
  wt::wan::ModelRecipe recipe;
  recipe.config = config;
  recipe.vace_branch_only = true;
  auto model = wt::wan::build_model(recipe).model;
  std::vector<at::Tensor> branch, base;
  for (const auto& parameter : model->parameters()) (parameter.requires_grad() ? branch : base).push_back(parameter);
  ASSERT_FALSE(branch.empty());
  auto item = [](const wt::wan::MemoryPlan& p, const std::string& name) {
    for (const auto& i : p.items)
      if (i.name == name) return i.bytes;
    ADD_FAILURE() << "no item " << name;
    return 0.0;
  };
  const auto plan = wt::wan::plan_memory(s);
  EXPECT_DOUBLE_EQ(item(plan, "parameters"), tensor_bytes(branch));
  EXPECT_DOUBLE_EQ(item(plan, "frozen base"), tensor_bytes(base));
  EXPECT_DOUBLE_EQ(item(plan, "gradients"), tensor_bytes(branch));
  EXPECT_DOUBLE_EQ(item(plan, "optimizer"), 2 * tensor_bytes(branch));
  EXPECT_DOUBLE_EQ(item(plan, "EMA"), tensor_bytes(branch));
  EXPECT_DOUBLE_EQ(item(plan, "checkpoint copy"), 4 * tensor_bytes(branch));
  // The base's blocks swapped: what BlockSwap takes to host memory.
  s.blocks_to_swap = 2;
  wt::nn::BlockSwap swap(*model, 2, torch::kCPU);
  const auto swapping = wt::wan::plan_memory(s);
  EXPECT_DOUBLE_EQ(item(swapping, "swapped blocks"), swap.host_bytes());
  EXPECT_DOUBLE_EQ(item(swapping, "parameters"), tensor_bytes(branch));
  // Under ZeRO-3 its gradients reduce unit by unit (its VACE blocks' units),
  // not in buckets of --bucket-mb.
  s.blocks_to_swap = 0;
  s.zero_stage = 3;
  s.zero_shards = 4;
  const auto sharded = wt::wan::plan_memory(s);
  const auto gradients =
      std::find_if(sharded.items.begin(), sharded.items.end(), [](const auto& i) { return i.name == "gradients"; });
  ASSERT_NE(gradients, sharded.items.end());
  EXPECT_NE(gradients->detail.find("largest units at once"), std::string::npos) << gradients->detail;
}

// A LoRA run's VACE blocks swap after the base's (--blocks-to-swap past
// num_layers): the plan's host bytes are what BlockSwap takes, the VACE
// blocks' included, and the device keeps two of each kind.
TEST(MemoryPlan, AVaceModelsBlocksSwapAfterTheBase) {
  auto config = small_wan_config(3);
  config.model_type = wt::wan::ModelType::VACE;
  config.vace_layers = {0, 1, 2};
  config.vace_in_dim = 8;
  wt::wan::MemoryPlanSettings s;
  s.model = config;
  s.step = step(1);
  s.lora.rank = 4;
  s.base_dtype = at::kFloat8_e4m3fn;
  auto item = [](const wt::wan::MemoryPlan& p, const std::string& name) {
    for (const auto& i : p.items)
      if (i.name == name) return i.bytes;
    return 0.0;
  };
  const double resident = item(wt::wan::plan_memory(s), "frozen base");
  const int64_t layers = config.num_layers, vace = 3;
  s.blocks_to_swap = layers + vace;
  auto model = wt::testing::seeded_small_model(config, s.lora, at::kFloat8_e4m3fn);
  wt::nn::BlockSwap swap(*model, layers, torch::kCPU, vace);
  EXPECT_EQ(swap.side_count(), vace);
  const auto plan = wt::wan::plan_memory(s);
  EXPECT_DOUBLE_EQ(item(plan, "swapped blocks"), swap.host_bytes());
  // Only the base's blocks swapped: less in host memory; the VACE blocks'
  // bytes are the difference.
  s.blocks_to_swap = layers;
  const double base_only = item(wt::wan::plan_memory(s), "swapped blocks");
  wt::nn::BlockSwap base_swap(*wt::testing::seeded_small_model(config, s.lora, at::kFloat8_e4m3fn), layers,
                              torch::kCPU);
  EXPECT_DOUBLE_EQ(base_only, base_swap.host_bytes());
  EXPECT_GT(item(plan, "swapped blocks"), base_only);
  // Two VACE blocks stay on the device at once: of three swapped, one
  // block's bytes are off it (blocks 1 and 2 alike; block 0 also has before_proj).
  wt::nn::BlockSwap two_sides(*wt::testing::seeded_small_model(config, s.lora, at::kFloat8_e4m3fn), layers, torch::kCPU,
                              2);
  EXPECT_DOUBLE_EQ(item(wt::wan::plan_memory(s), "frozen base") - item(plan, "frozen base"),
                   swap.host_bytes() - two_sides.host_bytes());
  EXPECT_LT(item(plan, "frozen base"), resident);
}

// What a training step allocates beyond the model state, counted at
// LibTorch's allocator, against the plan: within 25% for full and chunked
// attention, with and without checkpointing, in fp32 and under bf16.
TEST(MemoryPlan, ActivationsAreWithinAQuarterOfWhatAStepAllocates) {
  wt::nn::count_tensor_memory();
  const auto config = measured_config();
  struct Case {
    int64_t chunk, checkpoint;
    at::ScalarType dtype;
    bool per_token = false;  // timesteps per token (the first-frame condition)
    bool offload = false;    // the checkpointed inputs offloaded: on the CPU, host memory is where the rest is
  };
  for (const Case c :
       {Case{0, 0, at::kFloat}, Case{64, 0, at::kFloat}, Case{64, 1, at::kFloat}, Case{0, 0, at::kBFloat16},
        Case{64, 0, at::kBFloat16}, Case{64, 1, at::kBFloat16}, Case{64, 2, at::kBFloat16},
        Case{64, 0, at::kFloat, true}, Case{64, 1, at::kBFloat16, true}, Case{wt::nn::kFusedAttention, 0, at::kFloat},
        Case{wt::nn::kFusedAttention, 1, at::kFloat}, Case{wt::nn::kFusedAttention, 0, at::kBFloat16},
        Case{64, 1, at::kFloat, false, true}, Case{64, 2, at::kBFloat16, false, true}}) {
    SCOPED_TRACE(::testing::Message() << "chunk " << c.chunk << ", checkpoint every " << c.checkpoint << ", " << c.dtype
                                      << (c.per_token ? ", per-token timesteps" : "")
                                      << (c.offload ? ", inputs offloaded" : ""));
    auto settings = step(/*frames=*/4, c.chunk, c.checkpoint, /*batch=*/2);  // 256 tokens
    settings.compute_dtype = c.dtype;
    settings.per_token_timesteps = c.per_token;
    settings.offload_checkpointed = c.offload;
    double measured = 0;
    {
      auto model = wt::testing::seeded_small_model(config);
      model->set_attention_chunk(c.chunk);
      model->set_grad_checkpoint(c.checkpoint);
      model->set_activation_offload(c.offload);
      for (auto& p : model->parameters()) p.mutable_grad() = torch::zeros_like(p);
      const auto x = torch::randn({2, config.in_dim, 4, 16, 16});
      const auto context = torch::randn({2, config.text_len, config.text_dim});
      auto t = torch::full({2}, 500.0);
      if (c.per_token) {  // 4 frames of 8 x 8 tokens, the first at t = 0
        t = torch::full({2, 256}, 500.0);
        t.slice(1, 0, 64).zero_();
      }
      const auto target = torch::randn_like(x);
      const double before = double(wt::nn::live_tensor_bytes());
      wt::nn::reset_peak_tensor_bytes();
      at::Tensor loss;
      {
        wt::nn::AutocastScope autocast(c.dtype, torch::kCPU);
        loss = wt::wan::flow_matching_loss(model->forward(x, t, context), target);
      }
      loss.backward();
      measured = double(wt::nn::peak_tensor_bytes()) - before;
    }
    // The plan also counts the batch's inputs, which this step allocated
    // before `before`: a few [B, C, F, H, W] and the context, small here.
    const auto planned = activation_memory(config, settings);
    const double planned_bytes = planned.total() + planned.offloaded;
    EXPECT_GT(planned_bytes, 0.75 * measured);
    EXPECT_LT(planned_bytes, 1.25 * measured);
  }
}

TEST(MemoryPlan, ATeacherIsHeldInItsPrecisionAndItsForwardCountsWhenLarger) {
  wt::wan::MemoryPlanSettings s;
  s.model = small_wan_config();
  s.step = step(2, 0);
  auto teacher = small_wan_config(/*layers=*/3);
  teacher.dim = 64;
  teacher.num_heads = 8;
  s.teacher = teacher;
  const auto plan = wt::wan::plan_memory(s);
  const auto& items = plan.items;
  auto item = [&](const std::string& name) {
    for (const auto& i : items)
      if (i.name == name) return i.bytes;
    return -1.0;
  };
  torch::manual_seed(0);
  wt::wan::WanModel fp32_teacher(teacher);
  EXPECT_DOUBLE_EQ(item("teacher"), tensor_bytes(fp32_teacher->parameters()));
  // The teacher predicts before the student's step: the larger of the two counts.
  // (Same temporal patch: the frames reach it as they are. inference_memory
  // itself is checked against allocations in its own test.)
  ASSERT_EQ(teacher.patch_size[0], s.model.patch_size[0]);
  EXPECT_DOUBLE_EQ(plan.teacher_forward, wt::wan::inference_memory(teacher, s.step));
  EXPECT_DOUBLE_EQ(item("activations"), std::max(plan.activations.total(), plan.teacher_forward));
  // Held in bf16: the blocks' and the text embedding's Linear weights and biases.
  s.teacher_bf16 = true;
  double bf16_bytes = 0;
  for (const auto& [name, shape] : wt::wan::parameter_shapes(teacher)) {
    double n = 1;
    for (int64_t size : shape) n *= double(size);
    const bool linear = name.rfind("text_embedding.", 0) == 0 ||
                        (name.find(".self_attn.") != std::string::npos && name.find(".norm_") == std::string::npos) ||
                        (name.find(".cross_attn.") != std::string::npos && name.find(".norm_") == std::string::npos) ||
                        name.find(".ffn.") != std::string::npos;
    bf16_bytes += n * (linear ? 2 : 4);
  }
  const auto bf16_plan = wt::wan::plan_memory(s);
  const auto held =
      std::find_if(bf16_plan.items.begin(), bf16_plan.items.end(), [](const auto& i) { return i.name == "teacher"; });
  ASSERT_NE(held, bf16_plan.items.end());
  EXPECT_DOUBLE_EQ(held->bytes, bf16_bytes);
}

// Distribution matching's fake score is counted through the student's
// path: a whole one as a student of the teacher's config trained in full
// (weights, gradients with their buckets or units in flight, AdamW's
// moments; sharded by ZeRO), a LoRA one (--fake-score-lora-rank) as a LoRA
// student's adapters (its base holds the teacher's tensors: nothing more),
// at every ZeRO stage; and without ZeRO a whole one is 4 x its fp32
// parameters, as a built model has them.
TEST(MemoryPlan, AFakeScoreIsCountedAsAStudentOfItsKindIs) {
  auto item = [](const wt::wan::MemoryPlan& plan, const std::string& name) {
    for (const auto& i : plan.items)
      if (i.name == name) return i.bytes;
    return -1.0;
  };
  for (const int zero : {0, 1, 2, 3})
    for (const int64_t rank : {0, 4}) {
      SCOPED_TRACE(::testing::Message() << "ZeRO-" << zero << ", fake score LoRA rank " << rank);
      wt::wan::MemoryPlanSettings s;
      s.model = small_wan_config();
      s.step = step(2, 0);
      s.zero_stage = zero;
      s.zero_shards = zero > 0 ? 4 : 1;
      s.bucket_bytes = 4096;  // several buckets in this small model
      auto student = s;       // the fake score's kind, as the trained student
      student.lora.rank = rank;
      s.teacher = s.model;
      s.fake_score = true;
      s.fake_score_lora_rank = rank;
      if (rank > 0 && zero == 3) continue;  // (a LoRA student refuses ZeRO-3; its adapters are small anyway)
      const auto as_student = wt::wan::plan_memory(student);
      EXPECT_DOUBLE_EQ(item(wt::wan::plan_memory(s), "fake score"),
                       item(as_student, "parameters") + item(as_student, "gradients") + item(as_student, "optimizer"));
    }
  wt::wan::MemoryPlanSettings s;
  s.model = small_wan_config();
  s.step = step(2, 0);
  s.teacher = s.model;
  s.fake_score = true;
  torch::manual_seed(0);
  wt::wan::WanModel whole(s.model);
  EXPECT_DOUBLE_EQ(item(wt::wan::plan_memory(s), "fake score"), 4 * tensor_bytes(whole->parameters()));
  s.fake_score_lora_rank = 4;
  wt::wan::LoraOptions lora;
  lora.rank = 4;
  EXPECT_DOUBLE_EQ(item(wt::wan::plan_memory(s), "fake score"), 4 * 4.0 * double(wt::wan::add_lora(*whole, lora)));
}

// A forward without autograd (a teacher's, a sampler's) against what it
// allocates: within 25% with the whole score matrix and in chunks.
TEST(MemoryPlan, InferenceIsWithinAQuarterOfWhatANoGradForwardAllocates) {
  wt::nn::count_tensor_memory();
  const auto config = measured_config();
  for (const int64_t chunk : {int64_t(0), int64_t(64), wt::nn::kFusedAttention}) {
    SCOPED_TRACE(::testing::Message() << "chunk " << chunk);
    auto model = wt::testing::seeded_small_model(config);
    model->set_attention_chunk(chunk);
    torch::NoGradGuard no_grad;
    const double before = double(wt::nn::live_tensor_bytes());
    wt::nn::reset_peak_tensor_bytes();
    {
      const auto x = torch::randn({2, config.in_dim, 4, 16, 16});
      const auto context = torch::randn({2, config.text_len, config.text_dim});
      model->forward(x, torch::full({2}, 500.0), context);
    }
    const double measured = double(wt::nn::peak_tensor_bytes()) - before;
    const double planned = wt::wan::inference_memory(config, step(/*frames=*/4, chunk, 0, /*batch=*/2));
    EXPECT_GT(planned, 0.75 * measured);
    EXPECT_LT(planned, 1.25 * measured);
  }
}

TEST(MemoryPlan, WarnsWhenThePlanExceedsTheHostOrTheDevice) {
  wt::wan::MemoryPlanSettings s;
  s.model = small_wan_config();
  s.step = step(1);
  s.runtime_bytes = 100 << 20;
  const auto other = wt::wan::plan_memory(s);
  s.checkpoint_snapshot = true;  // rank 0: the checkpoint copy besides
  const auto root = wt::wan::plan_memory(s);
  ASSERT_GT(root.host_total(), other.host_total());
  // A node's host memory: rank 0's and its other ranks'.
  EXPECT_DOUBLE_EQ(wt::wan::host_per_node(root, other, 8), root.host_total() + 7 * other.host_total());
  EXPECT_DOUBLE_EQ(wt::wan::host_per_node(root, other, 1), root.host_total());

  wt::wan::MemoryLimits limits;
  limits.host_bytes = 64.0 * (1 << 30);
  limits.ranks_on_host = 8;
  EXPECT_TRUE(wt::wan::memory_warnings(root, other, limits).empty());
  EXPECT_NE(wt::wan::describe_limits(root, other, limits).find("its 8 ranks together: fits in this node's 64.0 GiB"),
            std::string::npos);
  limits.host_bytes = 400.0 * (1 << 20);
  const auto host = wt::wan::memory_warnings(root, other, limits);
  ASSERT_EQ(host.size(), 1u);
  EXPECT_NE(host[0].find("of host memory on this node (8 ranks on it), more than its 400 MiB"), std::string::npos)
      << host[0];
  EXPECT_NE(wt::wan::describe_limits(root, other, limits).find("does not fit in this node's 400 MiB"),
            std::string::npos);

  // A plan for GPUs: the model state and activations on each GPU, held
  // against its memory; the host against the node's.
  s.on_device = true;
  const auto gpu_root = wt::wan::plan_memory(s);
  s.checkpoint_snapshot = false;
  const auto gpu_other = wt::wan::plan_memory(s);
  limits.gpu_plan = true;
  limits.device_bytes = 1.0 * (1 << 20);
  limits.device_source = "the test's GPU";
  limits.host_bytes = 64.0 * (1 << 30);
  limits.ranks_on_host = 1;
  const auto device = wt::wan::memory_warnings(gpu_root, gpu_other, limits);
  ASSERT_EQ(device.size(), 1u);
  EXPECT_NE(device[0].find("on each GPU, more than its 1.0 MiB (the test's GPU)"), std::string::npos) << device[0];
  const auto lines = wt::wan::describe_limits(gpu_root, gpu_other, limits);
  EXPECT_NE(lines.find("capacity"), std::string::npos) << lines;
  EXPECT_NE(lines.find("does not fit in 1.0 MiB"), std::string::npos) << lines;
  EXPECT_NE(lines.find("its 1 rank: fits in this node's 64.0 GiB"), std::string::npos) << lines;
  limits.device_bytes = std::nullopt;  // unknown: nothing compared
  EXPECT_TRUE(wt::wan::memory_warnings(gpu_root, gpu_other, limits).empty());
}

}  // namespace

// Sampling with Wan2.2 A14B's two experts holds both, unless the idle one
// waits in host memory: then the device holds one expert and a forward.
TEST(MemoryPlan, SamplingHoldsOneExpertOnTheDeviceWhenTheOtherIsOffloaded) {
  const auto config = measured_config();
  const auto settings = step(/*frames=*/4);
  const double weights = double(wt::wan::parameter_count(config)) * 4;
  const double forward = wt::wan::inference_memory(config, settings);
  const auto both = wt::wan::plan_sampling(config, settings, 2, false);
  EXPECT_DOUBLE_EQ(both.device_bytes(), 2 * weights + forward);
  EXPECT_DOUBLE_EQ(both.host_bytes(), 0);
  const auto offloaded = wt::wan::plan_sampling(config, settings, 2, true);
  EXPECT_DOUBLE_EQ(offloaded.device_bytes(), weights + forward);
  EXPECT_DOUBLE_EQ(offloaded.host_bytes(), weights);
  EXPECT_DOUBLE_EQ(wt::wan::plan_sampling(config, settings, 1, false).device_bytes(), weights + forward);
}
