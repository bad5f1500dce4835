#include "wantrain/model/recompute.hpp"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "wantrain/model/autocast.hpp"
#include "wantrain/model/wan_model.hpp"

namespace wt::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::ScalarType autocast_dtype(const at::Tensor& x) {
  if (x.is_cuda()) return at::autocast::is_enabled() ? at::autocast::get_autocast_gpu_dtype() : at::kFloat;
  return at::autocast::is_cpu_enabled() ? at::autocast::get_autocast_cpu_dtype() : at::kFloat;
}

class BlockRecompute : public torch::autograd::Function<BlockRecompute> {
 public:
  // Inputs: the tensors (x, e0, context), then the block's trainable
  // parameters, then what is not a tensor.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& e0, const at::Tensor& context,
                            at::TensorList parameters, WanBlockImpl* block, const RopeTable* rope) {
    ctx->save_for_backward({x, e0, context});
    ctx->saved_data["parameters"] = int64_t(parameters.size());
    ctx->saved_data["block"] = reinterpret_cast<int64_t>(block);
    ctx->saved_data["rope"] = reinterpret_cast<int64_t>(rope);
    ctx->saved_data["autocast"] = int64_t(autocast_dtype(x));
    ctx->saved_data["generator"] = at::globalContext().defaultGenerator(x.device()).get_state();
    return block->forward(x, e0, context, *rope);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    auto* block = reinterpret_cast<WanBlockImpl*>(ctx->saved_data["block"].toInt());
    const auto* rope = reinterpret_cast<const RopeTable*>(ctx->saved_data["rope"].toInt());
    const auto parameter_count = ctx->saved_data["parameters"].toInt();

    // The inputs again, as leaves of a graph of their own.
    variable_list inputs, wrt;
    for (size_t i = 0; i < 3; ++i) {
      inputs.push_back(saved[i].detach().requires_grad_(ctx->needs_input_grad(i)));
      if (ctx->needs_input_grad(i)) wrt.push_back(inputs.back());
    }
    std::vector<at::Tensor> parameters;
    for (const auto& item : block->named_parameters(/*recurse=*/true))
      if (item.value().requires_grad()) parameters.push_back(item.value());
    TORCH_CHECK(int64_t(parameters.size()) == parameter_count, "a block's trainable parameters changed in backward");
    wrt.insert(wrt.end(), parameters.begin(), parameters.end());

    auto generator = at::globalContext().defaultGenerator(inputs[0].device());
    const auto after_forward = generator.get_state();
    generator.set_state(ctx->saved_data["generator"].toTensor());
    at::Tensor output;
    {
      torch::AutoGradMode grad(true);
      AutocastScope autocast(static_cast<at::ScalarType>(ctx->saved_data["autocast"].toInt()));
      output = block->forward(inputs[0], inputs[1], inputs[2], *rope);
    }
    generator.set_state(after_forward);
    const auto grads = torch::autograd::grad({output}, wrt, {grad_outputs[0]}, /*retain_graph=*/false,
                                             /*create_graph=*/false, /*allow_unused=*/true);

    variable_list result;
    size_t next = 0;
    for (size_t i = 0; i < 3; ++i) result.push_back(ctx->needs_input_grad(i) ? grads[next++] : at::Tensor());
    for (int64_t i = 0; i < parameter_count; ++i) result.push_back(grads[next++]);
    result.emplace_back();  // block
    result.emplace_back();  // rope
    return result;
  }
};

}  // namespace

at::Tensor recomputed_block(WanBlockImpl& block, const at::Tensor& x, const at::Tensor& e0, const at::Tensor& context,
                            const RopeTable& rope) {
  if (!torch::GradMode::is_enabled()) return block.forward(x, e0, context, rope);
  std::vector<at::Tensor> parameters;
  for (const auto& item : block.named_parameters(/*recurse=*/true))
    if (item.value().requires_grad()) parameters.push_back(item.value());
  return BlockRecompute::apply(x, e0, context, at::TensorList(parameters), &block, &rope);
}

}  // namespace wt::model
