// `wanbench model`: forward and forward+backward seconds per sample and the
// process's peak RSS for one model config and precision on this machine.
#pragma once

#include <string>

#include "wantrain/wan/model/model_config.hpp"

namespace wt::distributed {
class World;
}  // namespace wt::distributed
namespace wt {
int run_model_bench(distributed::World& world, int argc, char** argv);

// --model-config for the benchmarks that run the model (model, step,
// ckpt): a text-to-video model; an image-to-video one is refused in one line.
wan::WanConfig load_bench_model_config(const std::string& path);
}  // namespace wt
