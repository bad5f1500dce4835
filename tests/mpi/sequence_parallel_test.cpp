// Sequence parallelism on 2 ranks: the exchanges (every rank builds the
// same whole tensor and holds its contiguous part of the tokens; the
// expected values and gradients are that whole tensor's slices), and a
// WanModel split over the ranks against the same model whole.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "../common/small_models.hpp"
#include "mpi_test_env.hpp"
#include "wantrain/distributed/sequence_exchange.hpp"
#include "wantrain/util/error.hpp"

namespace {

using wt::distributed::Comm;

// The same [B, L, H, D] on every rank.
torch::Tensor whole(int64_t seed, int64_t tokens, int64_t heads) {
  torch::manual_seed(seed);
  return torch::randn({2, tokens, heads, 3}, torch::kDouble);
}

torch::Tensor my_tokens(const torch::Tensor& t) {
  const int64_t part = t.size(1) / comm().size();
  return t.narrow(1, comm().rank() * part, part);
}

torch::Tensor my_heads(const torch::Tensor& t) {
  const int64_t part = t.size(2) / comm().size();
  return t.narrow(2, comm().rank() * part, part);
}

}  // namespace

// Forward: every token of this rank's heads, and back. Backward: the
// exchange is a permutation of the elements over the ranks, so the gradient
// of sum(out * W), summed over the ranks, is W's elements at the inputs'
// places: each rank's input gets W's rows of its tokens.
TEST(SequenceExchange, TokensBecomeHeadsAndBackWithTheirGradients) {
  const int64_t tokens = 3 * comm().size(), heads = 2 * comm().size();
  const auto x = whole(1, tokens, heads), w = whole(2, tokens, heads);
  const auto mine = my_tokens(x).clone().requires_grad_();
  const auto by_heads = wt::distributed::sequence_to_heads(mine, comm());
  EXPECT_TRUE(torch::equal(by_heads, my_heads(x)));
  const auto back = wt::distributed::heads_to_sequence(by_heads, comm());
  EXPECT_TRUE(torch::equal(back, mine));

  (by_heads * my_heads(w)).sum().backward();
  EXPECT_TRUE(torch::equal(mine.grad(), my_tokens(w)));

  const auto heads_part = my_heads(x).clone().requires_grad_();
  (wt::distributed::heads_to_sequence(heads_part, comm()) * my_tokens(w)).sum().backward();
  EXPECT_TRUE(torch::equal(heads_part.grad(), my_heads(w)));

  // Heads that do not split over the ranks: refused before any message.
  if (comm().size() > 1) {
    EXPECT_THROW(wt::distributed::sequence_to_heads(my_tokens(whole(1, tokens, comm().size() + 1)), comm()), wt::Error);
  }
}

// Every rank ends with the whole sequence; each rank's tokens get their own
// rows of the gradient (every rank computes the same loss), nothing summed.
TEST(SequenceExchange, GatheredTokensAreWholeAndGiveBackTheirOwnGradient) {
  const auto x = whole(3, 2 * comm().size(), 4), w = whole(4, 2 * comm().size(), 4);
  const auto mine = my_tokens(x).clone().requires_grad_();
  const auto gathered = wt::distributed::gather_sequence(mine, comm());
  EXPECT_TRUE(torch::equal(gathered, x));
  (gathered * w).sum().backward();
  EXPECT_TRUE(torch::equal(mine.grad(), my_tokens(w)));
}

