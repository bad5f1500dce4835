// Prints the parameter count of a model config and the shape of one forward
// of that model, through the installed wantrain library: what a user's own
// tool would do. The forward links the DiT from the installed static
// libraries (once an undefined reference: the Wan libraries needed each other).
#include <torch/torch.h>

#include <iostream>

#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/config.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: count_parameters CONFIG.json\n";
    return 2;
  }
  try {
    const auto config = wt::wan::load_model_config(argv[1]);
    std::cout << "wantrain " << WANTRAIN_VERSION << ": " << wt::wan::parameter_count(config) << " parameters\n";
    torch::NoGradGuard no_grad;
    wt::wan::WanModel model(config);
    const auto x = torch::randn(
        {1, config.in_dim - config.condition_channels(), 1, 2 * config.patch_size[1], 2 * config.patch_size[2]});
    const auto context = torch::randn({1, config.text_len, config.text_dim});
    const auto out = model->forward(x, torch::full({1}, 500.0), context);
    std::cout << "forward: " << out.sizes() << "\n";
  } catch (const wt::UsageError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
  return 0;
}
