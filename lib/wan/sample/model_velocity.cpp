#include "wantrain/wan/sample/model_velocity.hpp"

#include <torch/torch.h>

#include <memory>

namespace wt::wan {

VelocityField model_velocity(WanModelImpl& model, at::Tensor cond, at::Tensor uncond, ModelCondition image,
                             BranchPair pair, std::function<void()> before, StepCaching* caching, bool high) {
  auto traded = std::make_shared<at::Tensor>();  // the other half's branch, from the conditional call
  return [&model, cond, uncond, image, pair, before, traded, caching, high](const at::Tensor& x, const at::Tensor& t,
                                                                            bool conditional) {
    auto cache = [&](bool branch_conditional) { return caching ? caching->branch(high, branch_conditional) : nullptr; };
    if (before) before();
    if (!pair.comm) return model.forward(x, t, conditional ? cond : uncond, image, cache(conditional));
    if (!conditional) return *traded;
    const bool mine_conditional = pair.branch == 0;
    const auto mine =
        model.forward(x, t, mine_conditional ? cond : uncond, image, cache(mine_conditional)).contiguous();
    auto sizes = mine.sizes().vec();
    sizes.insert(sizes.begin(), 2);
    const auto both = torch::empty(sizes, mine.options());
    pair.comm->all_gather_async(both, mine)->wait();
    *traded = both[1];
    return both[0];
  };
}

}  // namespace wt::wan
