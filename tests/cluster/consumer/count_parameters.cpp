// Prints the parameter count of a model config, the shape of one forward of
// that model, and the shape of a sample drawn from a dataset sample's
// prompt, through the installed wantrain library: what a user's own tool
// would do. The forward links the DiT, the sample the one sampling core
// (wan/sample/sampling_core) and the dataset writer and reader, from the
// installed static libraries (once an undefined reference: the Wan
// libraries needed each other).
#include <torch/torch.h>

#include <filesystem>
#include <iostream>

#include "wantrain/config.hpp"
#include "wantrain/data/dataset.hpp"
#include "wantrain/data/shard.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/sample/dataset_sample.hpp"
#include "wantrain/wan/sample/sampling_core.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: count_parameters CONFIG.json SCRATCH_DIR\n";
    return 2;
  }
  try {
    const auto config = wt::wan::load_model_config(argv[1]);
    std::cout << "wantrain " << WANTRAIN_VERSION << ": " << wt::wan::parameter_count(config) << " parameters\n";
    torch::NoGradGuard no_grad;
    wt::wan::WanModel model(config);
    model->eval();
    const int64_t channels = config.in_dim - config.condition_channels();
    const auto x = torch::randn({1, channels, 1, 2 * config.patch_size[1], 2 * config.patch_size[2]});
    const auto context = torch::randn({1, config.text_len, config.text_dim});
    const auto out = model->forward(x, torch::full({1}, 500.0), context);
    std::cout << "forward: " << out.sizes() << "\n";

    // A one-sample dataset written and read back, and a sample drawn from its prompt.
    const std::filesystem::path data = std::filesystem::path(argv[2]) / "consumer-data";
    std::filesystem::create_directories(data);
    wt::data::SampleShape shape;
    shape.channels = config.out_dim;
    shape.frames = 1;
    shape.height = shape.width = 2 * config.patch_size[1];
    shape.text_len = config.text_len;
    shape.text_dim = config.text_dim;
    {
      wt::data::ShardWriter writer((data / "shard-00000.h5").string(), shape, 1, /*with_prompt=*/false);
      writer.write(0, torch::randn({shape.channels, 1, shape.height, shape.width}), context[0], int32_t(4));
      writer.close();
    }
    const auto dataset = wt::data::Dataset::open(data.string());
    const auto sample = wt::wan::read_dataset_sample(dataset, 0);
    wt::wan::SampleModels models;
    models.model = model.get();
    wt::wan::SampleCondition condition;
    condition.context = sample.context;
    wt::wan::SamplerOptions sampler;
    sampler.solver = wt::wan::Solver::Euler;
    sampler.steps = 2;
    const auto noise = wt::wan::seeded_noise({1, shape.channels, 1, shape.height, shape.width}, 1);
    const auto latents = wt::wan::draw_latents(models, condition, sampler, noise, at::kFloat);
    std::cout << "sampled: " << latents.sizes() << " from sample 0 of " << dataset.size() << "\n";
  } catch (const wt::UsageError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
  return 0;
}
