// Activation checkpointing (--grad-checkpoint): recomputing blocks in
// backward gives the gradients of the plain backward, bit for bit in fp32
// (but for the order of one sum),
// for a whole model and for LoRA adapters (whose first block has no input
// that needs a gradient), with LoRA dropout drawing the same mask, and
// under bf16 autocast; and every gradient still arrives through its
// parameter's AccumulateGrad, where the Reducer's hooks sit.
#include <gtest/gtest.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <vector>
#include <string>

#include "../../../common/small_models.hpp"
#include "wantrain/nn/autocast.hpp"
#include "wantrain/wan/model/lora.hpp"
#include "wantrain/wan/model/wan_model.hpp"

namespace {

struct Run {
  at::Tensor output;
  std::map<std::string, at::Tensor> grads;
  int hooks = 0;  // gradients that reached a parameter's AccumulateGrad
};

class CountingHook : public torch::autograd::FunctionPostHook {
 public:
  explicit CountingHook(int& count) : count_(count) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    ++count_;
    return outputs;
  }

 private:
  int& count_;
};

// One forward and backward of a seeded model, every N-th block recomputed.
Run forward_backward(int64_t every, const wt::wan::LoraOptions& lora, at::ScalarType autocast = at::kFloat,
                     bool offload = false) {
  auto model = wt::testing::seeded_small_model(wt::testing::small_wan_config(3));
  if (lora.rank > 0) {
    wt::wan::add_lora(*model, lora);
    torch::NoGradGuard no_grad;
    for (const auto& item : model->named_parameters())
      if (item.key().find("lora_B") != std::string::npos) item.value().normal_(0, 0.1);
  }
  model->set_grad_checkpoint(every);
  model->set_activation_offload(offload);
  model->train();
  Run run;
  // As the Reducer listens: a post hook on each parameter's AccumulateGrad.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
  for (const auto& item : model->named_parameters())
    if (item.value().requires_grad()) {
      accumulators.push_back(torch::autograd::impl::grad_accumulator(item.value()));
      accumulators.back()->add_post_hook(std::make_unique<CountingHook>(run.hooks));
    }
  torch::manual_seed(3);
  const auto x = torch::randn({2, 4, 2, 4, 4}), context = torch::randn({2, 5, 16});
  const auto t = torch::tensor({100.0f, 700.0f});
  torch::manual_seed(11);  // what LoRA dropout draws from
  {
    wt::nn::AutocastScope scope(autocast, torch::kCPU);
    run.output = model->forward(x, t, context).to(torch::kFloat32);
  }
  run.output.square().mean().backward();
  for (const auto& item : model->named_parameters())
    if (item.value().requires_grad()) run.grads[item.key()] = item.value().grad();
  // The generator is where the plain run leaves it: recomputation drew
  // its dropout masks from a restored state and put it back.
  run.output = torch::cat({run.output.flatten(), torch::rand({4})});
  return run;
}

// Bitwise, except upstream of the context and the time embedding, which
// every block uses: there the blocks' gradients are summed in another order
// (each recomputed block hands back its own sum), so within 1e-6 relative;
// under bf16 autocast those sums are bf16, so within its precision.
void expect_same(const Run& plain, const Run& recomputed, double shared_tolerance = 1e-6) {
  EXPECT_TRUE(torch::equal(plain.output, recomputed.output));
  ASSERT_EQ(plain.grads.size(), recomputed.grads.size());
  EXPECT_EQ(plain.hooks, recomputed.hooks);
  EXPECT_EQ(recomputed.hooks, int(recomputed.grads.size()));
  for (const auto& [name, grad] : plain.grads) {
    const auto& other = recomputed.grads.at(name);
    ASSERT_TRUE(grad.defined() && other.defined()) << name;
    const bool shared_upstream = name.rfind("text_embedding.", 0) == 0 || name.rfind("time_", 0) == 0;
    if (shared_upstream) {
      EXPECT_LE((grad - other).abs().max().item<double>(), shared_tolerance * grad.abs().max().item<double>()) << name;
    } else {
      EXPECT_TRUE(torch::equal(grad, other)) << name;
    }
  }
}

