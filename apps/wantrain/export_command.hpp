// `wantrain export`: a checkpoint's weights (or EMA) as safetensors.
#pragma once

namespace wt::distributed {
class World;
}  // namespace wt::distributed
namespace wt {

int run_export(distributed::World& world, int argc, char** argv);

}  // namespace wt
