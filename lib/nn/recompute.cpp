#include "wantrain/nn/recompute.hpp"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <algorithm>
#include <mutex>

#include "wantrain/nn/autocast.hpp"

namespace wt::nn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::vector<at::Tensor> trainable_parameters(const Recomputable& module) {
  std::vector<at::Tensor> parameters;
  for (const auto& item : module.named_parameters(/*recurse=*/true))
    if (item.value().requires_grad()) parameters.push_back(item.value());
  return parameters;
}

// Off while the forward runs without gradients: LibTorch's autocast
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

class Recompute : public torch::autograd::Function<Recompute> {
 public:
  // Inputs: the module's tensors, then its trainable parameters, then the
  // module. Every input is saved as a tensor, not by reference to where it
  // came from: a table the model caches (a Wan model's RoPE table) may be
  // replaced before backward.
  static at::Tensor forward(AutogradContext* ctx, at::TensorList inputs, at::TensorList parameters,
                            Recomputable* module, ActivationOffload* offload) {
    // With offload the first input waits in host memory instead.
    auto saved = inputs.vec();
    ctx->saved_data["offload"] = reinterpret_cast<int64_t>(offload);
    if (offload) {
      ctx->saved_data["offloaded"] = offload->keep(inputs[0]);
      saved.erase(saved.begin());
    }
    ctx->save_for_backward(saved);
    ctx->saved_data["parameters"] = int64_t(parameters.size());
    ctx->saved_data["module"] = reinterpret_cast<int64_t>(module);
    ctx->saved_data["autocast"] = int64_t(autocast_dtype(inputs[0]));
    ctx->saved_data["generator"] = generator_state(inputs[0].device());
    NoAutocastCache no_cache;
    return module->forward_tensors(inputs.vec());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto saved = ctx->get_saved_variables();
    if (auto* offload = reinterpret_cast<ActivationOffload*>(ctx->saved_data["offload"].toInt()))
      saved.insert(saved.begin(), offload->bring_back(ctx->saved_data["offloaded"].toInt()));
    auto* module = reinterpret_cast<Recomputable*>(ctx->saved_data["module"].toInt());
    const auto parameter_count = ctx->saved_data["parameters"].toInt();

    // The inputs again, as leaves of a graph of their own.
    variable_list inputs, wrt;
    for (size_t i = 0; i < saved.size(); ++i) {
      inputs.push_back(saved[i].detach().requires_grad_(ctx->needs_input_grad(i)));
      if (ctx->needs_input_grad(i)) wrt.push_back(inputs.back());
    }
    const auto parameters = trainable_parameters(*module);
    TORCH_CHECK(int64_t(parameters.size()) == parameter_count, "a module's trainable parameters changed in backward");
    wrt.insert(wrt.end(), parameters.begin(), parameters.end());

    const auto device = inputs[0].device();
    const auto after_forward = generator_state(device);
    set_generator_state(device, ctx->saved_data["generator"].toTensor());
    at::Tensor output;
    {
      torch::AutoGradMode grad(true);
      AutocastScope autocast(static_cast<at::ScalarType>(ctx->saved_data["autocast"].toInt()), device.type());
      output = module->forward_tensors(inputs);
    }
    set_generator_state(device, after_forward);
    const auto grads = torch::autograd::grad({output}, wrt, {grad_outputs[0]}, /*retain_graph=*/false,
                                             /*create_graph=*/false, /*allow_unused=*/true);

    variable_list result;
    size_t next = 0;
    for (size_t i = 0; i < saved.size(); ++i) result.push_back(ctx->needs_input_grad(i) ? grads[next++] : at::Tensor());
    for (int64_t i = 0; i < parameter_count; ++i) result.push_back(grads[next++]);
    result.emplace_back();  // the module
    result.emplace_back();  // the offload
    return result;
  }
};

}  // namespace

at::Tensor recomputed(Recomputable& module, const std::vector<at::Tensor>& inputs, ActivationOffload* offload) {
  TORCH_CHECK(
      !inputs.empty() && std::all_of(inputs.begin(), inputs.end(), [](const at::Tensor& t) { return t.defined(); }),
      "recomputed: every input must be a defined tensor, and there must be one");
  if (!torch::GradMode::is_enabled()) return module.forward_tensors(inputs);
  const auto parameters = trainable_parameters(module);
  return Recompute::apply(at::TensorList(inputs), at::TensorList(parameters), &module, offload);
}

}  // namespace wt::nn
