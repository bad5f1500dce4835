// `wantrain export`: a checkpoint's weights (or EMA) as safetensors; a LoRA
// checkpoint's adapters as a LoRA file, or merged into their base.
#pragma once

namespace wt::distributed {
class World;
}  // namespace wt::distributed
namespace wt {

int run_export(distributed::World& world, int argc, char** argv);

}  // namespace wt