TEST(GradCheckpoint, EveryBlockRecomputedGivesTheSameGradientsBitwise) {
  const auto plain = forward_backward(0, {});
  expect_same(plain, forward_backward(1, {}));
  expect_same(plain, forward_backward(2, {}));  // blocks 0 and 2
}

// --activation-offload: the checkpointed blocks' inputs wait in host memory
// (on the CPU, a copy) and come back for the recomputation: the same run,
// bit for bit, every gradient included.
TEST(GradCheckpoint, OffloadedInputsGiveTheSameGradientsBitwise) {
  for (const int64_t every : {1, 2}) {
    const auto kept = forward_backward(every, {}), offloaded = forward_backward(every, {}, at::kFloat, true);
    EXPECT_TRUE(torch::equal(kept.output, offloaded.output));
    ASSERT_EQ(kept.grads.size(), offloaded.grads.size());
    for (const auto& [name, grad] : kept.grads) EXPECT_TRUE(torch::equal(grad, offloaded.grads.at(name))) << name;
  }
}

// The input is held in host memory between forward and backward, and
// nowhere after; its copy is what the recomputation runs on.
TEST(GradCheckpoint, AnOffloadedInputIsHeldUntilItsRecomputation) {
  struct Square : wt::nn::Recomputable {
    at::Tensor forward_tensors(const std::vector<at::Tensor>& inputs) override { return inputs[0] * inputs[0]; }
  } square;
  wt::nn::ActivationOffload offload;
  offload.begin_forward();
  const auto x = torch::randn({3, 5}, torch::requires_grad());
  const auto y = wt::nn::recomputed(square, {x * 1.0}, &offload);
  const auto z = wt::nn::recomputed(square, {y}, &offload);
  EXPECT_EQ(offload.host_bytes(), 2.0 * double(x.nbytes()));
  z.sum().backward();
  EXPECT_EQ(offload.host_bytes(), 0.0);
  EXPECT_TRUE(torch::allclose(x.grad(), 4 * x.detach().pow(3)));
  EXPECT_THROW(offload.bring_back(0), c10::Error);  // each once
}

TEST(GradCheckpoint, LoraAdaptersGetTheirGradientsInTheFirstBlockToo) {
  const wt::wan::LoraOptions lora{4, 8, 0, {}};
  const auto plain = forward_backward(0, lora);
  const auto recomputed = forward_backward(1, lora);
  expect_same(plain, recomputed);
  EXPECT_GT(recomputed.grads.at("blocks.0.self_attn.q.lora_A").abs().max().item<float>(), 0.0f);
}

TEST(GradCheckpoint, LoraDropoutDrawsTheSameMaskWhenRecomputed) {
  const wt::wan::LoraOptions lora{4, 8, 0.3, {}};
  expect_same(forward_backward(0, lora), forward_backward(1, lora));
}

TEST(GradCheckpoint, Bf16AutocastIsRecomputedUnderBf16) {
  const auto plain = forward_backward(0, {}, at::kBFloat16);
  // Upstream of the shared context and time embedding each order sums some
  // 8 bf16-rounded terms (the 2 blocks' k and v, their modulation and the
  // head's), each up to a bf16 ulp (1/256) of the largest apart: 8/256.
  // Measured: 2.6/256 (AMD EPYC, 2026-11-27); 2/256 was too tight for it.
  expect_same(plain, forward_backward(1, {}, at::kBFloat16), 8.0 / 256);
  // Not the fp32 gradients: the recomputation ran under bf16 too.
  EXPECT_FALSE(
      torch::equal(plain.grads.at("blocks.1.ffn.0.weight"), forward_backward(1, {}).grads.at("blocks.1.ffn.0.weight")));
}

}  // namespace