// A WanModel whose sequence is split over the 2 ranks computes what the
// same model computes alone on each rank: the whole output on every rank,
// and gradients whose sum over the ranks is the whole model's gradient.
// 27 tokens (3 x 3 x 3) do not split evenly, so the last rank's part is
// padded; with per-token timesteps the modulation is split too; chunked
// attention and checkpointed blocks run inside the split; a VACE model's
// context is split as the latents' tokens, its blocks' attention exchanged.
TEST(SequenceParallel, ASplitSequenceGivesTheWholeModelsOutputAndGradients) {
  struct Case {
    const char* name;
    bool per_token;
    int64_t chunk, checkpoint;
    bool vace = false;
    bool fun_control = false;  // V1.1: the reference picture's tokens before the video's
  };
  for (const Case& c :
       {Case{"plain", false, 0, 0}, Case{"per-token timesteps", true, 0, 0},
        Case{"chunked and checkpointed", false, 5, 1}, Case{"vace", false, 0, 0, true},
        Case{"vace checkpointed", false, 0, 1, true}, Case{"fun-control reference tokens", true, 0, 1, false, true}}) {
    SCOPED_TRACE(c.name);
    auto config = wt::testing::small_wan_config(c.vace ? 3 : 2);
    config.num_heads = 2 * comm().size();  // 2 heads per rank
    if (c.vace) {
      config.model_type = wt::wan::ModelType::VACE;
      config.vace_layers = {0, 2};
      config.vace_in_dim = 6;
    }
    if (c.fun_control) {  // 6 latent channels: with 4, in_dim 3 x 4 would be 2 x 4 + 4, an i2v model's
      config.model_type = wt::wan::ModelType::I2V;
      config.out_dim = 6;
      config.in_dim = 18;
      config.ref_conv = true;
    }
    torch::manual_seed(5);  // the same inputs on every rank
    const auto x = torch::randn({2, config.in_dim - config.condition_channels(), 3, 6, 6});
    const auto t = c.per_token ? torch::rand({2, 27}) * 1000 : torch::rand({2}) * 1000;
    const auto context = torch::randn({2, 5, config.text_dim});
    const auto w = torch::randn({2, config.out_dim, 3, 6, 6});
    wt::wan::ModelCondition condition;
    if (c.vace) {
      condition.vace_context = torch::randn({2, config.vace_in_dim, 3, 6, 6});
      condition.vace_scale = 0.7;
    }
    if (c.fun_control) {
      condition.y = torch::randn({2, config.condition_channels(), 3, 6, 6});
      condition.full_ref = torch::randn({2, config.out_dim, 6, 6});
    }
    auto whole = wt::testing::seeded_small_model(config);
    auto split = wt::testing::seeded_small_model(config);
    for (auto* model : {&whole, &split}) {
      (*model)->set_attention_chunk(c.chunk);
      (*model)->set_grad_checkpoint(c.checkpoint);
      torch::manual_seed(6);  // the VACE projections, zero at first, drawn alike: the branch counts
      torch::NoGradGuard no_grad;
      for (auto& item : (*model)->named_parameters())
        if (item.key().find("_proj.") != std::string::npos) item.value().normal_(0, 0.2);
    }
    split->set_sequence_parallel(&comm());
    const auto expected = whole->forward(x, t, context, condition);
    (expected * w).sum().backward();
    const auto got = split->forward(x, t, context, condition);
    (got * w).sum().backward();
    EXPECT_LT((got - expected).abs().max().item<double>(), 1e-5 * expected.abs().max().item<double>());
    const auto reference = whole->named_parameters();
    ASSERT_EQ(split->sequence_parallel(), &comm());
    // Each rank's gradient is its tokens' part only: not the whole one.
    const auto& q_part = split->named_parameters()["blocks.0.self_attn.q.weight"].grad();
    EXPECT_GT((q_part - reference["blocks.0.self_attn.q.weight"].grad()).abs().max().item<double>(),
              1e-3 * q_part.abs().max().item<double>());
    for (const auto& item : split->named_parameters()) {
      auto summed = item.value().grad().clone();
      comm().all_reduce(summed);
      const auto& want = reference[item.key()].grad();
      EXPECT_LT((summed - want).abs().max().item<double>(), 1e-5 * (want.abs().max().item<double>() + 1e-12))
          << item.key();
    }
  }
  // Heads that do not split over the group: one error, before any exchange.
  auto odd = wt::testing::small_wan_config(1);
  odd.num_heads = 2 * comm().size() + 1;
  odd.dim = 8 * odd.num_heads;
  auto model = wt::testing::seeded_small_model(odd);
  if (comm().size() > 1) {
    EXPECT_THROW(model->set_sequence_parallel(&comm()), wt::Error);
  }
}
