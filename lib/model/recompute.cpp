#include "wantrain/model/recompute.hpp"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <mutex>

#include "wantrain/model/autocast.hpp"
#include "wantrain/model/wan_model.hpp"

namespace wt::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::vector<at::Tensor> trainable_parameters(const WanBlockImpl& block) {
  std::vector<at::Tensor> parameters;
  for (const auto& item : block.named_parameters(/*recurse=*/true))
    if (item.value().requires_grad()) parameters.push_back(item.value());
  return parameters;
}

// Off while the forward runs without gradients: LibTorch 1.13's autocast
// would otherwise cache low-precision copies of the trainable weights made
// outside autograd, and a later use in the same scope would get no gradient.
class NoAutocastCache {
 public:
  NoAutocastCache() : was_(at::autocast::is_autocast_cache_enabled()) {
    at::autocast::set_autocast_cache_enabled(false);
  }
  ~NoAutocastCache() { at::autocast::set_autocast_cache_enabled(was_); }
  NoAutocastCache(const NoAutocastCache&) = delete;
  NoAutocastCache& operator=(const NoAutocastCache&) = delete;

 private:
  bool was_;
};

at::Tensor generator_state(const at::Device& device) {
  auto generator = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_generator_state(const at::Device& device, const at::Tensor& state) {
  auto generator = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

class BlockRecompute : public torch::autograd::Function<BlockRecompute> {
 public:
  // Inputs: the tensors (x, e0, context), then the block's trainable
  // parameters, then the block. The RoPE table is saved as tensors, not by
  // reference: the model replaces its cached table when the token grid
  // changes.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& e0, const at::Tensor& context,
                            const at::Tensor& rope_cos, const at::Tensor& rope_sin, at::TensorList parameters,
                            WanBlockImpl* block) {
    ctx->save_for_backward({x, e0, context, rope_cos, rope_sin});
    ctx->saved_data["parameters"] = int64_t(parameters.size());
    ctx->saved_data["block"] = reinterpret_cast<int64_t>(block);
    ctx->saved_data["autocast"] = int64_t(autocast_dtype(x));
    ctx->saved_data["generator"] = generator_state(x.device());
    NoAutocastCache no_cache;
    return block->forward(x, e0, context, RopeTable{rope_cos, rope_sin});
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    auto* block = reinterpret_cast<WanBlockImpl*>(ctx->saved_data["block"].toInt());
    const auto parameter_count = ctx->saved_data["parameters"].toInt();

    // The inputs again, as leaves of a graph of their own.
    variable_list inputs, wrt;
    for (size_t i = 0; i < 3; ++i) {
      inputs.push_back(saved[i].detach().requires_grad_(ctx->needs_input_grad(i)));
      if (ctx->needs_input_grad(i)) wrt.push_back(inputs.back());
    }
    const auto parameters = trainable_parameters(*block);
    TORCH_CHECK(int64_t(parameters.size()) == parameter_count, "a block's trainable parameters changed in backward");
    wrt.insert(wrt.end(), parameters.begin(), parameters.end());

    const auto device = inputs[0].device();
    const auto after_forward = generator_state(device);
    set_generator_state(device, ctx->saved_data["generator"].toTensor());
    at::Tensor output;
    {
      torch::AutoGradMode grad(true);
      AutocastScope autocast(static_cast<at::ScalarType>(ctx->saved_data["autocast"].toInt()), device.type());
      output = block->forward(inputs[0], inputs[1], inputs[2], RopeTable{saved[3], saved[4]});
    }
    set_generator_state(device, after_forward);
    const auto grads = torch::autograd::grad({output}, wrt, {grad_outputs[0]}, /*retain_graph=*/false,
                                             /*create_graph=*/false, /*allow_unused=*/true);

    variable_list result;
    size_t next = 0;
    for (size_t i = 0; i < 3; ++i) result.push_back(ctx->needs_input_grad(i) ? grads[next++] : at::Tensor());
    result.emplace_back();  // rope cos
    result.emplace_back();  // rope sin
    for (int64_t i = 0; i < parameter_count; ++i) result.push_back(grads[next++]);
    result.emplace_back();  // block
    return result;
  }
};

}  // namespace

at::Tensor recomputed_block(WanBlockImpl& block, const at::Tensor& x, const at::Tensor& e0, const at::Tensor& context,
                            const RopeTable& rope) {
  if (!torch::GradMode::is_enabled()) return block.forward(x, e0, context, rope);
  const auto parameters = trainable_parameters(block);
  return BlockRecompute::apply(x, e0, context, rope.cos, rope.sin, at::TensorList(parameters), &block);
}

}  // namespace wt::model
